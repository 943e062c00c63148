package merge

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/proc"
	"github.com/swarmd/swarmd/internal/store"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(runHelper(spec)) // batch_test.go: a queue to kill
	}
	// Tests must not depend on the machine's git config.
	for k, v := range map[string]string{
		"GIT_CONFIG_GLOBAL":   os.DevNull,
		"GIT_CONFIG_NOSYSTEM": "1",
		"GIT_AUTHOR_NAME":     "Test",
		"GIT_AUTHOR_EMAIL":    "test@example.com",
		"GIT_COMMITTER_NAME":  "Test",
		"GIT_COMMITTER_EMAIL": "test@example.com",
	} {
		os.Setenv(k, v)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(pgtest.Share()))
}

const waitLimit = 20 * time.Second // generous: -race on two shared cores

// gitT runs git in dir and returns its trimmed standard output.
func gitT(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := gitOut(dir, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// gitEnvT is gitT with env added to git's environment.
func gitEnvT(t testing.TB, dir string, env []string, args ...string) string {
	t.Helper()
	out, err := gitEnvOut(dir, env, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func gitOut(dir string, args ...string) (string, error) {
	return gitEnvOut(dir, nil, args...)
}

func gitEnvOut(dir string, env []string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(append(os.Environ(), "LC_ALL=C"), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// commitFile writes path (relative to the worktree dir) and commits it.
func commitFile(t testing.TB, dir, path, content, msg string) string {
	t.Helper()
	writeFile(t, filepath.Join(dir, path), content)
	gitT(t, dir, "add", "--", path)
	gitT(t, dir, "commit", "-q", "-m", msg)
	return gitT(t, dir, "rev-parse", "HEAD")
}

// env is one test's world: a repository with branch main (checked out
// nowhere unless a test checks it out), the state dir, swarm.db, a
// Supervisor, the log store, and recorders for callbacks and metrics.
type env struct {
	t        *testing.T
	repo     string // the main working tree (detached at main's first commit)
	stateDir string
	db       *store.DB
	sup      *proc.Supervisor
	logs     *logs.Store
	cb       *recorder
	metrics  *metricsRecorder
	mark     string // KEY=VALUE in every gate's environment, to find its processes
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, repo: t.TempDir(), stateDir: filepath.Join(t.TempDir(), "state"), cb: newRecorder(), metrics: &metricsRecorder{}}
	gitT(t, e.repo, "init", "-q", "-b", "main")
	writeFile(t, filepath.Join(e.repo, "f.txt"), "one\ntwo\nthree\n")
	gitT(t, e.repo, "add", "f.txt")
	gitT(t, e.repo, "commit", "-q", "-m", "initial")
	gitT(t, e.repo, "checkout", "-q", "--detach") // main is checked out nowhere
	var err error
	if e.db, err = store.Open(context.Background(), filepath.Join(t.TempDir(), "swarm.db"), store.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.db.Close() })
	if e.sup, err = proc.NewSupervisor(e.stateDir, zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.sup.Close() })
	e.logs = logs.New(e.stateDir, 0, 0, nil)
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	e.mark = "MERGE_TEST_MARK=" + hex.EncodeToString(nonce[:])
	t.Cleanup(func() { killMarked(e.mark) })
	return e
}

// options are the queue's options for this env with gate and overrides.
func (e *env) options(gate ...string) Options {
	return Options{
		Repo: e.repo, StateDir: e.stateDir, Into: "main", Gate: gate, Timeout: waitLimit,
		DB: e.db, Procs: e.sup, Logs: e.logs, Callbacks: e.cb, Metrics: e.metrics,
		Log: zaptest.NewLogger(e.t, zaptest.Level(zap.WarnLevel)), Env: append(os.Environ(), e.mark),
	}
}

func (e *env) open(opts Options) *Queue {
	e.t.Helper()
	q, err := Open(context.Background(), opts)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(q.Stop)
	return q
}

// worker makes agent's worktree on branch swarm/<agent> from main.
func (e *env) worker(agent string) string {
	e.t.Helper()
	dir := filepath.Join(e.t.TempDir(), agent)
	gitT(e.t, e.repo, "worktree", "add", "-q", "-b", "swarm/"+agent+"/work", dir, "main")
	return dir
}

func (e *env) main() string { return gitT(e.t, e.repo, "rev-parse", "refs/heads/main") }

// fileAt is path's content in commit.
func (e *env) fileAt(commit, path string) string {
	e.t.Helper()
	return gitT(e.t, e.repo, "show", commit+":"+path)
}

func step(t *testing.T, q *Queue, want Outcome) {
	t.Helper()
	got, err := q.Step(context.Background())
	if err != nil {
		t.Fatalf("Step: %v", err)
	}
	if got != want {
		t.Fatalf("Step = %s, want %s", got, want)
	}
}

// recorder records the callbacks; fail makes the next calls fail.
type recorder struct {
	mu     sync.Mutex
	calls  []call
	fail   error
	called chan struct{}
}

type call struct {
	task   int64
	merged bool
	commit string
	kind   Kind
	detail string
}

func newRecorder() *recorder { return &recorder{called: make(chan struct{}, 100)} }

func (r *recorder) add(c call) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	r.calls = append(r.calls, c)
	r.called <- struct{}{}
	return nil
}

func (r *recorder) OnMerged(_ context.Context, e Entry, commit string) error {
	return r.add(call{task: e.Task, merged: true, commit: commit})
}

func (r *recorder) OnRejected(_ context.Context, e Entry, kind Kind, detail string) error {
	return r.add(call{task: e.Task, kind: kind, detail: detail})
}

func (r *recorder) all() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...)
}

