// swarmd dashboard: one EventSource on /api/events carries the snapshot and
// every change after it; nothing here polls the server. Every value from
// the server is set as text (textContent), never parsed as HTML.
'use strict';

const MAX_EVENTS = 300;
const MAX_LOG_CHARS = 256 * 1024;
const TOKEN_KEY = 'swarmd-token';

const S = {
  agents: new Map(), // name -> agent
  rows: new Map(), // name -> {tr, cells}
  features: {},
  skew: 0, // server clock minus ours, from the snapshot
  lastEventID: 0,
  token: '',
  unlocked: false,
  filter: '',
  selected: '',
  logSource: null,
  logChars: 0,
  liveFrom: 0, // events after this id arrived live, not as catch-up
  events: null,
  task: { id: 0, loading: false, stale: false }, // the task view
};

// Event-to-DOM latencies (ms, same-machine clocks), for the benchmarks.
window.swarmdStats = { eventLatencyMs: [] };

const $ = (id) => document.getElementById(id);

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function now() { return Date.now() + S.skew; }

function age(ts) {
  if (!ts) return '-';
  const s = Math.max(0, Math.floor((now() - Date.parse(ts)) / 1000));
  if (s < 60) return s + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm';
  return Math.floor(s / 3600) + 'h';
}

function tokens(sp) {
  if (!sp) return '-';
  const n = sp.tokens_in + sp.tokens_out;
  if (n >= 1e6) return (n / 1e6).toFixed(1) + 'M';
  if (n >= 1e3) return (n / 1e3).toFixed(1) + 'k';
  return String(n);
}

// cost: tokens with no cost are "unpriced" (no price for the model), not $0.
function cost(sp) {
  if (sp && sp.cost_usd) return '$' + sp.cost_usd.toFixed(2);
  return sp && sp.tokens_in + sp.tokens_out > 0 ? 'unpriced' : '-';
}

function toast(msg) {
  const t = $('toast');
  t.textContent = msg;
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 5000);
}

// ---- the live stream ----

function connect() {
  const url = S.lastEventID > 0 ? '/api/events?after=' + S.lastEventID : '/api/events?tail=200';
  const es = new EventSource(url);
  S.events = es;
  es.addEventListener('open', () => setConn('live', 'live'));
  es.addEventListener('error', () => {
    if (es.readyState === EventSource.CLOSED) {
      // The server refused the stream (it is stopping): start a new one
      // after the last event we have, a little later.
      setConn('down', 'disconnected');
      setTimeout(connect, 2000);
    } else {
      setConn('down', 'reconnecting…');
    }
  });
  es.addEventListener('snapshot', (e) => { applySnapshot(JSON.parse(e.data)); if (S.task.id) loadTask(); });
  es.addEventListener('event', (e) => {
    const ev = JSON.parse(e.data);
    addEvent(ev);
    if (S.task.id && ev.task_id === S.task.id) loadTask(); // the task view is live
  });
  es.addEventListener('agent', (e) => upsertAgent(JSON.parse(e.data)));
  es.addEventListener('removed', (e) => removeAgent(JSON.parse(e.data).name));
  es.addEventListener('tasks', (e) => renderBoard(JSON.parse(e.data)));
  es.addEventListener('merge', (e) => { renderMerge(JSON.parse(e.data)); if (S.task.id) loadTask(); });
  es.addEventListener('fault', (e) => setFault(JSON.parse(e.data).fault));
  es.addEventListener('inbox', (e) => renderInbox(JSON.parse(e.data) || []));
  es.addEventListener('daemons', (e) => renderDaemons(JSON.parse(e.data) || []));
}

function setConn(cls, text) {
  const c = $('conn');
  c.className = 'conn ' + cls;
  c.textContent = text;
}

function applySnapshot(s) {
  S.skew = Date.parse(s.at) - Date.now();
  S.features = s.features || {};
  S.liveFrom = s.last_event_id;
  const names = new Set(s.agents.map((a) => a.name));
  for (const name of [...S.agents.keys()]) if (!names.has(name)) removeAgent(name);
  for (const a of s.agents) upsertAgent(a, true);
  summarize();
  renderBoard(s.tasks);
  renderMerge(s.merge);
  setFault(s.fault || '');
  renderInbox(s.inbox || []);
  renderDaemons(s.daemons || []);
  setIsolation(S.features.isolation || '');
  $('unlock').hidden = !S.features.writes || S.unlocked;
  if (!S.features.writes && S.unlocked) lock();
}

