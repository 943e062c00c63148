package view

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Source is what the Hub reads: the daemon.
type Source interface {
	// Agents is every agent's state, from memory: it is called on every
	// round, so it must be cheap.
	Agents() []AgentState
	// Events returns up to limit events with id > afterID, in id order.
	Events(ctx context.Context, afterID int64, limit int) ([]Event, error)
	// LastEventID is the newest event's id (0 when there is none).
	LastEventID(ctx context.Context) (int64, error)
	// Tasks reads the task board: every task not over and the few most
	// recently over (TaskList), not every task ever made.
	Tasks(ctx context.Context) (TaskList, error)
	// Spend is each agent's spend by name.
	Spend(ctx context.Context) (map[string]Spend, error)
	// Merge is the merge queue (NotConfigured when there is none).
	Merge(ctx context.Context) (MergeQueue, error)
	// Inbox is what needs a person now (Needs of the store's state).
	Inbox(ctx context.Context) ([]Need, error)
	// Daemons is the swarm's daemons, by name, their leases counted now.
	Daemons(ctx context.Context) ([]Daemon, error)
	Features() Features
	// Fault is why the daemon cannot do its job, "" when healthy.
	Fault() string
	Thresholds() Thresholds
}

// Hub defaults.
const (
	DefaultTick   = time.Second
	DefaultRing   = 1024
	DefaultBuffer = 1024
	// eventPage is how many events one read takes.
	eventPage = 1000
	// Least time between two reads of the board, the spend and the merge
	// queue while events keep coming: a busy swarm commits every few
	// milliseconds, and each read is a query.
	tasksEvery = 200 * time.Millisecond
	spendEvery = time.Second
	// The swarm's daemons are read at most every daemonsEvery after a
	// commit, when a live lease they hold is due to expire (they expire
	// with no commit), and at least every daemonsAtLeast while anyone
	// watches (a renewal or a daemon's start may notify no one).
	daemonsEvery   = 2 * time.Second
	daemonsAtLeast = 30 * time.Second
	// outputStep: a newer last output is pushed only once it moved this
	// much (clients compute ages themselves), so that 200 agents printing
	// do not send 200 rows a second.
	outputStep = 2 * time.Second
)

// ErrLagged ends a subscription whose reader fell behind the stream: it
// should subscribe again after the last event it got.
var ErrLagged = errors.New("view: subscriber fell behind")

// Options configure a Hub. Zero values take the defaults.
type Options struct {
	Now    func() time.Time
	Tick   time.Duration // the look taken while anyone watches
	Ring   int           // events kept for resumes and tails
	Buffer int           // updates queued per subscriber before it lags
	Log    *zap.Logger
}

// Hub builds the read model and fans its updates out. Start it, Notify it
// when swarm.db changed, Close it.
type Hub struct {
	src  Source
	opts Options
	// ctx is the loop's context for Source calls: queries take
	// microseconds, and Close waits for the one in flight.
	ctx context.Context

	wake chan struct{}
	reqs chan func()
	stop chan struct{}
	done chan struct{}

	startOnce, closeOnce sync.Once
	started              chan struct{} // closed once Start ran the loop

	// Owned by the loop goroutine.
	lastID    int64
	ring      []Event
	ringFloor int64 // the ring holds every event with id > ringFloor
	// behind says that swarm.db may hold events after lastID: with nobody
	// subscribed they are read when someone asks, not on every commit, and
	// Notify does not even wake the loop (watched counts the subscribers).
	behind  atomic.Bool
	watched atomic.Int32
	subs    map[*Subscription]struct{}
	agents  map[string]Agent
	tasks   []Task
	board   TaskBoard
	spend   map[string]Spend
	merge   MergeQueue
	inbox   []Need
	daemons []Daemon
	fault   string
	stale   struct{ tasks, spend, merge, inbox, daemons bool }
	// daemonsDue is when a live lease of the daemons read last expires.
	daemonsDue time.Time
	readAt     struct{ tasks, spend, merge, inbox, daemons time.Time }
}

