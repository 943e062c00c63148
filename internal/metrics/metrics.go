// Package metrics defines every Prometheus metric of swarmd (docs/operations.md) on a
// registry of its own. Metrics are fed by events (runner transitions, ended
// sessions, mailbox and hook calls) rather than sampled at scrape time, so a
// scrape costs the same however busy the agents are.
package metrics

import (
	"math"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/runner"
)

// BuildInfo is exported as the labels of swarmd_build_info.
type BuildInfo struct {
	Version   string
	Commit    string
	GoVersion string
}

// Label values of swarmd_sessions_total{outcome}: runner.SessionRecord's
// OutcomeLabel values.
var outcomeLabels = [...]string{
	runner.OutcomeSuccess, runner.OutcomeError, runner.OutcomeTimeout, runner.OutcomeInterrupted, runner.OutcomeMaxTurns,
	runner.OutcomePermissionDenied, runner.OutcomeBudgetExhausted,
}

// Sessions run from seconds (a backend that fails at once) to hours.
var sessionBuckets = [...]float64{1, 5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200}

// mergeResults are the result label values of swarmd_merges_total (package
// merge's results and rejection kinds); each series exists from the start.
var mergeResults = [...]string{"merged", "conflict", "gate_failed", "timeout", "corrupt", "carried", "history", "stale"}

// aheadResults are the result label values of swarmd_merge_runs_ahead_total
// (package merge's runs ahead); each series exists from the start.
var aheadResults = [...]string{"passed", "failed", "dropped"}

// Gates run a project's tests: seconds to the merge timeout (30m default).
var gateBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600}

// Interrupt latency is an in-process hand-off measured in microseconds, but a
// slow router poll or a busy database can stretch it to seconds.
var latencyBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10,
}

// Metrics holds swarmd's metrics. It implements runner.Observer. All methods
// are safe for concurrent use.
type Metrics struct {
	reg     *prometheus.Registry
	handler http.Handler

	desc             agentDescs // the per-agent metrics (agents.go)
	stateLabels      [len(agent.AllStates)]*dto.LabelPair
	outcomeLabels    [len(outcomeLabels)]*dto.LabelPair
	interruptLatency prometheus.Histogram
	mailSent         *prometheus.CounterVec
	mailNormal       prometheus.Counter
	mailUrgent       prometheus.Counter
	hookRuns         *prometheus.CounterVec
	tokens           *prometheus.CounterVec
	cost             *prometheus.CounterVec
	toolCalls        *prometheus.CounterVec
	sessionCPU       *prometheus.CounterVec
	oomKills         *prometheus.CounterVec
	targetMoves      *prometheus.CounterVec
	quarantined      *prometheus.CounterVec
	mergeDepth       prometheus.Gauge
	merges           *prometheus.CounterVec
	runsAhead        *prometheus.CounterVec
	gateDuration     prometheus.Histogram
	gitMaintenance   *prometheus.HistogramVec
	pushes           *prometheus.CounterVec
	settleLatency    prometheus.Histogram
	storeWait        prometheus.Counter

	mu     sync.RWMutex
	agents map[string]*series
}

