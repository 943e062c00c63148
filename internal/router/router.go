// Package router notices new urgent mail and interrupts the recipient's
// runner. An inotify watch on the database's WAL file wakes it when another
// process commits; a slow poll stays as the safety net. Either way it checks
// PRAGMA data_version (a few microseconds, changed only by another
// connection's commit) and reads pending urgent mail only when it changed.
// Each message id is sent to its recipient once.
package router

import (
	"context"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/service"
	"github.com/swarmd/swarmd/internal/store"
)

// Mail is what the router reads. *mailbox.DB satisfies it.
type Mail interface {
	DataVersion(ctx context.Context) (int64, error)
	PendingUrgent(ctx context.Context, afterID int64) ([]mailbox.Message, error)
	// RecipientsSince lists the recipients of messages with id > afterID
	// and the newest id (afterID when there are none).
	RecipientsSince(ctx context.Context, afterID int64) ([]string, int64, error)
}

// Tasks tells the router that the claimable tasks changed. *taskboard.Board
// satisfies it.
type Tasks interface {
	OpenVersion(ctx context.Context) (string, error)
	// Claimable counts OPEN tasks for any agent (up to atMost), and per
	// agent its own OPEN tasks and the reviews waiting for it.
	Claimable(ctx context.Context, atMost int) (anyone int, mine map[string]int, err error)
}

// Idle lists the agents that wait, idle, for mail or a task, and wakes one.
// *registry.Registry satisfies it.
type Idle interface {
	IdleAgents() []string
	Wake(agent string) error
}

// Interrupter delivers UrgentMessage events. *registry.Registry satisfies it.
type Interrupter interface {
	Interrupt(agent string, id int64, committed time.Time) error
}

// DefaultInterval is the poll without the WAL watch (no inotify): it bounds
// latency well inside the 100 ms p99 budget. With the watch, mail is seen
// within a millisecond or so and the poll is only a safety net, every
// WatchedInterval, so that an idle daemon stays quiet.
const (
	DefaultInterval = 50 * time.Millisecond
	WatchedInterval = 5 * time.Second
)

// Options configure a Router.
type Options struct {
	Log      *zap.Logger
	Interval time.Duration // safety-net poll; 0 means DefaultInterval
	// DBPath, if set, is watched with inotify so commits by other processes
	// wake the router at once.
	DBPath string
	// Wake, if set (and DBPath is not), wakes the router as the WAL watch
	// would: a shared store's change notifications.
	Wake <-chan struct{}
	// Changed, if set with Wake, says what the commits behind a wake-up
	// touched (store.Watch.Take): the router then reads only what changed,
	// and a commit it reads nothing of (a session's row, an event, a lease)
	// costs it no query. Without it every wake-up may have changed
	// anything, and the data version tells.
	Changed func() store.Change
	// Urgent, if set with Changed, takes the urgent messages the
	// notifications announced (store.Watch.TakeUrgent), which then must
	// announce every one: after notifications that say precisely what
	// changed, the router interrupts on the announcements alone, with no
	// read of the mailbox on urgent mail's path.
	Urgent func(dst []store.Urgent) []store.Urgent
	// Tasks and Idle, if both are set, let new mail and new tasks wake idle
	// agents through the same watch as urgent mail.
	Tasks Tasks
	Idle  Idle
	// ReviewOnly, if set, names the agents that claim no unassigned task:
	// they are not woken for one.
	ReviewOnly func(agent string) bool
	// OnChange, if set, is called after each poll that found a commit by
	// another connection (mail sent, a task added...), with what it
	// touched: the daemon's mail metrics follow it instead of a timer. It
	// must not block.
	OnChange func(store.Change)
}

// Router watches the mailbox for urgent mail.
type Router struct {
	mail       Mail
	to         Interrupter
	log        *zap.Logger
	interval   time.Duration
	dbPath     string
	wakeSrc    <-chan struct{}
	changed    func() store.Change
	urgent     func([]store.Urgent) []store.Urgent
	tasks      Tasks
	idle       Idle
	reviewOnly func(agent string) bool
	onChange   func(store.Change)

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}

	// Owned by the loop.
	lastID      int64
	lastVersion int64
	lastMailID  int64  // the newest message any idle check saw
	lastTasks   string // the open tasks' version at the last idle check
	openMissed  bool   // work may have come while no agent was idle
	turn        int    // where the next wake-up for anyone's task starts
}