// NewHub returns a Hub over src; Start runs it.
func NewHub(src Source, opts Options) *Hub {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Tick <= 0 {
		opts.Tick = DefaultTick
	}
	if opts.Ring <= 0 {
		opts.Ring = DefaultRing
	}
	if opts.Buffer <= 0 {
		opts.Buffer = DefaultBuffer
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	h := &Hub{src: src, opts: opts, ctx: context.Background(), wake: make(chan struct{}, 1), reqs: make(chan func()),
		stop: make(chan struct{}), done: make(chan struct{}), started: make(chan struct{}),
		subs: map[*Subscription]struct{}{}, agents: map[string]Agent{}, merge: NotConfigured}
	h.stale.tasks, h.stale.spend, h.stale.merge, h.stale.inbox = true, true, true, true
	return h
}

// Start seeds the event ring with the newest events and starts the loop.
// It is idempotent; after Close it does nothing.
func (h *Hub) Start(ctx context.Context) error {
	var err error
	h.startOnce.Do(func() {
		select {
		case <-h.stop:
			err = ErrClosed
			return
		default:
		}
		if err = h.seed(ctx); err != nil {
			err = fmt.Errorf("view: start: %w", err)
		}
		// Even when the seed failed the loop runs: it reads from 0 then.
		close(h.started)
		go h.loop()
	})
	return err
}

func (h *Hub) seed(ctx context.Context) error {
	last, err := h.src.LastEventID(ctx)
	if err != nil {
		return err
	}
	h.ringFloor = max(0, last-int64(h.opts.Ring))
	h.lastID = h.ringFloor
	return h.readEvents(ctx, false)
}

// Close stops the loop and ends every subscription. It is idempotent.
func (h *Hub) Close() {
	h.closeOnce.Do(func() {
		close(h.stop)
		select {
		case <-h.started:
			<-h.done
		default:
			close(h.done) // never started
		}
	})
}

// Notify says that swarm.db may have new rows. It never blocks: the loop
// reads once for any number of notifications that arrive meanwhile.
func (h *Hub) Notify() {
	h.behind.Store(true)
	if h.watched.Load() == 0 {
		return
	}
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// do runs f on the loop goroutine and waits for it.
func (h *Hub) do(ctx context.Context, f func()) error {
	ran := make(chan struct{})
	select {
	case h.reqs <- func() { f(); close(ran) }:
	case <-h.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	<-ran // the loop runs what it took before it looks at stop again
	return nil
}

func (h *Hub) loop() {
	defer close(h.done)
	defer h.endAll(ErrClosed)
	var tick *time.Ticker
	var tickC <-chan time.Time
	defer func() {
		if tick != nil {
			tick.Stop()
		}
	}()
	for {
		select {
		case <-h.stop:
			return
		case <-h.wake:
			// A commit: perhaps a daemon's leases (not the tick's
			// safety net, which would read them every second).
			h.stale.daemons = true
			h.round(true, false)
		case <-tickC:
			h.round(true, false) // also the safety net for a missed Notify
		case f := <-h.reqs:
			f()
			if len(h.subs) > 0 && h.behind.Load() {
				// A Notify that found nobody watching, just before f
				// subscribed someone.
				h.round(false, false)
			}
		}
		// Look once a second only while someone watches.
		switch {
		case len(h.subs) > 0 && tick == nil:
			tick = time.NewTicker(h.opts.Tick)
			tickC = tick.C
		case len(h.subs) == 0 && tick != nil:
			tick.Stop()
			tick, tickC = nil, nil
		}
	}
}

// round brings the model up to date and publishes what changed. dbChanged
// reads new events; force refreshes every stale part at once (a snapshot
// is being taken) and computes agents even with nobody subscribed.
func (h *Hub) round(dbChanged, force bool) {
	if dbChanged {
		h.behind.Store(true)
		// Mail to the operator changes the inbox without an event.
		h.stale.inbox = true
	}
	if len(h.subs) == 0 && !force {
		return
	}
	h.catchUp()
	now := h.opts.Now()
	h.refreshTasks(now, force)
	h.refreshSpend(now, force)
	h.refreshMerge(now, force)
	h.refreshInbox(now, force)
	h.refreshDaemons(now, force)
	h.refreshAgents(now)
	if f := h.src.Fault(); f != h.fault {
		h.fault = f
		h.publish(Update{Kind: KindFault, Fault: &f})
	}
}

// catchUp reads the events the ring is behind on. With nobody subscribed
// since they were written, none of them was published, so past a ring's
// worth it skips to the newest (and marks every part stale, not knowing
// what the skipped ones changed) rather than page through all of them.
func (h *Hub) catchUp() {
	if !h.behind.Swap(false) {
		return
	}
	if len(h.subs) == 0 {
		last, err := h.src.LastEventID(h.ctx)
		if err != nil {
			h.behind.Store(true)
			h.opts.Log.Warn("view: read events", zap.Error(err))
			return
		}
		if last-h.lastID > int64(h.opts.Ring) {
			h.ring = h.ring[:0]
			h.ringFloor = last - int64(h.opts.Ring)
			h.lastID = h.ringFloor
			h.stale.tasks, h.stale.spend, h.stale.merge = true, true, true
		}
	}
	if err := h.readEvents(h.ctx, len(h.subs) > 0); err != nil {
		h.behind.Store(true)
		h.opts.Log.Warn("view: read events", zap.Error(err))
	}
}

// readEvents appends every event after lastID to the ring, publishing each
// when publish is set, and marks what they may have changed as stale.
func (h *Hub) readEvents(ctx context.Context, publish bool) error {
	for {
		evs, err := h.src.Events(ctx, h.lastID, eventPage)
		if err != nil {
			return err
		}
		for i := range evs {
			e := evs[i]
			h.lastID = max(h.lastID, e.ID)
			if e.TaskID != 0 {
				h.stale.tasks, h.stale.merge = true, true
			} else {
				h.stale.spend, h.stale.merge = true, true
			}
			if publish {
				h.publish(Update{Kind: KindEvent, Event: &e})
			}
		}
		h.ring = append(h.ring, evs...)
		if over := len(h.ring) - h.opts.Ring; over > 0 {
			h.ringFloor = h.ring[over-1].ID
			h.ring = append(h.ring[:0], h.ring[over:]...)
		}
		if len(evs) < eventPage {
			return nil
		}
	}
}

func (h *Hub) refreshTasks(now time.Time, force bool) {
	if !h.stale.tasks || !force && now.Sub(h.readAt.tasks) < tasksEvery {
		return
	}
	ts, err := h.src.Tasks(h.ctx)
	if err != nil {
		h.opts.Log.Warn("view: read tasks", zap.Error(err))
		return
	}
	h.stale.tasks, h.readAt.tasks = false, now
	h.tasks = ts.Tasks
	board := buildBoard(ts)
	if !equalBoards(board, h.board) {
		h.board = board
		b := board
		h.publish(Update{Kind: KindTasks, Tasks: &b})
	}
}

func (h *Hub) refreshSpend(now time.Time, force bool) {
	if !h.stale.spend || !force && now.Sub(h.readAt.spend) < spendEvery {
		return
	}
	sp, err := h.src.Spend(h.ctx)
	if err != nil {
		h.opts.Log.Warn("view: read spend", zap.Error(err))
		return
	}
	h.stale.spend, h.readAt.spend = false, now
	h.spend = sp // agent rows carry it: refreshAgents publishes the change
}

func (h *Hub) refreshMerge(now time.Time, force bool) {
	if !h.stale.merge || !force && now.Sub(h.readAt.merge) < tasksEvery {
		return
	}
	m, err := h.src.Merge(h.ctx)
	if err != nil {
		h.opts.Log.Warn("view: read merge queue", zap.Error(err))
		return
	}
	h.stale.merge, h.readAt.merge = false, now
	if !equalMerge(m, h.merge) {
		h.merge = m
		h.publish(Update{Kind: KindMerge, Merge: &m})
	}
}

func (h *Hub) refreshInbox(now time.Time, force bool) {
	if !h.stale.inbox || !force && now.Sub(h.readAt.inbox) < spendEvery {
		return
	}
	in, err := h.src.Inbox(h.ctx)
	if err != nil {
		h.opts.Log.Warn("view: read the inbox", zap.Error(err))
		return
	}
	h.stale.inbox, h.readAt.inbox = false, now
	if in == nil {
		in = []Need{}
	}
	if !slices.Equal(in, h.inbox) {
		h.inbox = in
		h.publish(Update{Kind: KindInbox, Inbox: &in})
	}
}

// refreshDaemons reads the swarm's daemons (see daemonsEvery), at once for
// a snapshot.
func (h *Hub) refreshDaemons(now time.Time, force bool) {
	since := now.Sub(h.readAt.daemons)
	due := h.stale.daemons && since >= daemonsEvery || !h.daemonsDue.IsZero() && !now.Before(h.daemonsDue) ||
		since >= daemonsAtLeast
	if !force && !due {
		return
	}
	ds, err := h.src.Daemons(h.ctx)
	if err != nil {
		h.opts.Log.Warn("view: read the swarm's daemons", zap.Error(err))
		return
	}
	h.stale.daemons, h.readAt.daemons, h.daemonsDue = false, now, time.Time{}
	for _, d := range ds {
		if d.LiveUntil != nil && (h.daemonsDue.IsZero() || d.LiveUntil.Before(h.daemonsDue)) {
			h.daemonsDue = *d.LiveUntil
		}
	}
	if ds == nil {
		ds = []Daemon{}
	}
	if !slices.EqualFunc(ds, h.daemons, sameDaemon) {
		h.daemons = ds
		h.publish(Update{Kind: KindDaemons, Daemons: &ds})
	}
}

// sameDaemon compares all but LiveUntil, which each renewal moves.
func sameDaemon(a, b Daemon) bool {
	return a.Name == b.Name && a.Self == b.Self && a.Live == b.Live && a.Expired == b.Expired && slices.Equal(a.Agents, b.Agents)
}

// refreshAgents computes every row and publishes those that changed.
func (h *Hub) refreshAgents(now time.Time) {
	held := heldTasks(h.tasks)
	th := h.src.Thresholds()
	seen := make(map[string]bool, len(h.agents))
	for _, st := range h.src.Agents() {
		a := buildAgent(st, now, th, h.spend, held)
		seen[a.Name] = true
		if old, ok := h.agents[a.Name]; ok && sameAgent(old, a) {
			continue
		}
		h.agents[a.Name] = a
		h.publish(Update{Kind: KindAgent, Agent: &a})
	}
	for name := range h.agents {
		if !seen[name] {
			delete(h.agents, name)
			h.publish(Update{Kind: KindRemoved, Name: name})
		}
	}
}

func buildAgent(st AgentState, now time.Time, th Thresholds, spend map[string]Spend, held map[string]TaskRef) Agent {
	v := Classify(st.Condition, now, th)
	a := Agent{
		Name: st.Name, State: st.State.String(), Visual: v, Indicator: v.Indicator(), Health: st.Health,
		Seq: st.Seq, SessionID: st.SessionID, SessionStarted: st.SessionStarted, LastOutput: st.LastOutput,
		Since: st.Since, ConsecutiveErrors: st.ConsecutiveErrors, TotalErrors: st.TotalErrors,
		Branch: st.Branch, Reason: st.Reason, Paused: st.Paused, PausedBy: st.PausedBy, PauseReason: st.PauseReason,
		Frozen: st.Frozen,
	}
	if sp, ok := spend[st.Name]; ok {
		a.Spend = &sp
	}
	if t, ok := held[st.Name]; ok {
		a.Task = &t
	}
	return a
}

// sameAgent: nothing a client shows changed, allowing the last output to
// creep by less than outputStep.
func sameAgent(a, b Agent) bool {
	if d := b.LastOutput.Sub(a.LastOutput); d >= outputStep || d < 0 || a.LastOutput.IsZero() != b.LastOutput.IsZero() {
		return false
	}
	b.LastOutput = a.LastOutput
	if (a.Spend == nil) != (b.Spend == nil) || a.Spend != nil && *a.Spend != *b.Spend {
		return false
	}
	if (a.Task == nil) != (b.Task == nil) || a.Task != nil && *a.Task != *b.Task {
		return false
	}
	a.Spend, b.Spend, a.Task, b.Task = nil, nil, nil, nil
	return a == b
}

// heldTasks maps each agent to the task it holds (CLAIMED or IN_PROGRESS).
func heldTasks(ts []Task) map[string]TaskRef {
	out := map[string]TaskRef{}
	for _, t := range ts {
		if t.Claimant != "" && (t.State == "CLAIMED" || t.State == "IN_PROGRESS") {
			out[t.Claimant] = TaskRef{ID: t.ID, Title: t.Title, State: t.State}
		}
	}
	return out
}

// snapshot is the model as it stands; the caller ran a forced round.
func (h *Hub) snapshot() Snapshot {
	th := h.src.Thresholds()
	if th.SpawnTimeout <= 0 {
		th.SpawnTimeout = DefaultSpawnTimeout
	}
	s := Snapshot{
		At: h.opts.Now(), Agents: make([]Agent, 0, len(h.agents)), Tasks: h.board, Merge: h.merge,
		Features: h.src.Features(), LastEventID: h.lastID, Fault: h.fault, Inbox: h.inbox,
		StallAfter: th.StallAfter.Seconds(), SpawnTimeout: th.SpawnTimeout.Seconds(),
	}
	for _, a := range h.agents {
		s.Agents = append(s.Agents, a)
	}
	sort.Slice(s.Agents, func(i, j int) bool { return s.Agents[i].Name < s.Agents[j].Name })
	if s.Tasks.Counts == nil {
		s.Tasks = buildBoard(TaskList{})
	}
	if s.Merge.Items == nil {
		s.Merge.Items = []MergeItem{}
	}
	if s.Merge.Recent == nil {
		s.Merge.Recent = []MergeResult{}
	}
	if s.Inbox == nil {
		s.Inbox = []Need{}
	}
	s.Daemons = h.daemons
	if s.Daemons == nil {
		s.Daemons = []Daemon{}
	}
	return s
}

// Snapshot is the whole picture now.
func (h *Hub) Snapshot(ctx context.Context) (Snapshot, error) {
	var s Snapshot
	err := h.do(ctx, func() {
		h.round(true, true)
		s = h.snapshot()
	})
	return s, err
}

// Events returns up to limit events with id > after from the ring when it
// holds them, otherwise from the Source.
func (h *Hub) Events(ctx context.Context, after int64, limit int) ([]Event, error) {
	var out []Event
	covered := false
	err := h.do(ctx, func() {
		h.catchUp()
		if after < h.ringFloor {
			return
		}
		covered = true
		for _, e := range h.ring {
			if e.ID > after && (limit <= 0 || len(out) < limit) {
				out = append(out, e)
			}
		}
	})
	if err != nil || covered {
		return out, err
	}
	return h.src.Events(ctx, after, limit)
}

// publish queues u for every subscriber; one whose queue is full lags and
// is dropped (it resumes from its last event).
func (h *Hub) publish(u Update) {
	for s := range h.subs {
		select {
		case s.c <- u:
		default:
			h.end(s, ErrLagged)
		}
	}
}

func (h *Hub) end(s *Subscription, why error) {
	if _, ok := h.subs[s]; !ok {
		return
	}
	delete(h.subs, s)
	h.watched.Add(-1)
	s.err = why
	close(s.c)
}

func (h *Hub) endAll(why error) {
	for s := range h.subs {
		h.end(s, why)
	}
}

// equalBoards compares boards by their counts and cards.
func equalBoards(a, b TaskBoard) bool {
	if len(a.Tasks) != len(b.Tasks) || a.Omitted != b.Omitted || len(a.Counts) != len(b.Counts) {
		return false
	}
	for k, v := range a.Counts {
		if b.Counts[k] != v {
			return false
		}
	}
	for i := range a.Tasks {
		if a.Tasks[i] != b.Tasks[i] {
			return false
		}
	}
	return true
}

func equalMerge(a, b MergeQueue) bool {
	if a.Configured != b.Configured || a.Note != b.Note || a.Paused != b.Paused || len(a.Items) != len(b.Items) ||
		a.Depth != b.Depth || a.GateRunning != b.GateRunning || a.GateSeq != b.GateSeq || a.AheadSeq != b.AheadSeq ||
		!slices.Equal(a.Recent, b.Recent) {
		return false
	}
	for i := range a.Items {
		if a.Items[i] != b.Items[i] {
			return false
		}
	}
	return true
}