// New creates the metrics on a fresh registry, together with the Go and
// process collectors and swarmd_build_info. It is long because it is the
// list of every metric swarmd exports, each defined once, here.
func New(build BuildInfo) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		reg:  reg,
		desc: newAgentDescs(),
		interruptLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "swarmd_interrupt_latency_seconds",
			Help:    "Time from an urgent message's commit to the cancel signal sent to the recipient's session.",
			Buckets: latencyBuckets,
		}),
		mailSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmd_mailbox_messages_total",
			Help: "Messages written to the mailbox, by urgency.",
		}, []string{"urgency"}),
		hookRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmd_hook_runs_total",
			Help: "Hook runs by event and result (ok, error, timeout, blocked).",
		}, []string{"event", "result"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmd_tokens_total",
			Help: "LLM tokens used by the agent's sessions, by kind.",
		}, []string{"agent", "kind"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmd_cost_usd_total",
			Help: "Cost in US dollars of the agent's sessions, by backend: as the backend reported it, else tokens times the configured prices.",
		}, []string{"agent", "backend"}),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmd_tool_calls_total",
			Help: "Tool calls made by the agent's sessions.",
		}, []string{"agent"}),
		sessionCPU: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmd_session_cpu_seconds_total",
			Help: "CPU time of the agent's sessions' whole process trees, from their cgroups (isolation; 0 without).",
		}, []string{"agent"}),
		oomKills: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmd_session_oom_kills_total",
			Help: "Sessions of the agent the kernel killed over its memory_max (abort reason oom_killed).",
		}, []string{"agent"}),
		targetMoves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmd_merge_target_moves_total",
			Help: "Moves of the merge target that the merge queue did not make, by kind (advanced, rewound, moved; remote: the remote's target at a commit no merge queue made). Alert on any.",
		}, []string{"kind"}),
		quarantined: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmd_quarantine_objects_total",
			Help: "Git objects the agents' sandboxes wrote, checked at the end of their sessions and hooks: moved (into the repository) or refused (their content does not match their name: dropped; alert on any).",
		}, []string{"result"}),
		mergeDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "swarmd_merge_queue_depth",
			Help: "Tasks in the merge queue, the one under test included, reported by the daemon that runs the queue (on a shared store the merge leader; 0 on the others).",
		}),
		merges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmd_merges_total",
			Help: "Merge queue results: merged, conflict, gate_failed, timeout, corrupt (objects of the change replaced in the object store), carried (the change carries merges of the queue's that the target lacks), history (merged as its history stands, it would not be the change reviewed), stale (an entry dropped unmerged: not its task's frozen head, or the task not ready to merge).",
		}, []string{"result"}),
		runsAhead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmd_merge_runs_ahead_total",
			Help: "Gate runs ahead of the batch under test (merge.parallel: 2), by what came of them: passed (the next batch went in on it), failed (its bisection began on it), dropped (its base never became the target: killed or ignored).",
		}, []string{"result"}),
		gateDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "swarmd_gate_duration_seconds",
			Help:    "Wall-clock duration of merge gate runs.",
			Buckets: gateBuckets,
		}),
		gitMaintenance: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "swarmd_git_maintenance_duration_seconds",
			Help:    "Runs of the daemon's git gc --auto (maintenance.gc), by result: ok, failed, timeout (ended at maintenance.timeout), stopped (by the daemon's stop). Alert on failed or timeout runs that repeat.",
			Buckets: gateBuckets,
		}, []string{"result"}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmd_pushes_total",
			Help: "Pushes of branches to the swarm's remote (config remote): ok, failed.",
		}, []string{"result"}),
		settleLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "swarmd_settle_latency_seconds",
			Help:    "Time from a session's end to its outcome (mail acks, task report, verdict, spend) committed to the store.",
			Buckets: latencyBuckets,
		}),
		storeWait: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swarmd_settle_store_wait_seconds_total",
			Help: "Seconds agents waited for a slow, locked or unreachable store to take their sessions' outcomes.",
		}),
		agents: make(map[string]*series),
	}
	for _, k := range agent.AllStates {
		m.stateLabels[k] = labelPair("state", k.String())
	}
	for i, o := range outcomeLabels {
		m.outcomeLabels[i] = labelPair("outcome", o)
	}
	for _, r := range mergeResults {
		m.merges.WithLabelValues(r)
	}
	m.quarantined.WithLabelValues("moved")
	m.quarantined.WithLabelValues("refused")
	for _, r := range aheadResults {
		m.runsAhead.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "failed"} {
		m.pushes.WithLabelValues(r)
	}
	m.mailNormal = m.mailSent.WithLabelValues("normal")
	m.mailUrgent = m.mailSent.WithLabelValues("urgent")
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "swarmd_build_info",
		Help: "Always 1; the labels describe the running binary.",
		ConstLabels: prometheus.Labels{
			"version":   build.Version,
			"commit":    build.Commit,
			"goversion": build.GoVersion,
		},
	})
	buildInfo.Set(1)
	reg.MustRegister(
		agentMetrics{m}, m.interruptLatency, m.mailSent, m.hookRuns,
		m.tokens, m.cost, m.toolCalls, m.sessionCPU, m.oomKills, m.targetMoves, m.quarantined, m.mergeDepth, m.merges, m.runsAhead, m.gateDuration, m.gitMaintenance, m.pushes,
		m.settleLatency, m.storeWait, buildInfo,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	// ContinueOnError: a failing collector (say, /proc unreadable) must not
	// hide the agent metrics.
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry:      reg,
		ErrorHandling: promhttp.ContinueOnError,
	})
	return m
}

