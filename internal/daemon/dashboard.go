package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/merge"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
	"github.com/swarmd/swarmd/internal/view"
	"github.com/swarmd/swarmd/internal/web"
)

// dashboards is the read model and what serves it: the hub, the service
// both servers share, and the web dashboard.
type dashboards struct {
	hub    *view.Hub
	svc    *view.Service
	web    *web.Server
	cancel context.CancelFunc
}

// newDashboards builds the read model over d. Nothing runs until start.
func newDashboards(d *Daemon) *dashboards {
	ctx, cancel := context.WithCancel(context.Background())
	hub := view.NewHub(viewSource{d: d, spend: &d.tally}, view.Options{Log: d.log.Named("view")})
	svc := &view.Service{
		Base:    ctx,
		Hub:     hub,
		Logs:    &view.LogFollower{Store: d.kit.logs, Current: d.currentSeq},
		Actions: viewActions{d},
		Sessions: func(ctx context.Context, agent string, limit int) ([]view.Session, error) {
			return d.sessions(ctx, agent, limit)
		},
		Task: d.taskView,
		Renderer: func(agent string, w io.Writer) io.WriteCloser {
			cfg, _ := d.current()
			if StructuredBackend(cfg, agent) {
				return backend.NewRenderer(w)
			}
			return nil
		},
	}
	cfg, _ := d.current()
	w := web.New(web.Options{
		Service:      svc,
		Token:        func() string { c, _ := d.current(); return c.Web.Token },
		Version:      d.opts.Version,
		LoopbackOnly: loopbackListen(cfg.Listen),
		Log:          d.log.Named("web"),
	})
	return &dashboards{hub: hub, svc: svc, web: w, cancel: cancel}
}

// start reads where the event log stands and starts the hub.
func (db *dashboards) start(ctx context.Context) error { return db.hub.Start(ctx) }

// close ends every stream and follow (the servers' Shutdown would wait for
// them) and stops the hub. Safe on a nil receiver.
func (db *dashboards) close() {
	if db == nil {
		return
	}
	db.cancel()
	db.hub.Close()
}

// notify tells the hub that swarm.db changed. Safe on a nil receiver (the
// journal may commit before the dashboards exist).
func (db *dashboards) notify() {
	if db != nil {
		db.hub.Notify()
	}
}

// ViewHandler serves the read model on the control socket (swarmd top).
func (a controlAPI) ViewHandler() http.Handler { return a.d.serve.dash.svc.SocketHandler() }