// New returns a stopped router.
func New(mail Mail, to Interrupter, opts Options) *Router {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	return &Router{mail: mail, to: to, log: opts.Log, interval: opts.Interval, dbPath: opts.DBPath, wakeSrc: opts.Wake, changed: opts.Changed, urgent: opts.Urgent, lastVersion: -1,
		tasks: opts.Tasks, idle: opts.Idle, reviewOnly: opts.ReviewOnly, onChange: opts.OnChange}
}

// Start begins polling. Calling it on a running router does nothing.
func (r *Router) Start(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil {
		return
	}
	ctx, r.cancel = context.WithCancel(ctx)
	r.done = make(chan struct{})
	go r.loop(ctx, r.done)
}

// Stop ends polling and waits for the loop. Idempotent.
func (r *Router) Stop() {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.cancel = nil
	r.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

func (r *Router) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	var wake <-chan struct{}
	if r.dbPath != "" {
		w, err := store.WatchDatabase(r.dbPath)
		if err != nil {
			r.log.Warn("no inotify on the database, polling only", zap.Error(err))
		} else {
			defer w.Close()
			wake = w.C
		}
	}
	// notified: the wake-ups are the store's notifications, which say what
	// changed (not the WAL watch, which only says that something did).
	notified := false
	if wake == nil {
		wake, notified = r.wakeSrc, r.wakeSrc != nil && r.changed != nil
	}
	interval := r.interval
	if wake != nil && interval < WatchedInterval {
		interval = WatchedInterval
	}
	t := time.NewTimer(service.UntilAligned(interval))
	defer t.Stop()
	// Polls run without cancellation: they take microseconds, and a
	// cancellable context costs the SQLite driver a goroutine per query.
	pollCtx := context.WithoutCancel(ctx)
	// The WAL write that wakes us can land just before the commit is
	// visible to readers (the wal-index update follows it), so a wake-up is
	// followed by a second look shortly after.
	again := time.NewTimer(time.Hour)
	again.Stop()
	defer again.Stop()
	// what a notification said changed; zero for the first look, the
	// safety net's and the WAL watch's, which compare the data version.
	// announced: the urgent mail the notifications named.
	var what store.Change
	var announced []store.Urgent
	for poll := true; ; {
		if poll {
			var err error
			if what == 0 {
				err = r.Poll(pollCtx)
			} else {
				err = r.read(pollCtx, what, announced)
			}
			if err != nil {
				r.log.Warn("router poll", zap.Error(err))
			}
		}
		poll, what, announced = true, 0, announced[:0]
		select {
		case <-ctx.Done():
			return
		case _, ok := <-wake:
			if !ok {
				wake = nil // the watch failed: poll at the unwatched pace
				interval = r.interval
				t.Reset(service.UntilAligned(interval))
				continue
			}
			if notified {
				// The notification is the news, and follows its commit: no
				// version to compare, no second look. Nothing taken means
				// the last read covered it already.
				what = r.changed()
				if r.urgent != nil {
					announced = r.urgent(announced)
				}
				poll = what != 0 || len(announced) > 0
				continue
			}
			again.Reset(recheck)
		case <-again.C:
		case <-t.C:
			t.Reset(service.UntilAligned(interval))
		}
	}
}

// recheck is the second look after a wake-up.
const recheck = 2 * time.Millisecond

// Poll checks for new urgent mail once and interrupts its recipients. The
// loop calls it; tests may call it directly on a router that is not started.
func (r *Router) Poll(ctx context.Context) error {
	v, err := r.mail.DataVersion(ctx)
	if err != nil {
		return err
	}
	if v == r.lastVersion {
		return nil
	}
	if err := r.read(ctx, store.ChangedAll, nil); err != nil {
		return err
	}
	r.lastVersion = v
	return nil
}