func (r *recorder) setFail(err error) {
	r.mu.Lock()
	r.fail = err
	r.mu.Unlock()
}

// waitCalls waits until n callbacks have been made.
func (r *recorder) waitCalls(t *testing.T, n int) []call {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		if cs := r.all(); len(cs) >= n {
			return cs
		}
		select {
		case <-r.called:
		case <-deadline:
			t.Fatalf("%d callbacks within %s, want %d: %+v", len(r.all()), waitLimit, n, r.all())
		}
	}
}

type metricsRecorder struct {
	mu      sync.Mutex
	depth   int
	results map[string]int
	gates   int
	ahead   map[string]int
}

func (m *metricsRecorder) MergeQueueDepth(n int) { m.mu.Lock(); m.depth = n; m.mu.Unlock() }
func (m *metricsRecorder) MergeResult(r string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.results == nil {
		m.results = map[string]int{}
	}
	m.results[r]++
}
func (m *metricsRecorder) GateDuration(time.Duration) { m.mu.Lock(); m.gates++; m.mu.Unlock() }
func (m *metricsRecorder) RunAhead(result string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ahead == nil {
		m.ahead = map[string]int{}
	}
	m.ahead[result]++
}

// runsAhead is how many runs ahead came to each result.
func (m *metricsRecorder) runsAhead() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.ahead)
}

func (m *metricsRecorder) snapshot() (depth int, results map[string]int, gates int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	res := map[string]int{}
	for k, v := range m.results {
		res[k] = v
	}
	return m.depth, res, m.gates
}

// events returns the merge queue's events as "from --event--> to" lines.
func (e *env) events() []string {
	e.t.Helper()
	evs, err := e.db.Events(context.Background(), store.EventQuery{Agent: LogName})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		out = append(out, fmt.Sprintf("%s --%s--> %s: %s", ev.From, ev.Event, ev.To, ev.Reason))
	}
	return out
}

// marked lists the live processes whose environment holds mark.
func marked(mark string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		environ, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(environ, []byte{0}) {
			if string(kv) == mark {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

func killMarked(mark string) {
	for _, pid := range marked(mark) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// waitForFile polls for a file that a running gate writes.
func waitForFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not written within %s", path, waitLimit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