// ObserveSettle records one settled session outcome: latency from the
// session's end to its commit, of which waited was spent retrying a store
// that refused.
func (m *Metrics) ObserveSettle(latency, waited time.Duration) {
	m.settleLatency.Observe(latency.Seconds())
	if waited > 0 {
		m.storeWait.Add(waited.Seconds())
	}
}

// Registry is the registry holding every swarmd metric.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Admission exports the swarm's admission (limits) as two gauges read at
// each scrape: sessions holding a slot, and agents waiting for one. Call
// it once.
func (m *Metrics) Admission(running, waiting func() int) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "swarmd_admission_running",
			Help: "Sessions holding a slot of the swarm's admission (limits.max_running), their prompt's build included.",
		}, func() float64 { return float64(running()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "swarmd_admission_waiting",
			Help: "Agents waiting for a slot (limits): over max_running, per_provider, or short of min_available_memory.",
		}, func() float64 { return float64(waiting()) }),
	)
}

// StoreWaiting exports, read at each scrape, how many agents wait on the
// store (a server restarting or away, a locked file, a lease this daemon
// lost): their work is held, not failed. Call it once.
func (m *Metrics) StoreWaiting(waiting func() int) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "swarmd_agents_store_waiting",
		Help: "Agents waiting on the store to record or start their work (the store slow or away, or this daemon's lease on them lost).",
	}, func() float64 { return float64(waiting()) }))
}

// StoreWriter exports, read at each scrape, what this daemon's writes
// cost its one write connection (store.DB.WriterStats): how many held it,
// for how long, and how long they waited in line. The busy counter's rate
// is the share of time the daemon's writes used the connection; near 1,
// the store's write path bounds the daemon. Call it once.
func (m *Metrics) StoreWriter(stats func() (turns int64, busy, waited time.Duration)) {
	m.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "swarmd_store_writes_total",
			Help: "Writes (transactions, and single statements outside one) that held this daemon's store write connection.",
		}, func() float64 { n, _, _ := stats(); return float64(n) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "swarmd_store_writer_busy_seconds_total",
			Help: "Seconds this daemon's store write connection was held by a write (on PostgreSQL, the wait for the swarm's writers' lock included). Its rate near 1: the daemon's writes queue.",
		}, func() float64 { _, b, _ := stats(); return b.Seconds() }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "swarmd_store_writer_wait_seconds_total",
			Help: "Seconds writes waited in this daemon's line for its store write connection, summed over the writes.",
		}, func() float64 { _, _, w := stats(); return w.Seconds() }),
	)
}

// BudgetLeft exports swarmd_budget_remaining_usd, read at each scrape:
// read returns, by agent, what it may still spend in its current window
// (agents with no USD limit left out). Read then, it is true however long
// ago the last session ended: a window rolls over with no event. Call it
// once.
func (m *Metrics) BudgetLeft(read func() map[string]float64) {
	m.reg.MustRegister(budgetCollector{read: read, desc: prometheus.NewDesc("swarmd_budget_remaining_usd",
		"US dollars the agent may still spend in the current window: the least left of its budget and the swarm's (negative when over).",
		[]string{"agent"}, nil)})
}

// budgetCollector is swarmd_budget_remaining_usd (BudgetLeft).
type budgetCollector struct {
	read func() map[string]float64
	desc *prometheus.Desc
}

func (c budgetCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c budgetCollector) Collect(ch chan<- prometheus.Metric) {
	for name, usd := range c.read() {
		if math.IsNaN(usd) || math.IsInf(usd, 0) {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, usd, name)
	}
}

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler { return m.handler }

