package runner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/worktree"
)

// fakeSession is a session whose end the test (or its cancel behaviour)
// decides. Used inside testing/synctest bubbles, where real processes cannot
// run but timers are exact.
type fakeSession struct {
	id           string
	exitOnCancel bool
	// exitedOnItsOwn: a cancel finds the process over with exit 0, its
	// end not yet seen (Done still open): the cancel reaches nothing.
	exitedOnItsOwn bool
	result         backend.Result

	mu       sync.Mutex
	cancels  int
	forced   int
	freezes  int
	thaws    int
	done     chan struct{}
	finished bool
}

// Freeze and Thaw count; a real tree's freeze is proc's and backend's test.
func (s *fakeSession) Freeze() (int, error) { s.mu.Lock(); s.freezes++; s.mu.Unlock(); return 3, nil }
func (s *fakeSession) Thaw() (int, error)   { s.mu.Lock(); s.thaws++; s.mu.Unlock(); return 3, nil }
func (s *fakeSession) frozenCounts() (freezes, thaws int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.freezes, s.thaws
}

func (s *fakeSession) ID() string             { return s.id }
func (s *fakeSession) Pid() int               { return 4242 }
func (s *fakeSession) Done() <-chan struct{}  { return s.done }
func (s *fakeSession) LastOutput() time.Time  { return time.Time{} }
func (s *fakeSession) Result() backend.Result { s.mu.Lock(); defer s.mu.Unlock(); return s.result }
func (s *fakeSession) counts() (cancels, forced int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cancels, s.forced
}

func (s *fakeSession) finish(res backend.Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.finished {
		return
	}
	s.finished = true
	s.result = res
	close(s.done)
}

func (s *fakeSession) Cancel() error {
	s.mu.Lock()
	s.cancels++
	exit, own := s.exitOnCancel, s.exitedOnItsOwn
	s.mu.Unlock()
	if own {
		s.finish(backend.Result{Outcome: backend.OutcomeSuccess})
		return nil
	}
	if exit {
		s.finish(backend.Result{Outcome: backend.OutcomeError, Reason: "killed by SIGTERM", Signal: "SIGTERM"})
	}
	return nil
}

func (s *fakeSession) ForceStop() error {
	s.mu.Lock()
	s.forced++
	s.mu.Unlock()
	s.finish(backend.Result{Outcome: backend.OutcomeError, Reason: "killed by SIGKILL", Signal: "SIGKILL"})
	return nil
}

// fakeBackend hands out sessions; plan decides each session's behaviour.
type fakeBackend struct {
	mu       sync.Mutex
	sessions []*fakeSession
	specs    []backend.Spec
	// plan configures session n (0-based) before Start returns it; nil = runs until cancelled.
	plan     func(n int, s *fakeSession)
	startErr func(n int) error
	block    chan struct{} // if set, Start waits for it (or ctx)
}

func (b *fakeBackend) Start(ctx context.Context, spec backend.Spec) (backend.Session, error) {
	if b.block != nil {
		select {
		case <-b.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.specs)
	b.specs = append(b.specs, spec)
	if b.startErr != nil {
		if err := b.startErr(n); err != nil {
			return nil, err
		}
	}
	s := &fakeSession{id: spec.SessionID, done: make(chan struct{}), exitOnCancel: true}
	if b.plan != nil {
		b.plan(n, s)
	}
	b.sessions = append(b.sessions, s)
	return s, nil
}

func (b *fakeBackend) session(n int) *fakeSession {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n >= len(b.sessions) {
		return nil
	}
	return b.sessions[n]
}

func (b *fakeBackend) starts() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.specs)
}

type fakeWorkspace struct {
	dir       string
	block     bool // Ensure waits for ctx
	verifyErr error
	// holdVerify: Verify waits for ctx, holding the runner in
	// SessionComplete.
	holdVerify bool
}

func (w *fakeWorkspace) Ensure(ctx context.Context, name string) (worktree.Worktree, error) {
	if w.block {
		<-ctx.Done()
		return worktree.Worktree{}, ctx.Err()
	}
	return worktree.Worktree{Agent: name, Path: w.dir, Branch: "swarm/" + name + "/work"}, nil
}

func (w *fakeWorkspace) Head(context.Context, string) (string, error) { return "0123abcd", nil }

func (w *fakeWorkspace) CommitsBetween(context.Context, string, string) (int, error) { return 0, nil }

func (w *fakeWorkspace) ClearStaleLocks(context.Context, string) ([]string, error) { return nil, nil }

func (w *fakeWorkspace) Verify(ctx context.Context, name string) (worktree.Worktree, error) {
	if w.verifyErr != nil {
		return worktree.Worktree{}, w.verifyErr
	}
	if w.holdVerify {
		<-ctx.Done()
		return worktree.Worktree{}, ctx.Err()
	}
	return w.Ensure(ctx, name)
}