// renderInbox lists what needs a person, each with the command that deals
// with it (as `swarmd inbox` does); a task's line opens the task.
function renderInbox(needs) {
  $('inbox-panel').hidden = needs.length === 0;
  $('inbox-count').textContent = needs.length ? '(' + needs.length + ')' : '';
  const list = $('inbox');
  list.replaceChildren();
  for (const n of needs) {
    const li = el('li');
    li.dataset.kind = n.kind;
    li.appendChild(el('span', 'what', n.what));
    li.appendChild(el('code', 'fix', n.fix));
    if (n.task) {
      li.classList.add('link');
      li.addEventListener('click', () => openTask(n.task));
    }
    list.appendChild(li);
  }
}

// renderDaemons lists the swarm's daemons (as `swarmd daemons` does) when
// there is more than one: the agents table shows this daemon's agents
// only, and a daemon whose leases expired has died or been cut off.
function renderDaemons(ds) {
  $('daemons-panel').hidden = ds.length < 2;
  const down = ds.filter((d) => d.expired_leases > 0).length;
  $('daemon-count').textContent = '(' + ds.length + (down ? ', ' + down + ' with expired leases' : '') + ')';
  const body = $('daemons').tBodies[0];
  body.replaceChildren();
  for (const d of ds) {
    const tr = el('tr');
    tr.dataset.daemon = d.name;
    tr.className = d.expired_leases > 0 ? 'expired' : (d.live_leases > 0 ? 'live' : 'stopped');
    tr.appendChild(el('td', 'name', d.name + (d.self ? ' (this daemon)' : '')));
    let leases = d.live_leases + ' live';
    if (d.expired_leases > 0) leases += ', ' + d.expired_leases + ' expired';
    tr.appendChild(el('td', 'leases', leases));
    tr.appendChild(el('td', 'agents', d.agents.join(', ')));
    body.appendChild(tr);
  }
}

// setIsolation shows what contains the sessions, loudly when a part is not
// in force.
function setIsolation(text) {
  const box = $('isolation');
  box.hidden = !text;
  box.textContent = text;
  box.classList.toggle('warn', text.includes('NOT in force') || text.includes('isolation off'));
}

function setFault(f) {
  const box = $('fault');
  box.hidden = !f;
  box.textContent = f ? 'DAEMON UNHEALTHY: ' + f : '';
}

// ---- agents ----

const COLS = ['ind', 'name', 'state', 'seq', 'session', 'output', 'errors', 'tokens', 'cost', 'task', 'actions'];
const NUM = new Set(['seq', 'session', 'output', 'errors', 'tokens', 'cost']);

function upsertAgent(a, batch) {
  S.agents.set(a.name, a);
  let row = S.rows.get(a.name);
  if (!row) {
    const tr = el('tr');
    tr.dataset.agent = a.name;
    const cells = {};
    for (const c of COLS) {
      cells[c] = el('td', NUM.has(c) ? 'num' : c);
      tr.appendChild(cells[c]);
    }
    tr.addEventListener('click', (e) => { if (!e.target.closest('button')) openLog(a.name); });
    row = { tr, cells };
    S.rows.set(a.name, row);
    insertSorted(tr, a.name);
  }
  fillRow(row, a);
  if (!batch) summarize();
}

function insertSorted(tr, name) {
  const body = $('agents').tBodies[0];
  for (const other of body.rows) {
    if (other.dataset.agent > name) { body.insertBefore(tr, other); return; }
  }
  body.appendChild(tr);
}

function fillRow(row, a) {
  const c = row.cells;
  row.tr.dataset.state = a.state;
  row.tr.dataset.visual = a.visual;
  c.ind.textContent = a.indicator;
  c.ind.className = 'ind v-' + a.visual;
  c.ind.title = a.visual;
  c.name.textContent = a.name;
  c.state.textContent = '';
  // An agent waiting for mail or a task is idle: the machine holds it in
  // BuildingPrompt, but it builds nothing.
  const idle = a.health === 'idle';
  c.state.appendChild(el('span', 'v-' + a.visual, idle ? 'idle' : a.state));
  const health = idle ? '' : a.health || (a.visual === 'paused' ? 'paused' : '');
  if (health) c.state.appendChild(el('span', 'health v-' + a.visual, health));
  if (a.reason && (a.state === 'Stopped' || a.state === 'CoolingDown')) c.state.title = a.reason;
  c.seq.textContent = a.seq;
  c.errors.textContent = a.consecutive_errors + '/' + a.total_errors;
  c.errors.className = 'num' + (a.consecutive_errors > 0 ? ' err' : '');
  c.tokens.textContent = tokens(a.spend);
  c.cost.textContent = cost(a.spend);
  c.task.textContent = a.task ? '#' + a.task.id + ' ' + a.task.title : '';
  c.task.title = c.task.textContent;
  fillAges(row, a);
  fillActions(c.actions, a);
  applyFilter(row.tr, a);
}

