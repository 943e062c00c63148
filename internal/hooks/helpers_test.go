package hooks

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/proc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const waitLimit = 10 * time.Second // generous: -race on two shared cores

// newSupervisor returns a Supervisor closed at the end of the test. There is
// one per process at a time, so tests in this package do not run in parallel.
func newSupervisor(t testing.TB) *proc.Supervisor {
	t.Helper()
	s, err := proc.NewSupervisor(t.TempDir(), zap.NewNop())
	if err != nil {
		t.Fatalf("NewSupervisor: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// results records what onResult was given.
type results struct {
	mu  sync.Mutex
	got []Result
	evs []Event
}

func (r *results) record(ev Event, res Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, ev)
	r.got = append(r.got, res)
}

func (r *results) outcomes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.got))
	for i, res := range r.got {
		out[i] = res.Outcome
	}
	return out
}

func (r *results) all() []Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Result(nil), r.got...)
}

// hookEnvFor returns an environment for hooks in a test: the test's own, a
// marker that every process a hook starts inherits (so leftovers can be found
// in /proc), and HOOK_OUT, a directory the hooks write their findings to.
func hookEnvFor(t *testing.T) (env []string, mark, out string) {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	mark = "HOOKS_TEST_MARK=" + hex.EncodeToString(b[:])
	out = t.TempDir()
	env = append(os.Environ(), mark, "HOOK_OUT="+out)
	t.Cleanup(func() {
		// Do not leave processes behind even if the test failed.
		for _, pid := range marked(mark) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return env, mark, out
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
			continue // gone, or not ours to read
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

func noLeftovers(t *testing.T, mark string) {
	t.Helper()
	if pids := marked(mark); len(pids) > 0 {
		t.Fatalf("processes of the hook still alive: %v", pids)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return string(b)
}

// waitForFile polls for a file that a running hook writes.
func waitForFile(t *testing.T, path string) string {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not written within %s", path, waitLimit)
		}
		time.Sleep(time.Millisecond)
	}
}