type fakePrompter struct {
	mu        sync.Mutex
	reqs      []PromptRequest
	released  []string
	releases  []Unstarted
	settled   []Settlement
	watermark int64
	mail      int // messages every prompt carries
	signalled bool
	idle      bool     // with MayIdle, a prompt is Idle (nothing to do)
	stopped   []string // "AGENT failed" or "AGENT not failed": how Stopped was told
	block     bool
	buildErr  error // what Build fails with while set
	begun     []SessionBegin
	hold      chan struct{} // if set, Settle waits for it (a busy store)
	refusal   error         // what the store says while Settle waits for hold; nil: errStoreBusy
	task      int64         // the task every prompt carries (0: none)
	// inDoubt: Begin makes the session's row, but its commit's answer is
	// lost, and the store stays away (a refusal that passes) until ctx ends.
	inDoubt bool
	rows    map[string]bool // session rows Begin may have made: open (true) or closed
	newTask bool            // task is claimed for each prompt: the session's Begin starts it
	// held is the task each session's Begin started, until Release returns
	// it; split, every commit after which a session that never started
	// was closed while its task was still held (a daemon killed there
	// leaves it IN_PROGRESS, for the next start to take back as a crash's).
	held  map[string]int64
	split []string
}

func (p *fakePrompter) Build(ctx context.Context, req PromptRequest) (Prompt, error) {
	if p.block {
		<-ctx.Done()
		return Prompt{}, ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reqs = append(p.reqs, req)
	if p.buildErr != nil {
		return Prompt{}, p.buildErr
	}
	if req.MayIdle && p.idle {
		return Prompt{Idle: true}, nil
	}
	return Prompt{Text: "prompt for " + req.SessionID, Watermark: p.watermark, Mail: p.mail, Task: p.task, NewTask: p.newTask}, nil
}

func (p *fakePrompter) Settle(ctx context.Context, s Settlement, wait func(error)) (SettleResult, error) {
	if p.hold != nil {
		// A store that refuses until the test lets it take the write, and
		// takes every write at once after that.
		select {
		case <-p.hold:
		default:
			wait(cmp.Or(p.refusal, errStoreBusy))
			select {
			case <-p.hold:
			case <-ctx.Done():
				return SettleResult{}, ctx.Err()
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.settled = append(p.settled, s)
	if p.rows[s.Session.SessionID] {
		p.rows[s.Session.SessionID] = false
	}
	p.committed()
	return SettleResult{Signalled: p.signalled}, nil
}

func (p *fakePrompter) Started(context.Context, string, string, int64, func(error)) error { return nil }

func (p *fakePrompter) Begin(ctx context.Context, b SessionBegin, wait func(error)) (uint32, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.begun = append(p.begun, b)
	if p.rows == nil {
		p.rows = map[string]bool{}
	}
	p.rows[b.SessionID] = true
	if b.Task != 0 {
		if p.held == nil {
			p.held = map[string]int64{}
		}
		p.held[b.SessionID] = b.Task
	}
	if p.inDoubt {
		p.mu.Unlock()
		wait(errStoreBusy)
		<-ctx.Done()
		p.mu.Lock()
		return 0, ctx.Err()
	}
	return 0, nil
}

func (p *fakePrompter) Transient(err error) bool {
	return errors.Is(err, errStoreBusy) || errors.Is(err, errFenced)
}

func (p *fakePrompter) Fenced(err error) bool { return errors.Is(err, errFenced) }

// errStoreBusy is a store refusal that passes (fakePrompter.Transient).
var errStoreBusy = errors.New("store busy")

// errFenced is a write refused because the daemon lost the agent's lease
// (fakePrompter.Fenced).
var errFenced = errors.New("agent's lease not held")

func (p *fakePrompter) Stopped(_ context.Context, agent, _ string, failed bool, _ func(error)) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if failed {
		p.stopped = append(p.stopped, agent+" failed")
	} else {
		p.stopped = append(p.stopped, agent+" not failed")
	}
	return nil
}

func (p *fakePrompter) settlements() []Settlement {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Settlement(nil), p.settled...)
}

func (p *fakePrompter) Release(_ context.Context, u Unstarted, _ func(error)) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.released = append(p.released, u.SessionID)
	p.releases = append(p.releases, u)
	if u.Ended != nil && p.rows[u.SessionID] {
		p.rows[u.SessionID] = false
	}
	if u.Started != 0 && p.held[u.SessionID] == u.Started {
		delete(p.held, u.SessionID)
	}
	p.committed()
	return nil
}

// committed notes, after a write, each session closed with its task held.
// Only sessions that never started are tested with it (a session that ran
// keeps its task past its end).
func (p *fakePrompter) committed() {
	for id, task := range p.held {
		if !p.rows[id] {
			p.split = append(p.split, fmt.Sprintf("session %s closed, task %d held", id, task))
		}
	}
}

func (p *fakePrompter) splits() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.split...)
}