function fillAges(row, a) {
  const live = a.state === 'Running' || a.state === 'Interrupting';
  row.cells.session.textContent = live ? age(a.session_started) : '-';
  row.cells.output.textContent = live ? age(a.last_output) : '-';
}

function fillActions(td, a) {
  td.textContent = '';
  if (!S.unlocked) return;
  if (a.state === 'Stopped') td.appendChild(actionButton('start', a.name));
  else td.appendChild(actionButton('stop', a.name));
  const pause = actionButton(a.paused ? 'resume' : 'pause', a.name);
  if (!S.features.pause) {
    pause.disabled = true;
    pause.title = 'pause is not available in this swarmd';
  }
  td.appendChild(pause);
  const mail = el('button', '', 'mail');
  mail.type = 'button';
  mail.addEventListener('click', () => openMail(a.name));
  td.appendChild(mail);
}

function actionButton(verb, name) {
  const b = el('button', 'act-' + verb, verb);
  b.type = 'button';
  b.addEventListener('click', async () => {
    b.disabled = true;
    try {
      await post('/api/agents/' + encodeURIComponent(name) + '/' + verb);
      toast(verb + ' ' + name + ': sent');
    } catch (err) {
      toast(verb + ' ' + name + ': ' + err.message);
      b.disabled = false;
    }
  });
  return b;
}

function removeAgent(name) {
  const row = S.rows.get(name);
  if (row) row.tr.remove();
  S.rows.delete(name);
  S.agents.delete(name);
  summarize();
}

function summarize() {
  const counts = {};
  for (const a of S.agents.values()) counts[a.visual] = (counts[a.visual] || 0) + 1;
  const box = $('summary');
  box.textContent = '';
  const order = ['running', 'stalled', 'spawning', 'merging', 'idle', 'paused', 'dead', 'unknown'];
  for (const v of order) {
    if (!counts[v]) continue;
    const a = [...S.agents.values()].find((x) => x.visual === v);
    box.appendChild(el('span', 'v-' + v, a.indicator + ' ' + counts[v] + ' ' + v));
  }
  $('agent-count').textContent = S.agents.size;
}

function applyFilter(tr, a) {
  const f = S.filter;
  if (!f) { tr.hidden = false; return; }
  const hay = [a.name, a.state, a.visual, a.health || '', a.task ? a.task.title : ''].join(' ').toLowerCase();
  tr.hidden = !hay.includes(f);
}

// ---- tasks and the merge queue ----

function renderBoard(b) {
  const box = $('board');
  box.textContent = '';
  let total = 0;
  for (const st of b.states) total += b.counts[st] || 0;
  $('task-count').textContent = total;
  if (total === 0) {
    box.appendChild(el('div', 'empty', 'no tasks (swarmd task add, or New task…)'));
    return;
  }
  const byState = new Map();
  for (const t of b.tasks) {
    if (!byState.has(t.state)) byState.set(t.state, []);
    byState.get(t.state).push(t);
  }
  for (const st of b.states) {
    const n = b.counts[st] || 0;
    if (n === 0) continue;
    const col = el('div', 'column');
    col.dataset.state = st;
    col.appendChild(el('h3', '', st + ' (' + n + ')'));
    for (const t of byState.get(st) || []) {
      const card = el('div', 'card');
      card.dataset.task = t.id;
      card.addEventListener('click', () => openTask(t.id));
      card.appendChild(el('div', '', '#' + t.id + ' ' + t.title));
      const who = t.claimant || t.assignee;
      if (who) card.appendChild(el('div', 'who', who));
      col.appendChild(card);
    }
    box.appendChild(col);
  }
  if (b.omitted) box.appendChild(el('div', 'empty', '+' + b.omitted + ' finished tasks not shown'));
}