// AddAgent creates the agent's series from its new runner's snapshot,
// taken before the runner runs: its state, seq and error counters as the
// runner starts with them (Initializing, or Stopped as a restart restored
// it, with the total errors it kept), so that a scrape right after start
// shows every agent as it is. A runner restored Stopped makes no
// transition that would report them. Paused is the daemon's (SetPaused). For an agent already known (swarmd
// start, a reload that put it back) the counters of its sessions are kept.
func (m *Metrics) AddAgent(s runner.Snapshot) {
	m.mu.Lock()
	x, ok := m.agents[s.Agent]
	if !ok {
		x = m.newSeries(s.Agent)
		m.agents[s.Agent] = x
	}
	m.mu.Unlock()
	x.setState(s.State.Kind)
	x.seq.Set(float64(s.Seq))
	x.consecutiveErrors.Set(float64(s.ConsecutiveErrors))
	x.totalErrors.Set(float64(s.TotalErrors))
	x.idle.Set(0)
	if s.Idle {
		x.idle.Set(1)
	}
}

// RemoveAgent deletes every series of the agent (a config reload removed
// it). Call it after the agent's runner has returned: a later event for the
// agent would create its series again.
func (m *Metrics) RemoveAgent(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.agents, name)
	l := prometheus.Labels{"agent": name}
	for _, v := range [...]interface{ DeletePartialMatch(prometheus.Labels) int }{
		m.tokens, m.cost, m.toolCalls, m.sessionCPU, m.oomKills,
	} {
		v.DeletePartialMatch(l)
	}
}

// newSeries creates an agent's series: state Initializing, the rest 0.
func (m *Metrics) newSeries(string) *series {
	return &series{cur: agent.Initializing}
}

// lookup returns the agent's series, creating them for an agent that was
// never added, so that no event is lost to a missing AddAgent.
func (m *Metrics) lookup(name string) *series {
	m.mu.RLock()
	s := m.agents[name]
	m.mu.RUnlock()
	if s != nil {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s = m.agents[name]; s == nil {
		s = m.newSeries(name)
		m.agents[name] = s
	}
	return s
}

// OnTransition implements runner.Observer.
func (m *Metrics) OnTransition(t runner.Transition) {
	s := m.lookup(t.Agent)
	s.setState(t.To.Kind)
	s.seq.Set(float64(t.Seq))
	s.consecutiveErrors.Set(float64(t.ConsecutiveErrors))
	s.totalErrors.Set(float64(t.TotalErrors))
	if t.Event.Kind == agent.UrgentMessage {
		s.interrupts.Add(1)
		if !t.UrgentCommitted.IsZero() {
			m.ObserveInterruptLatency(t.At.Sub(t.UrgentCommitted))
		}
	}
	if t.Effect.Kind == agent.ForceStopSession {
		s.forceStops.Add(1)
	}
}

// OnIdle implements runner.Observer: swarmd_agent_idle.
func (m *Metrics) OnIdle(agent string, idle bool, _ time.Time) {
	v := 0.0
	if idle {
		v = 1
	}
	m.lookup(agent).idle.Set(v)
}

// SetPaused sets swarmd_agent_paused: the daemon calls it when it pauses
// or resumes an agent, and at start for the pauses it restores.
func (m *Metrics) SetPaused(agent string, paused bool) {
	v := 0.0
	if paused {
		v = 1
	}
	m.lookup(agent).paused.Set(v)
}

// OnSessionEnd implements runner.Observer. A session that ended because the
// agent was stopping counts under its classified outcome like any other.
func (m *Metrics) OnSessionEnd(r runner.SessionRecord) {
	s := m.lookup(r.Agent)
	if r.ForceStopped {
		s.forceStops.Add(1)
	}
	if i := slices.Index(outcomeLabels[:], r.OutcomeLabel()); i >= 0 {
		s.sessions[i].Add(1)
	}
	if !r.Result.Started.IsZero() && !r.Result.Ended.IsZero() {
		s.observeDuration(max(r.Result.Ended.Sub(r.Result.Started), 0).Seconds())
	}
	u := r.Result.Usage
	m.AddTokens(r.Agent, "input", u.InputTokens)
	m.AddTokens(r.Agent, "output", u.OutputTokens)
	m.AddTokens(r.Agent, "cache_read", u.CacheReadTokens)
	m.AddTokens(r.Agent, "cache_write", u.CacheWriteTokens)
	m.AddCost(r.Agent, r.Backend, u.CostUSD)
	m.AddToolCalls(r.Agent, r.Result.ToolCalls)
	if r.Result.CPU > 0 {
		m.sessionCPU.WithLabelValues(r.Agent).Add(r.Result.CPU.Seconds())
	}
	if r.Result.OOMKilled {
		m.oomKills.WithLabelValues(r.Agent).Add(1)
	}
}

// ObserveInterruptLatency records the time from an urgent message's commit
// to the cancel signal. OnTransition records it already for UrgentMessage
// transitions that carry the commit time.
func (m *Metrics) ObserveInterruptLatency(d time.Duration) {
	// Negative only when the commit time came from another clock (a wall
	// clock stepped back); the interrupt still happened, and was immediate.
	m.interruptLatency.Observe(max(d, 0).Seconds())
}

// MailSent counts n messages written to the mailbox.
func (m *Metrics) MailSent(urgent bool, n int) {
	if n <= 0 {
		return
	}
	if urgent {
		m.mailUrgent.Add(float64(n))
	} else {
		m.mailNormal.Add(float64(n))
	}
}

// SetPending sets swarmd_mailbox_pending for every known agent from counts
// (undelivered messages by recipient); agents missing from counts have none.
// Recipients that are not known agents are left out, so that mail to a
// mistyped or removed name cannot create series nobody removes.
func (m *Metrics) SetPending(counts map[string]int) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for name, s := range m.agents {
		s.pending.Set(float64(counts[name]))
	}
}