// read routes new urgent mail and wakes idle agents, reading only what
// changed. announced is the urgent mail the notifications named.
func (r *Router) read(ctx context.Context, what store.Change, announced []store.Urgent) error {
	ms := announced
	if what.Has(store.ChangedMail) && (r.urgent == nil || !what.Precise()) {
		// Notifications that may have missed some (or none that name
		// urgent mail): the mailbox tells. Everything announced was
		// committed before its announcement, so the read has it too.
		found, err := r.mail.PendingUrgent(ctx, r.lastID)
		if err != nil {
			return err
		}
		ms = make([]store.Urgent, 0, len(found))
		for _, m := range found {
			ms = append(ms, store.Urgent{ID: m.ID, To: m.To, CreatedAt: m.CreatedAt})
		}
	}
	// The interrupts first: the idle agents' reads below are round trips
	// to the store, which urgent mail need not wait for. Ids become
	// visible in increasing order, and announcements come in commit
	// order, so one watermark dedups both.
	for _, m := range ms {
		if m.ID <= r.lastID {
			continue
		}
		r.lastID = m.ID
		if err := r.to.Interrupt(m.To, m.ID, m.CreatedAt); err != nil {
			// Mail to the operator, or to an agent removed by a reload: it
			// waits in the mailbox.
			r.log.Debug("urgent mail not routed", zap.Int64("id", m.ID), zap.String("to", m.To), zap.Error(err))
			continue
		}
		r.log.Debug("urgent mail routed", zap.Int64("id", m.ID), zap.String("to", m.To))
	}
	err := r.wakeIdle(ctx, what)
	// Told once every read is done (its tests wait on it), and even when
	// one failed: the dashboards follow every change.
	if r.onChange != nil {
		r.onChange(what)
	}
	return err
}

// wakeIdle wakes the idle agents that something new may be for: the
// recipients of new mail, and, when the tasks changed, the agents with work
// of their own plus as many others as there are tasks for anyone (not
// every idle agent for one task: the losers of that race would only cost).
// A woken agent claims whatever is claimable for it, so one that lost a
// task to another found nothing else: a claim calls for no new look.
func (r *Router) wakeIdle(ctx context.Context, what store.Change) error {
	if r.tasks == nil || r.idle == nil || !what.Has(store.ChangedMail|store.ChangedTasks|store.ChangedOpen) {
		return nil
	}
	idle := r.idle.IdleAgents()
	if len(idle) == 0 {
		// Nothing to wake: no query on the urgent path. The watermarks
		// lag, so the first look once an agent idles errs towards waking.
		r.openMissed = r.openMissed || what.Has(store.ChangedOpen)
		return nil
	}
	var to []string
	if what.Has(store.ChangedMail) {
		var maxID int64
		var err error
		if to, maxID, err = r.mail.RecipientsSince(ctx, r.lastMailID); err != nil {
			return err
		}
		r.lastMailID = maxID
	}
	// Notifications that say what changed say whether a write may have
	// given an idle agent work (on PostgreSQL, the tasks' trigger): no
	// read to find out. Otherwise the board's version tells.
	tasksChanged := what.Precise() && (what.Has(store.ChangedOpen) || r.openMissed)
	r.openMissed = false
	if !what.Precise() {
		tv, err := r.tasks.OpenVersion(ctx)
		if err != nil {
			return err
		}
		tasksChanged = tv != r.lastTasks
		r.lastTasks = tv
	}
	var err error
	var anyone int
	var mine map[string]int
	if tasksChanged {
		// More tasks than idle agents wake no more of them.
		if anyone, mine, err = r.tasks.Claimable(ctx, len(idle)); err != nil {
			return err
		}
	}
	var rest []string
	for _, a := range idle {
		switch {
		case slices.Contains(to, a) || mine[a] > 0:
			_ = r.idle.Wake(a) // an agent removed meanwhile has nothing to wake
		case r.reviewOnly == nil || !r.reviewOnly(a):
			rest = append(rest, a)
		}
	}
	// Take turns, so that the same agents do not get every task.
	for i := range min(anyone, len(rest)) {
		_ = r.idle.Wake(rest[(r.turn+i)%len(rest)])
	}
	if len(rest) > 0 {
		r.turn = (r.turn + anyone) % len(rest)
	}
	return nil
}