function renderMerge(m) {
  const box = $('merge');
  box.textContent = '';
  if (!m.configured) {
    box.appendChild(el('div', 'empty', m.note || 'not configured'));
    return;
  }
  let head = 'depth ' + (m.depth || 0);
  if (m.gate_running) head += ' · gate running (run ' + m.gate_seq + ')';
  if (m.ahead_seq) head += ' · a run ahead (run ' + m.ahead_seq + ')';
  if (m.paused) head += ' · paused';
  box.appendChild(el('div', 'depth', head));
  if (m.note) box.appendChild(el('div', 'health', m.note));
  if (!m.items.length) box.appendChild(el('div', 'empty', 'empty'));
  for (const it of m.items) {
    const card = el('div', 'card');
    card.dataset.task = it.task_id;
    card.dataset.state = it.state;
    card.addEventListener('click', () => openTask(it.task_id));
    card.appendChild(el('div', '', '#' + it.task_id + ' ' + it.title));
    card.appendChild(el('div', 'who', it.agent + ' · ' + it.state + (it.note ? ' · ' + it.note : '')));
    box.appendChild(card);
  }
  const recent = m.recent || [];
  if (recent.length) {
    box.appendChild(el('div', 'who', 'last results'));
    const ol = el('ol', 'events recent');
    for (const r of recent.slice(0, 5)) {
      const li = el('li');
      li.dataset.task = r.task_id;
      li.dataset.result = r.result;
      li.addEventListener('click', () => openTask(r.task_id));
      li.appendChild(el('span', 'at', new Date(r.at).toLocaleTimeString([], { hour12: false })));
      li.appendChild(el('span', 'who', '#' + r.task_id));
      li.appendChild(el('span', r.result === 'merged' ? 'v-running' : 'err', r.result + (r.commit ? ' ' + r.commit.slice(0, 7) : '')));
      li.appendChild(el('span', 'why', ' ' + r.title));
      ol.appendChild(li);
    }
    box.appendChild(ol);
  }
}

// ---- one task's view ----

function openTask(id) {
  S.task = { id: Number(id), loading: false, stale: false };
  $('task-panel').hidden = false;
  $('task-title').textContent = 'Task #' + id;
  $('task-view').textContent = 'reading…';
  loadTask();
}

function closeTask() {
  S.task = { id: 0, loading: false, stale: false };
  $('task-panel').hidden = true;
  $('task-view').textContent = '';
}

// loadTask reads the task view again; one read at a time, and one more
// after it when something changed meanwhile.
async function loadTask() {
  if (S.task.loading) { S.task.stale = true; return; }
  const id = S.task.id;
  S.task.loading = true;
  S.task.stale = false;
  let tv = null;
  let err = '';
  try {
    const resp = await fetch('/api/tasks/' + id);
    const body = await resp.json();
    if (resp.ok) tv = body; else err = body.error || resp.statusText;
  } catch (e) { err = e.message; }
  if (S.task.id !== id) return; // closed or another task opened meanwhile
  S.task.loading = false;
  if (tv) renderTask(tv); else $('task-view').textContent = 'task #' + id + ': ' + err;
  if (S.task.stale) loadTask();
}

function short(h) { return h ? h.slice(0, 7) : ''; }