// loopbackListen: the listen address is on loopback, so requests naming any
// other host are refused (a page elsewhere rebinding its name to us).
func loopbackListen(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// currentSeq is an agent's session seq now.
func (d *Daemon) currentSeq(agentName string) (uint32, bool) {
	r, err := d.reg.Runner(agentName)
	if err != nil {
		return 0, false
	}
	return r.Snapshot().Seq, true
}

// readOwnWrites commits what the journal holds before a read of the
// tables it writes (events, sessions): a session's row and transitions go
// with the journal's next batch, and what the daemon has done must show in
// what it answers. Nothing queued costs no transaction; a failed write is
// the journal's to report, and the read shows what is committed.
func (d *Daemon) readOwnWrites(ctx context.Context) {
	_ = d.journal.Flush(ctx)
}

func (d *Daemon) sessions(ctx context.Context, agentName string, limit int) ([]view.Session, error) {
	d.readOwnWrites(ctx)
	ss, err := d.db.Sessions(ctx, agentName, limit)
	if err != nil {
		return nil, err
	}
	out := make([]view.Session, len(ss))
	for i, s := range ss {
		out[i] = view.Session{SessionID: s.SessionID, Agent: s.Agent, Seq: s.Seq, Started: s.Started, Ended: s.Ended,
			Outcome: s.Outcome, ExitCode: s.ExitCode, AbortReason: s.AbortReason, Reason: s.Reason,
			DurationMS: s.Duration.Milliseconds(), TokensIn: s.TokensIn, TokensOut: s.TokensOut, CostUSD: s.CostUSD,
			ToolCalls: s.ToolCalls, Commits: s.Commits}
	}
	return out, nil
}

// viewSource is the daemon as the read model reads it.
type viewSource struct {
	d *Daemon
	// spend reads each agent's sessions since its last read, not all of
	// them at each refresh of a watched dashboard.
	spend *store.SpendTally
}

var _ view.Source = viewSource{}

// Agents is the rows `swarmd status` shows, from the runners' memory.
func (s viewSource) Agents() []view.AgentState {
	rows := controlAPI{s.d}.Agents()
	out := make([]view.AgentState, 0, len(rows))
	for _, st := range rows {
		kind, err := agent.ParseStateKind(st.State)
		if err != nil {
			kind = agent.StateKind(255) // classified unknown
		}
		out = append(out, view.AgentState{
			Condition: view.Condition{State: kind, Since: st.Since, SessionStarted: st.SessionStarted,
				// Held for its provider or a slot, it waits: idle, as a
				// backoff is, not spawning.
				LastOutput: st.LastOutput, Idle: st.Health == "idle" || st.Waiting != "", Paused: st.Paused},
			Name: st.Name, Health: st.Health, Seq: st.Seq, SessionID: st.SessionID,
			ConsecutiveErrors: st.ConsecutiveErrors, TotalErrors: st.TotalErrors, Branch: st.Branch, Reason: st.Reason,
			PausedBy: st.PausedBy, PauseReason: st.PauseReason, Frozen: st.Frozen,
		})
	}
	return out
}

func (s viewSource) Events(ctx context.Context, after int64, limit int) ([]view.Event, error) {
	s.d.readOwnWrites(ctx)
	evs, err := s.d.db.Events(ctx, store.EventQuery{AfterID: after, Limit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]view.Event, len(evs))
	for i, e := range evs {
		out[i] = view.Event{ID: e.ID, At: e.At, Agent: e.Agent, From: e.From, Event: e.Event, To: e.To, Effect: e.Effect,
			Actor: e.Actor, Reason: e.Reason, SessionID: e.SessionID, Seq: e.Seq, TaskID: e.TaskID}
	}
	return out, nil
}

func (s viewSource) LastEventID(ctx context.Context) (int64, error) { return s.d.db.LastEventID(ctx) }

func (s viewSource) Tasks(ctx context.Context) (view.TaskList, error) {
	open, over, counts, err := s.d.tasks.Board(ctx, view.RecentFinished)
	if err != nil {
		return view.TaskList{}, err
	}
	out := view.TaskList{Tasks: make([]view.Task, 0, len(open)+len(over)), Counts: make(map[string]int, len(counts))}
	for _, t := range append(open, over...) {
		out.Tasks = append(out.Tasks, viewTask(t))
	}
	for st, n := range counts {
		out.Counts[st.String()] = n
	}
	return out, nil
}

func viewTask(t taskboard.Task) view.Task {
	return view.Task{ID: t.ID, Title: t.Title, State: t.StateName, Priority: t.Priority, Assignee: t.Assignee,
		Claimant: t.Claimant, Parent: t.Parent, Retries: t.Retries, Reviewer: t.Reviewer, ReviewState: t.ReviewState,
		UpdatedAt: t.UpdatedAt}
}

func (s viewSource) Spend(ctx context.Context) (map[string]view.Spend, error) {
	sp, err := s.spend.Spend(ctx, s.d.db)
	if err != nil {
		return nil, err
	}
	out := make(map[string]view.Spend, len(sp))
	for name, v := range sp {
		out[name] = view.Spend{Sessions: v.Sessions, TokensIn: v.TokensIn, TokensOut: v.TokensOut, CostUSD: v.CostUSD}
	}
	return out, nil
}

// Merge is the merge queue as the dashboards show it: the candidate under
// test first, then the queued ones in order ("not configured" without a
// merge: section).
func (s viewSource) Merge(ctx context.Context) (view.MergeQueue, error) {
	q := s.d.merge.queue
	if q == nil {
		return view.NotConfigured, nil
	}
	st, err := q.Status(ctx)
	if err != nil {
		return view.MergeQueue{}, err
	}
	out := view.MergeQueue{Configured: true, Paused: st.Paused, Note: st.Waiting, Items: []view.MergeItem{},
		Depth: st.Depth(), Recent: []view.MergeResult{}}
	// The titles in one read: a task each was a read each, a hundred at
	// each change of a queue that fell behind.
	var ids []int64
	if c := st.Current; c != nil {
		ids = append(ids, c.Task)
	}
	for _, es := range [][]merge.Entry{st.Queued, st.Recent} {
		for _, e := range es {
			ids = append(ids, e.Task)
		}
	}
	titles, err := s.d.tasks.Titles(ctx, ids)
	if err != nil {
		titles = nil // the queue shows, untitled
	}
	title := func(id int64) string { return titles[id] }
	add := func(e merge.Entry, state string, since time.Time) {
		it := view.MergeItem{TaskID: e.Task, Agent: e.Agent, State: state, Since: since, Title: title(e.Task)}
		if e.Attempts > 0 {
			it.Note = fmt.Sprintf("gate run %d", e.Attempts)
		}
		out.Items = append(out.Items, it)
	}
	if c := st.Current; c != nil {
		add(*c, "testing", c.StartedAt)
		out.GateRunning, out.GateSeq = c.GateSeq != 0, c.GateSeq
	}
	ahead := map[int64]bool{}
	if a := st.Ahead; a != nil {
		out.AheadSeq = a.GateSeq
		for _, id := range a.Tasks {
			ahead[id] = true
		}
	}
	for _, e := range st.Queued {
		if ahead[e.Task] {
			add(e, "ahead", st.Ahead.Since)
			continue
		}
		add(e, "queued", e.EnqueuedAt)
	}
	for _, e := range st.Recent {
		r := view.MergeResult{TaskID: e.Task, Title: title(e.Task), Agent: e.Agent, Result: e.Result, At: e.FinishedAt}
		if e.State == merge.Merged {
			r.Commit = e.Candidate
		}
		out.Recent = append(out.Recent, r)
	}
	return out, nil
}

// Features: what this swarmd has. Budgets are not on the dashboards yet.
func (s viewSource) Features() view.Features {
	return view.Features{Tasks: true, Pause: true, Merge: s.d.merge.queue != nil, Isolation: s.d.host.iso.String()}
}

func (s viewSource) Fault() string { return s.d.health.faultText() }

func (s viewSource) Thresholds() view.Thresholds {
	return view.Thresholds{StallAfter: s.d.stallAfter()}
}

// viewActions are the dashboards' writes. On the control socket the caller
// is whoever connected (an agent's session may act only as itself, as with
// swarmd stop); on the web it is the operator holding web.token.
type viewActions struct{ d *Daemon }

var _ view.Actions = viewActions{}

func (a viewActions) Stop(ctx context.Context, name string) error {
	return viewErr(controlAPI{a.d}.StopAgent(ctx, name))
}

func (a viewActions) Start(ctx context.Context, name string) error {
	return viewErr(controlAPI{a.d}.StartAgent(ctx, name))
}

// Pause holds the agent as swarmd pause does, with the dashboard as reason.
func (a viewActions) Pause(ctx context.Context, name string, now bool) error {
	_, err := controlAPI{a.d}.PauseAgent(ctx, name, control.PauseRequest{Now: now, Reason: "from a dashboard"})
	return viewErr(err)
}

func (a viewActions) Resume(ctx context.Context, name string) error {
	_, err := controlAPI{a.d}.ResumeAgent(ctx, name)
	return viewErr(err)
}

// Mail sends as the caller: the agent whose session asks, else the
// operator; a hook, the gate or an ended session may not (requester).
func (a viewActions) Mail(ctx context.Context, m view.MailRequest) ([]int64, error) {
	from := mailbox.Operator
	if name, err := a.d.requester(ctx, "send mail"); err != nil {
		return nil, viewErr(err)
	} else if name != "" {
		from = name
	}
	if m.All == (m.To != "") {
		return nil, fmt.Errorf("%w: give exactly one of to (an agent) or all", view.ErrInvalid)
	}
	d := mailbox.Draft{From: from, To: m.To, Subject: m.Subject, Body: m.Body, Urgent: m.Urgent}
	var ids []int64
	if m.All {
		msgs, err := a.d.mail.Broadcast(ctx, d)
		if err != nil {
			return nil, viewErr(err)
		}
		for _, msg := range msgs {
			ids = append(ids, msg.ID)
		}
	} else {
		msg, err := a.d.mail.Send(ctx, d)
		if err != nil {
			return nil, viewErr(err)
		}
		ids = append(ids, msg.ID)
	}
	a.d.log.Info("mail sent from a dashboard", zap.String("from", from), zap.String("to", m.To), zap.Bool("all", m.All),
		zap.Bool("urgent", m.Urgent), zap.Int("messages", len(ids)))
	return ids, nil
}

// AddTask adds a task as the caller, for an agent of the config or anyone.
func (a viewActions) AddTask(ctx context.Context, t view.TaskRequest) (view.Task, error) {
	cfg, _ := a.d.current()
	if _, ok := cfg.Agent(t.To); t.To != "" && !ok {
		return view.Task{}, fmt.Errorf("%w: no agent %q in the config", view.ErrInvalid, t.To)
	}
	by := mailbox.Operator
	if name, err := a.d.requester(ctx, "add tasks"); err != nil {
		return view.Task{}, viewErr(err)
	} else if name != "" {
		by = "agent:" + name
	}
	tk, err := a.d.tasks.Add(ctx, taskboard.NewTask{Title: t.Title, Body: t.Body, Priority: t.Priority, Assignee: t.To,
		After: t.After, Parent: t.Parent, Plan: t.Plan, CreatedBy: by})
	if err != nil {
		return view.Task{}, viewErr(err)
	}
	return viewTask(tk), nil
}

// viewErr keeps err's message and adds the read model's sentinel for its
// kind, so that both servers answer with the right status.
func viewErr(err error) error {
	if err == nil {
		return nil
	}
	var ve *store.ValidationError
	for _, m := range []struct{ from, to error }{
		{control.ErrUnknownAgent, view.ErrNotFound},
		{control.ErrConflict, view.ErrConflict},
		{control.ErrForbidden, view.ErrDenied},
		{taskboard.ErrNotFound, view.ErrInvalid}, // a parent or dependency that does not exist
		{taskboard.ErrInvalid, view.ErrInvalid},
	} {
		if errors.Is(err, m.from) {
			return sentinelErr{err, m.to}
		}
	}
	if errors.As(err, &ve) {
		return sentinelErr{err, view.ErrInvalid}
	}
	return err
}

type sentinelErr struct{ err, sentinel error }

func (e sentinelErr) Error() string   { return e.err.Error() }
func (e sentinelErr) Unwrap() []error { return []error{e.err, e.sentinel} }

// StructuredBackend reports whether the agent's backend writes stream-json
// that renders. An agent no longer in the config is rendered: the format
// is recognised from the log itself. The merge queue's gate logs
// (pseudo-agent merge) are not.
func StructuredBackend(cfg *config.Config, agent string) bool {
	if agent == merge.LogName {
		return false // gate logs are plain command output
	}
	a, ok := cfg.Agent(agent)
	if !ok {
		return true
	}
	switch cfg.Backends[a.Backend].Type {
	case config.TypeClaude, config.TypeCodex, config.TypeGemini:
		return true
	}
	return false
}
