package runner

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/hooks"
	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/proc"
)

// These tests drive the runner with real processes and real signals through
// the scripted backend; the synctest tests cover the timer arithmetic.

func newSupervisor(t *testing.T) *proc.Supervisor {
	t.Helper()
	sup, err := proc.NewSupervisor(t.TempDir(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sup.Close() })
	return sup
}

func scripted(t *testing.T, sup *proc.Supervisor, steps ...backend.ScriptStep) *backend.Scripted {
	t.Helper()
	b, err := backend.NewScripted(sup, backend.ScriptedConfig{Name: "test", Steps: steps})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// realHarness is a harness whose backend runs real processes.
func realHarness(t *testing.T, be Backend, mod func(*Config)) *harness {
	t.Helper()
	return newHarness(t, func(c *Config) {
		c.Backend = be
		c.GracePeriod = 300 * time.Millisecond
		if mod != nil {
			mod(c)
		}
	})
}

// waitReal waits on the runner's change notifications with a real deadline.
func (h *harness) waitReal(what string, cond func(Snapshot) bool) Snapshot {
	h.t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		s, ch := h.r.Watch()
		if cond(s) {
			return s
		}
		select {
		case <-ch:
		case <-deadline:
			h.t.Fatalf("timed out waiting for %s; state %v; path %s", what, s.State, h.rec.path())
		}
	}
}