function renderTask(tv) {
  const t = tv.task;
  $('task-title').textContent = 'Task #' + t.id + ': ' + t.title;
  const box = $('task-view');
  box.textContent = '';
  box.dataset.task = t.id;
  box.dataset.state = t.state;
  const dl = el('dl');
  const row = (k, v, cls) => {
    if (v === '' || v === undefined || v === null) return;
    dl.appendChild(el('dt', '', k));
    const dd = el('dd', cls || '', v);
    dd.dataset.key = k;
    dl.appendChild(dd);
  };
  row('state', t.state);
  row('claimed by', t.claimant || '');
  row('assigned to', t.assignee || '');
  row('reviewer', t.reviewer ? t.reviewer + (t.review_state ? ' (' + t.review_state + ')' : '') : '');
  row('head', tv.head ? short(tv.head) + ' (frozen at DONE)' : '');
  row('work head', tv.work_head ? short(tv.work_head) : '');
  const mg = tv.merge;
  if (mg) {
    let s = mg.commit ? 'merged as ' + short(mg.commit) : mg.state + (mg.result ? ' (' + mg.result + ')' : '');
    s += ' · head ' + short(mg.head) + ' · ' + mg.attempts + ' gate run' + (mg.attempts === 1 ? '' : 's');
    row('merge', s);
  } else {
    row('merge', 'not queued');
  }
  const sp = tv.spend;
  row('spend', sp.sessions + ' sessions · ' + tokens(sp) + ' tokens (' + sp.tokens_in + ' in, ' + sp.tokens_out + ' out) · $' + sp.cost_usd.toFixed(2));
  row('result', tv.result || '');
  box.appendChild(dl);
  if (tv.body) {
    box.appendChild(el('h3', '', 'Body'));
    box.appendChild(el('pre', 'log', tv.body));
  }
  box.appendChild(el('h3', '', 'Timeline'));
  const tl = el('ol', 'timeline');
  tl.id = 'task-timeline';
  for (const e of tv.timeline) {
    const li = el('li');
    li.dataset.to = e.to;
    li.appendChild(el('span', 'at', new Date(e.at).toLocaleTimeString([], { hour12: false })));
    li.appendChild(el('span', '', (e.from ? e.from + ' → ' : '') + e.to + (e.abort_reason ? ' [' + e.abort_reason + ']' : '') + ' '));
    li.appendChild(el('span', 'why', e.actor + (e.reason ? ': ' + e.reason : '')));
    tl.appendChild(li);
  }
  box.appendChild(tl);
  if (tv.verdicts.length) {
    box.appendChild(el('h3', '', 'Verdicts'));
    const ol = el('ol');
    ol.id = 'task-verdicts';
    for (const v of tv.verdicts) {
      const li = el('li');
      li.appendChild(el('span', 'at', 'round ' + v.round + ' · ' + v.reviewer));
      li.appendChild(el('span', 'verdict-' + v.verdict, v.verdict));
      if (v.text) li.appendChild(el('span', 'why', ': ' + v.text));
      ol.appendChild(li);
    }
    box.appendChild(ol);
  }
  if (tv.diff_stat || tv.diff_error) {
    box.appendChild(el('h3', '', 'Diff stat of ' + short(tv.head) + ' against ' + short(tv.base)));
    const pre = el('pre', 'log', tv.diff_stat || tv.diff_error);
    pre.id = 'task-diff';
    box.appendChild(pre);
  }
  if (mg && mg.gate_log) {
    box.appendChild(el('h3', '', 'Gate log, run ' + mg.gate_seq + ' (tail)'));
    const pre = el('pre', 'log', mg.gate_log);
    pre.id = 'task-gate';
    box.appendChild(pre);
  }
}

// ---- events ----

// The feed shows a session as one line (a <details> whose summary says how
// it ended; opened, its events), as `swarmd top` does: an agent's events
// with a session id join that session's line, and its events without one
// (worktree ready, idle, awake) the line of its latest session until the
// agent stops. Task transitions are lines of their own.
const sessions = new Map(); // session id -> {li, summary, list, events}
const latestSession = new Map(); // agent -> its newest session's group

function eventLi(e, withWho) {
  const li = el('li');
  li.dataset.id = e.id;
  const at = new Date(e.at);
  li.appendChild(el('span', 'at', at.toLocaleTimeString([], { hour12: false })));
  if (withWho) li.appendChild(el('span', 'who', e.task_id ? 'task #' + e.task_id : e.agent));
  const what = e.task_id ? (e.from ? e.from + ' → ' : '') + e.to + (e.agent ? ' (' + e.agent + ')' : '')
    : e.from + ' —' + e.event + '→ ' + e.to;
  li.appendChild(el('span', '', what + ' '));
  if (e.reason || e.actor) li.appendChild(el('span', 'why', [e.actor, e.reason].filter(Boolean).join(': ')));
  return li;
}

function sessionSeq(e) {
  if (e.seq) return e.seq;
  const m = /^(\d+)-/.exec((e.session_id || '').slice(e.agent.length + 1));
  return m ? +m[1] : 0;
}