// HookRun counts one hook run; result is ok, error, timeout or blocked.
func (m *Metrics) HookRun(event, result string) {
	m.hookRuns.WithLabelValues(event, result).Inc()
}

// AddTokens counts n tokens of kind (input, output, cache_read, ...) used by
// the agent's sessions.
func (m *Metrics) AddTokens(agentName, kind string, n int64) {
	if n <= 0 {
		return
	}
	m.tokens.WithLabelValues(agentName, kind).Add(float64(n))
}

// AddCost adds usd to the cost of the agent's sessions on backend.
// Negative and NaN amounts are ignored: a counter panics on them.
func (m *Metrics) AddCost(agentName, backend string, usd float64) {
	if !(usd > 0) || math.IsInf(usd, 0) {
		return
	}
	m.cost.WithLabelValues(agentName, backend).Add(usd)
}

// AddToolCalls counts n tool calls made by the agent's sessions.
func (m *Metrics) AddToolCalls(agentName string, n int) {
	if n <= 0 {
		return
	}
	m.toolCalls.WithLabelValues(agentName).Add(float64(n))
}

// TargetMoved counts a move of the merge target the queue did not make.
func (m *Metrics) TargetMoved(kind string) { m.targetMoves.WithLabelValues(kind).Inc() }

// Quarantined counts the objects an agent's sandbox wrote that were
// checked: moved into the repository, and refused.
func (m *Metrics) Quarantined(moved, refused int) {
	m.quarantined.WithLabelValues("moved").Add(float64(max(moved, 0)))
	m.quarantined.WithLabelValues("refused").Add(float64(max(refused, 0)))
}

// MergeQueueDepth sets swarmd_merge_queue_depth: tasks queued or under test.
func (m *Metrics) MergeQueueDepth(n int) { m.mergeDepth.Set(float64(max(n, 0))) }

// MergeResult counts one merge queue result (merged, conflict, gate_failed,
// timeout, corrupt, carried, history or stale) in swarmd_merges_total.
func (m *Metrics) MergeResult(result string) { m.merges.WithLabelValues(result).Inc() }

// RunAhead counts what came of one gate run ahead (passed, failed or
// dropped) in swarmd_merge_runs_ahead_total.
func (m *Metrics) RunAhead(result string) { m.runsAhead.WithLabelValues(result).Inc() }

// GateDuration records one gate run in swarmd_gate_duration_seconds.
func (m *Metrics) GateDuration(d time.Duration) { m.gateDuration.Observe(max(d, 0).Seconds()) }

// GitMaintenance records one run of the daemon's git gc, by its result,
// in swarmd_git_maintenance_duration_seconds.
func (m *Metrics) GitMaintenance(result string, d time.Duration) {
	m.gitMaintenance.WithLabelValues(result).Observe(max(d, 0).Seconds())
}

// Pushed counts one push to the remote (swarmd_pushes_total).
func (m *Metrics) Pushed(ok bool) {
	if ok {
		m.pushes.WithLabelValues("ok").Inc()
		return
	}
	m.pushes.WithLabelValues("failed").Inc()
}

var _ runner.Observer = (*Metrics)(nil)