// markedProcesses lists live processes whose environment carries the
// session id: what a session left behind. The runner puts SWARM_SESSION_ID
// there; waitMarked proves it, so that a check that finds nothing has
// looked for the right thing.
func markedProcesses(t *testing.T, sessionID string) []int {
	t.Helper()
	var pids []int
	ents, _ := os.ReadDir("/proc")
	needle := []byte("SWARM_SESSION_ID=" + sessionID + "\x00")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(env, needle) {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && len(stat) > i+2 && stat[i+2] == 'Z' {
			pids = append(pids, -pid) // a zombie nobody reaped is a leak too
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// waitMarked polls until at least n live processes carry the session's id:
// the session's and its children's (a setsid grandchild inherits it too).
func waitMarked(t *testing.T, sessionID string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		live := 0
		for _, pid := range markedProcesses(t, sessionID) {
			if pid > 0 {
				live++
			}
		}
		if live >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d processes carry SWARM_SESSION_ID=%s, want %d: the runner does not mark its sessions", live, sessionID, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (h *harness) logDir() string { return h.r.cfg.Logs.(*logs.Store).LogDir("alice") }

// waitOutput polls a session log until it contains want.
func (h *harness) waitOutput(file, want string) {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(h.logDir(), file))
		if bytes.Contains(b, []byte(want)) {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s never printed %q: %q", file, want, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func sessionIDs(h *harness) []string {
	var ids []string
	for _, tr := range h.rec.transitions() {
		if tr.Event.Kind == agent.SessionStarted {
			ids = append(ids, tr.SessionID)
		}
	}
	return ids
}

func assertNoLeftovers(t *testing.T, h *harness) {
	t.Helper()
	for _, id := range sessionIDs(h) {
		if pids := markedProcesses(t, id); len(pids) > 0 {
			t.Errorf("session %s left processes %v", id, pids)
		}
	}
}

func TestRealSuccessLoop(t *testing.T) {
	sup := newSupervisor(t)
	h := realHarness(t, scripted(t, sup, backend.ScriptStep{Print: []string{"hello"}, SetsidChild: true}), nil)
	h.start()
	h.waitReal("seq 3", func(s Snapshot) bool { return s.Seq >= 3 })
	h.stop()
	if !strings.HasPrefix(h.rec.path(), "Initializing>BuildingPrompt>Spawning>Running>SessionComplete>BuildingPrompt>Spawning>Running>SessionComplete") {
		t.Errorf("path = %s", h.rec.path())
	}
	// Stopping archived the logs; the store still reads them.
	store := h.r.cfg.Logs.(*logs.Store)
	rc, _, err := store.Open("alice", 1)
	if err != nil {
		t.Fatal(err)
	}
	log, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Contains(log, []byte("hello")) || !bytes.Contains(log, []byte("head 0123abcd")) {
		t.Errorf("session log: %q", log)
	}
	if entries, _ := os.ReadDir(store.LogDir("alice")); len(entries) != 0 {
		t.Errorf("%d files left in the log dir after archiving", len(entries))
	}
	if archives, _ := filepath.Glob(filepath.Join(store.ArchiveDir("alice"), "*.tar.gz")); len(archives) != 1 {
		t.Errorf("archives = %v, want one", archives)
	}
	// Every session started a setsid grandchild; none survived its session.
	assertNoLeftovers(t, h)
}

func TestRealUrgentInterruptExitsOnCancel(t *testing.T) {
	sup := newSupervisor(t)
	h := realHarness(t, scripted(t, sup, backend.ScriptStep{Sleep: time.Hour, SetsidChild: true}), nil)
	h.start()
	h.waitReal("Running", func(s Snapshot) bool { return s.State.Kind == agent.Running })
	waitMarked(t, sessionIDs(h)[0], 2) // the session and its setsid grandchild
	h.r.Interrupt(1, time.Now())
	h.waitReal("next session", func(s Snapshot) bool { return s.State.Kind == agent.Running && len(sessionIDs(h)) == 2 })
	s := h.r.Snapshot()
	if s.ConsecutiveErrors != 0 || s.TotalErrors != 0 {
		t.Errorf("interrupt counted as an error: %d/%d", s.ConsecutiveErrors, s.TotalErrors)
	}
	for _, tr := range h.rec.transitions() {
		if tr.Event.Kind == agent.GraceExceeded {
			t.Error("a session that exits on cancel needed a force stop")
		}
	}
	if !strings.Contains(h.rec.path(), "Running>Interrupting>BuildingPrompt>Spawning>Running") {
		t.Errorf("path = %s", h.rec.path())
	}
	first := sessionIDs(h)[0]
	if pids := markedProcesses(t, first); len(pids) > 0 {
		t.Errorf("interrupted session left %v", pids)
	}
	h.stop()
	assertNoLeftovers(t, h)
}

func TestRealUrgentInterruptIgnoredIsForceStopped(t *testing.T) {
	sup := newSupervisor(t)
	h := realHarness(t, scripted(t, sup, backend.ScriptStep{Print: []string{"ready"}, Sleep: time.Hour, IgnoreSignals: true, SetsidChild: true}), nil)
	h.start()
	h.waitReal("Running", func(s Snapshot) bool { return s.State.Kind == agent.Running })
	h.waitOutput("1.log", "ready") // the script's trap is set
	waitMarked(t, sessionIDs(h)[0], 2)
	start := time.Now()
	h.r.Interrupt(1, time.Now())
	h.waitReal("next session", func(s Snapshot) bool { return len(sessionIDs(h)) == 2 })
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("next session after %v, before the grace period", took)
	}
	var grace bool
	for _, tr := range h.rec.transitions() {
		grace = grace || (tr.Event.Kind == agent.GraceExceeded && tr.Effect.Kind == agent.ForceStopSession)
	}
	if !grace {
		t.Errorf("no GraceExceeded/ForceStopSession; path %s", h.rec.path())
	}
	if pids := markedProcesses(t, sessionIDs(h)[0]); len(pids) > 0 {
		t.Errorf("force-stopped session left %v", pids)
	}
	h.stop()
	assertNoLeftovers(t, h)
}

func TestRealSessionTimeout(t *testing.T) {
	sup := newSupervisor(t)
	h := realHarness(t, scripted(t, sup, backend.ScriptStep{Sleep: time.Hour, IgnoreSignals: true}), func(c *Config) {
		c.Timeout = 200 * time.Millisecond
	})
	h.start()
	s := h.waitReal("CoolingDown", func(s Snapshot) bool { return s.State.Kind == agent.CoolingDown })
	if s.ConsecutiveErrors != 1 {
		t.Errorf("consecutive = %d", s.ConsecutiveErrors)
	}
	h.stop()
	h.rec.mu.Lock()
	rec := h.rec.sessions[0]
	h.rec.mu.Unlock()
	if rec.Outcome.Kind != agent.Timeout || rec.Result.AbortReason != "timeout" {
		t.Errorf("session record outcome %v abort %q", rec.Outcome, rec.Result.AbortReason)
	}
	assertNoLeftovers(t, h)
}

func TestRealOperatorStopWhileRunningEndsTree(t *testing.T) {
	sup := newSupervisor(t)
	h := realHarness(t, scripted(t, sup, backend.ScriptStep{Print: []string{"ready"}, Sleep: time.Hour, IgnoreSignals: true, SetsidChild: true}), nil)
	h.start()
	h.waitReal("Running", func(s Snapshot) bool { return s.State.Kind == agent.Running })
	h.waitOutput("1.log", "ready") // the script's trap is set
	waitMarked(t, sessionIDs(h)[0], 2)
	start := time.Now()
	h.stop()
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("stop took %v", took)
	}
	assertNoLeftovers(t, h)
}

func TestRealMissingBinaryCountsErrors(t *testing.T) {
	sup := newSupervisor(t)
	be, err := backend.NewCommand(sup, backend.CommandConfig{Command: "/nonexistent/agent-cli"})
	if err != nil {
		t.Fatal(err)
	}
	h := realHarness(t, be, nil)
	h.start()
	s := h.waitReal("CoolingDown", func(s Snapshot) bool { return s.State.Kind == agent.CoolingDown })
	if s.TotalErrors != 1 {
		t.Errorf("total errors = %d", s.TotalErrors)
	}
	var reason string
	for _, tr := range h.rec.transitions() {
		if tr.Event.Kind == agent.SessionExited {
			reason = tr.Event.Outcome.Msg
		}
	}
	if !strings.Contains(reason, "/nonexistent/agent-cli") {
		t.Errorf("error reason %q does not name the binary", reason)
	}
	h.stop()
}

func TestRealHooksAroundSessions(t *testing.T) {
	sup := newSupervisor(t)
	dir := t.TempDir()
	record := func(event string) string {
		// Each hook appends its event and payload to a file in the worktree's
		// parent, in one write: the stop may kill a hook that is running.
		return `line="$SWARM_HOOK_EVENT $(cat)"; echo "$line" >> ` + filepath.Join(dir, "hooks.log")
	}
	hk := hooks.New(sup, hooks.Config{Commands: map[hooks.Event][]string{
		hooks.AgentStart:   {record("agent_start")},
		hooks.SessionStart: {record("session_start")},
		hooks.SessionEnd:   {record("session_end")},
		hooks.AgentStopped: {record("agent_stopped"), "ls " + filepath.Join(dir, "logs", "alice") + " | wc -l > " + filepath.Join(dir, "left")},
	}}, zaptest.NewLogger(t), nil)
	h := realHarness(t, scripted(t, sup, backend.ScriptStep{Print: []string{"x"}}), func(c *Config) {
		c.Hooks = hk
		c.Logs = logs.New(dir, 0, 0, nil)
	})
	h.start()
	h.waitReal("seq 3", func(s Snapshot) bool { return s.Seq >= 3 })
	h.stop()
	b, err := os.ReadFile(filepath.Join(dir, "hooks.log"))
	if err != nil {
		t.Fatal(err)
	}
	var lines, events []string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" {
			lines = append(lines, l)
			ev, _, _ := strings.Cut(l, " ")
			events = append(events, ev)
		}
	}
	got := strings.Join(events, ",")
	if !strings.HasPrefix(got, "agent_start,session_start,session_end,session_start,") || !strings.HasSuffix(got, ",agent_stopped") {
		t.Errorf("hook order = %s", got)
	}
	if !strings.Contains(lines[2], `"outcome":"Success"`) || !strings.Contains(lines[2], `"head_before":"0123abcd"`) || !strings.Contains(lines[2], `"seq":1`) {
		t.Errorf("session_end payload = %s", lines[2])
	}
	// agent_stopped runs after the logs were archived.
	if left, _ := os.ReadFile(filepath.Join(dir, "left")); strings.TrimSpace(string(left)) != "0" {
		t.Errorf("agent_stopped saw %q files in the log dir, want 0 (archived first)", left)
	}
}