// sessionText says how a session went, as view.Feed does for `swarmd top`.
function sessionText(g) {
  let state = '', ended = '', started = 0, idle = false, dur = 0;
  for (const e of g.events) {
    state = e.to;
    if (e.event === 'SessionStarted') started = Date.parse(e.at);
    else if (e.event === 'SessionExited') { ended = e.reason || e.event; if (started) dur = Date.parse(e.at) - started; }
    else if (e.event === 'Idle') idle = true;
    else if (e.event === 'Awake' || e.event === 'PromptReady') idle = false;
  }
  let s = '#' + g.seq + ': ';
  if (!ended) s += state;
  else s += ended + ' → ' + (idle && state === 'BuildingPrompt' ? 'idle' : state);
  if (dur > 0) s += ' (' + (Math.round(dur / 100) / 10) + 's)';
  return s;
}

function newSession(e) {
  const li = el('li', 'session');
  li.dataset.id = e.id;
  li.dataset.session = e.session_id;
  const det = el('details');
  const summary = el('summary');
  summary.appendChild(el('span', 'at', new Date(e.at).toLocaleTimeString([], { hour12: false })));
  summary.appendChild(el('span', 'who', e.agent));
  const text = el('span', 'what');
  summary.appendChild(text);
  const list = el('ol', 'session-events');
  det.appendChild(summary);
  det.appendChild(list);
  li.appendChild(det);
  return { li, text, list, events: [], seq: sessionSeq(e), agent: e.agent };
}

function addEvent(e) {
  if (e.id <= S.lastEventID) return; // a resumed stream repeats nothing, but a reconnect may
  S.lastEventID = e.id;
  const list = $('events');
  let g = null;
  if (!e.task_id && e.agent) {
    if (e.session_id) {
      g = sessions.get(e.session_id);
      if (!g) {
        g = newSession(e);
        sessions.set(e.session_id, g);
        list.insertBefore(g.li, list.firstChild);
      }
      latestSession.set(e.agent, g);
    } else {
      g = latestSession.get(e.agent) || null;
      if (g && g.events[g.events.length - 1].to === 'Stopped') g = null;
    }
  }
  if (g) {
    g.events.push(e);
    g.list.appendChild(eventLi(e, false));
    g.text.textContent = sessionText(g);
  } else {
    if (!e.task_id) latestSession.delete(e.agent); // a stop, a pause: the session's line is closed
    list.insertBefore(eventLi(e, true), list.firstChild);
  }
  while (list.childElementCount > MAX_EVENTS) {
    const last = list.lastElementChild;
    if (last.dataset.session) {
      const old = sessions.get(last.dataset.session);
      sessions.delete(last.dataset.session);
      if (old && latestSession.get(old.agent) === old) latestSession.delete(old.agent);
    }
    last.remove();
  }
  if (e.id > S.liveFrom) {
    const lat = window.swarmdStats.eventLatencyMs;
    lat.push(Date.now() - new Date(e.at).getTime());
    if (lat.length > 5000) lat.shift();
  }
}

// ---- an agent's log ----

function openLog(name) {
  if (S.logSource) S.logSource.close();
  for (const row of S.rows.values()) row.tr.classList.toggle('selected', row.tr.dataset.agent === name);
  S.selected = name;
  $('log-panel').hidden = false;
  $('log-title').textContent = 'Log: ' + name;
  const pre = $('log');
  pre.textContent = '';
  S.logChars = 0;
  const src = new EventSource('/api/agents/' + encodeURIComponent(name) + '/log?follow=1');
  S.logSource = src;
  src.addEventListener('session', (e) => {
    appendLog(el('span', 'session', '── session ' + JSON.parse(e.data).session + ' ──\n'));
  });
  src.addEventListener('text', (e) => appendLog(document.createTextNode(e.data)));
  src.addEventListener('error', (e) => {
    if (e.data) appendLog(el('span', 'err', '\n' + JSON.parse(e.data).error + '\n'));
  });
}

function appendLog(node) {
  const pre = $('log');
  const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
  pre.appendChild(node);
  S.logChars += node.textContent.length;
  while (S.logChars > MAX_LOG_CHARS && pre.firstChild) {
    S.logChars -= pre.firstChild.textContent.length;
    pre.firstChild.remove();
  }
  if (atEnd) pre.scrollTop = pre.scrollHeight;
}

function closeLog() {
  if (S.logSource) S.logSource.close();
  S.logSource = null;
  S.selected = '';
  $('log-panel').hidden = true;
  for (const row of S.rows.values()) row.tr.classList.remove('selected');
}

// ---- writes: the token ----