// open are the session rows left open: begun (or perhaps begun) and
// neither settled nor closed with their claims' return.
func (p *fakePrompter) open() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []string
	for id, open := range p.rows {
		if open {
			ids = append(ids, id)
		}
	}
	return ids
}

func (p *fakePrompter) unstarted() []Unstarted {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Unstarted(nil), p.releases...)
}

func (p *fakePrompter) begins() []SessionBegin {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]SessionBegin(nil), p.begun...)
}

func (p *fakePrompter) requests() []PromptRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]PromptRequest(nil), p.reqs...)
}

// recorder is an Observer that keeps every transition.
type recorder struct {
	mu       sync.Mutex
	ts       []Transition
	sessions []SessionRecord
	idles    []bool
}

func (r *recorder) OnTransition(t Transition) { r.mu.Lock(); r.ts = append(r.ts, t); r.mu.Unlock() }
func (r *recorder) OnIdle(_ string, idle bool, _ time.Time) {
	r.mu.Lock()
	r.idles = append(r.idles, idle)
	r.mu.Unlock()
}
func (r *recorder) OnSessionEnd(s SessionRecord) {
	r.mu.Lock()
	r.sessions = append(r.sessions, s)
	r.mu.Unlock()
}

func (r *recorder) transitions() []Transition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Transition(nil), r.ts...)
}

// path renders the visited states, e.g. "Initializing>BuildingPrompt>...".
func (r *recorder) path() string {
	s := ""
	for i, t := range r.transitions() {
		if i == 0 {
			s = t.From.Kind.String()
		}
		s += ">" + t.To.Kind.String()
	}
	return s
}

type harness struct {
	t   *testing.T
	r   *Runner
	be  *fakeBackend
	ws  *fakeWorkspace
	pr  *fakePrompter
	rec *recorder
	err chan error
}

func newHarness(t *testing.T, mod func(*Config)) *harness {
	t.Helper()
	h := &harness{t: t, be: &fakeBackend{}, ws: &fakeWorkspace{dir: t.TempDir()}, pr: &fakePrompter{mail: 1}, rec: &recorder{}, err: make(chan error, 1)}
	cfg := Config{
		Name: "alice", Role: "test role", Backend: h.be, Workspace: h.ws, Prompter: h.pr, Settler: h.pr, Observer: h.rec,
		GracePeriod: 10 * time.Second, Logs: logs.New(t.TempDir(), 0, 0, nil),
	}
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.r = r
	return h
}

func (h *harness) start() {
	go func() { h.err <- h.r.Run(context.Background()) }()
}

// waitFor blocks until cond holds for the runner's snapshot. Inside a
// synctest bubble it cannot hang: a deadlock fails the test.
func (h *harness) waitFor(what string, cond func(Snapshot) bool) Snapshot {
	h.t.Helper()
	deadline := time.NewTimer(10 * time.Minute) // fake time inside synctest
	defer deadline.Stop()
	for {
		s, ch := h.r.Watch()
		if cond(s) {
			return s
		}
		select {
		case <-ch:
		case <-deadline.C:
			h.t.Fatalf("timed out waiting for %s; state %v; path %s", what, s.State, h.rec.path())
		}
	}
}

func (h *harness) waitState(k agent.StateKind) Snapshot {
	h.t.Helper()
	return h.waitFor(k.String(), func(s Snapshot) bool { return s.State.Kind == k })
}

// stoppedOnItsOwn waits for Run to return the StoppedError of an agent
// that stopped by itself (thresholds, max_sessions, a fatal error), with
// the reason its snapshot shows.
func (h *harness) stoppedOnItsOwn() {
	h.t.Helper()
	err := <-h.err
	var se *StoppedError
	if !errors.As(err, &se) || se.Agent != h.r.Name() || se.Reason == "" || se.Reason != h.r.Snapshot().Reason {
		h.t.Fatalf("Run = %v, want the StoppedError of %s with its snapshot's reason %q", err, h.r.Name(), h.r.Snapshot().Reason)
	}
}

func (h *harness) stop() {
	h.t.Helper()
	h.r.Stop("operator")
	if err := <-h.err; err != nil {
		h.t.Fatal(err)
	}
	<-h.r.Done()
}

var errBoom = errors.New("boom")

func (p *fakePrompter) setIdle(idle bool) { p.mu.Lock(); p.idle = idle; p.mu.Unlock() }

func (r *recorder) idleChanges() []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bool(nil), r.idles...)
}