func TestRealSessionStartHookBlocks(t *testing.T) {
	sup := newSupervisor(t)
	hk := hooks.New(sup, hooks.Config{Commands: map[hooks.Event][]string{
		hooks.SessionStart: {"echo 'tests are red' >&2; exit 2"},
	}}, zap.NewNop(), nil)
	be := &countingBackend{Backend: scripted(t, sup, backend.ScriptStep{})}
	h := realHarness(t, be, func(c *Config) {
		c.Hooks = hk
		c.Thresholds = agent.Thresholds{MaxConsecutiveErrors: 2, MaxTotalErrors: 20}
	})
	h.start()
	h.stoppedOnItsOwn()
	s := h.r.Snapshot()
	if s.State.Kind != agent.Stopped || s.ConsecutiveErrors != 2 {
		t.Fatalf("state %v errors %d", s.State, s.ConsecutiveErrors)
	}
	var reason string
	for _, tr := range h.rec.transitions() {
		if tr.Event.Kind == agent.SessionExited {
			reason = tr.Event.Outcome.Msg
		}
	}
	if !strings.Contains(reason, "blocked by hook") {
		t.Errorf("reason %q", reason)
	}
	if n := be.starts.Load(); n != 0 {
		t.Errorf("the backend started %d sessions past a blocking hook", n)
	}
	if n := len(h.pr.released); n != 2 {
		t.Errorf("mail of %d blocked prompts returned, want 2", n)
	}
}

// countingBackend counts the sessions a real backend was asked to start.
type countingBackend struct {
	Backend
	starts atomic.Int32
}

func (c *countingBackend) Start(ctx context.Context, spec backend.Spec) (backend.Session, error) {
	c.starts.Add(1)
	return c.Backend.Start(ctx, spec)
}

func newBenchSupervisor(b *testing.B) (*proc.Supervisor, error) {
	return proc.NewSupervisor(b.TempDir(), zap.NewNop())
}

// A daemon's stop leaves the logs where they are, for its next start to
// archive (the daemon's archivePrevious); they read back meanwhile.
func TestRealDaemonStopLeavesLogsLive(t *testing.T) {
	sup := newSupervisor(t)
	h := realHarness(t, scripted(t, sup, backend.ScriptStep{Print: []string{"hello"}}), nil)
	h.start()
	h.waitReal("seq 2", func(s Snapshot) bool { return s.Seq >= 2 })
	h.r.Stop("daemon")
	if err := <-h.err; err != nil {
		t.Fatal(err)
	}
	<-h.r.Done()
	store := h.r.cfg.Logs.(*logs.Store)
	if archives, _ := filepath.Glob(filepath.Join(store.ArchiveDir("alice"), "*.tar.gz")); len(archives) != 0 {
		t.Errorf("archives = %v, want none (the next start's)", archives)
	}
	rc, ref, err := store.Open("alice", 1)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if !ref.Live || !bytes.Contains(b, []byte("hello")) {
		t.Errorf("session 1: live %v, log %q; want it live, with its output", ref.Live, b)
	}
}