async function post(path, body) {
  const resp = await fetch(path, {
    method: 'POST',
    headers: { Authorization: 'Bearer ' + S.token, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (resp.status === 401) {
    lock();
    throw new Error('the token was refused');
  }
  if (!resp.ok) {
    let msg = resp.statusText;
    try { msg = (await resp.json()).error || msg; } catch (_) { /* not JSON */ }
    throw new Error(msg);
  }
  return resp.status === 204 || resp.status === 202 ? null : resp.json();
}

async function unlock(token) {
  S.token = token;
  try {
    await post('/api/auth');
  } catch (err) {
    toast('unlock: ' + err.message);
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  setUnlocked(true);
}

function lock() {
  S.token = '';
  sessionStorage.removeItem(TOKEN_KEY);
  setUnlocked(false);
}

function setUnlocked(on) {
  S.unlocked = on;
  document.body.classList.toggle('unlocked', on);
  for (const id of ['new-mail', 'new-task', 'lock']) $(id).hidden = !on;
  $('unlock').hidden = on || !S.features.writes;
  $('token-form').hidden = true;
  for (const [name, row] of S.rows) fillActions(row.cells.actions, S.agents.get(name));
}

// ---- dialogs ----

function agentOptions(select, first) {
  select.textContent = '';
  const o = el('option', '', first[1]);
  o.value = first[0];
  select.appendChild(o);
  for (const name of [...S.agents.keys()].sort()) {
    const opt = el('option', '', name);
    opt.value = name;
    select.appendChild(opt);
  }
}

function openMail(to) {
  agentOptions($('mail-to'), ['*', 'every agent']);
  $('mail-to').value = to || '*';
  $('mail-dialog').showModal();
}

function wireDialogs() {
  for (const d of document.querySelectorAll('dialog')) {
    d.querySelector('.cancel').addEventListener('click', () => d.close());
  }
  $('new-mail').addEventListener('click', () => openMail(S.selected));
  $('mail-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const to = $('mail-to').value;
    try {
      const r = await post('/api/mail', {
        to: to === '*' ? '' : to, all: to === '*', subject: $('mail-subject').value,
        body: $('mail-body').value, urgent: $('mail-urgent').checked,
      });
      toast('mail sent (' + r.ids.length + ')');
      $('mail-form').reset();
      $('mail-dialog').close();
    } catch (err) { toast('mail: ' + err.message); }
  });
  $('new-task').addEventListener('click', () => {
    agentOptions($('task-to'), ['', 'any agent']);
    $('task-dialog').showModal();
  });
  $('task-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    try {
      const t = await post('/api/tasks', {
        title: $('task-title').value, body: $('task-body').value, to: $('task-to').value,
        priority: Number($('task-priority').value) || 0, plan: $('task-plan').checked,
      });
      toast('task #' + t.id + ' added (' + t.state + ')');
      $('task-form').reset();
      $('task-dialog').close();
    } catch (err) { toast('task: ' + err.message); }
  });
}

function init() {
  $('filter').addEventListener('input', (e) => {
    S.filter = e.target.value.trim().toLowerCase();
    for (const [name, row] of S.rows) applyFilter(row.tr, S.agents.get(name));
  });
  $('log-close').addEventListener('click', closeLog);
  $('task-close').addEventListener('click', closeTask);
  $('unlock').addEventListener('click', () => {
    $('unlock').hidden = true;
    $('token-form').hidden = false;
    $('token').focus();
  });
  $('token-form').addEventListener('submit', (e) => {
    e.preventDefault();
    unlock($('token').value);
    $('token').value = '';
  });
  $('lock').addEventListener('click', lock);
  wireDialogs();
  // A token in the fragment (#token=...) unlocks at once and is removed
  // from the address bar; the fragment never reaches the server.
  const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (m) {
    history.replaceState(null, '', location.pathname + location.search);
    unlock(decodeURIComponent(m[1]));
  } else if (sessionStorage.getItem(TOKEN_KEY)) {
    unlock(sessionStorage.getItem(TOKEN_KEY));
  }
  // #task=N opens that task's view.
  const tm = /(?:^#|&)task=(\d+)/.exec(location.hash);
  if (tm) openTask(Number(tm[1]));
  // Ages are computed here from the timestamps: no request.
  setInterval(() => {
    for (const [name, row] of S.rows) if (!row.tr.hidden) fillAges(row, S.agents.get(name));
  }, 1000);
  connect();
}

init();
