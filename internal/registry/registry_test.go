package registry

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/worktree"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// blockedWorkspace holds a runner in Initializing until it is stopped, so
// the registry is tested without processes.
type blockedWorkspace struct{}

func (blockedWorkspace) Ensure(ctx context.Context, _ string) (worktree.Worktree, error) {
	<-ctx.Done()
	return worktree.Worktree{}, ctx.Err()
}
func (blockedWorkspace) Verify(ctx context.Context, a string) (worktree.Worktree, error) {
	return blockedWorkspace{}.Ensure(ctx, a)
}
func (blockedWorkspace) Head(context.Context, string) (string, error) { return "", nil }
func (blockedWorkspace) CommitsBetween(context.Context, string, string) (int, error) {
	return 0, nil
}
func (blockedWorkspace) ClearStaleLocks(context.Context, string) ([]string, error) { return nil, nil }

type noBackend struct{}

func (noBackend) Start(context.Context, backend.Spec) (backend.Session, error) {
	return nil, errors.New("unused")
}

type noPrompter struct{}

func (noPrompter) Build(context.Context, runner.PromptRequest) (runner.Prompt, error) {
	return runner.Prompt{}, nil
}
func (noPrompter) Release(context.Context, runner.Unstarted, func(error)) error { return nil }
func (noPrompter) Settle(context.Context, runner.Settlement, func(error)) (runner.SettleResult, error) {
	return runner.SettleResult{}, nil
}
func (noPrompter) Started(context.Context, string, string, int64, func(error)) error { return nil }
func (noPrompter) Stopped(context.Context, string, string, bool, func(error)) error  { return nil }
func (noPrompter) Begin(context.Context, runner.SessionBegin, func(error)) (uint32, error) {
	return 0, nil
}
func (noPrompter) Transient(error) bool { return false }
func (noPrompter) Fenced(error) bool    { return false }

func newRunner(t *testing.T, name string) *runner.Runner {
	t.Helper()
	r, err := runner.New(runner.Config{Name: name, Backend: noBackend{}, Workspace: blockedWorkspace{},
		Prompter: noPrompter{}, Settler: noPrompter{}, Logs: logs.New(t.TempDir(), 0, 0, nil)})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRegisterQueryShutdown(t *testing.T) {
	ctx := context.Background()
	g := New(nil)
	for _, n := range []string{"bob", "alice"} {
		if err := g.Register(ctx, newRunner(t, n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Register(ctx, newRunner(t, "alice")); !errors.Is(err, ErrDuplicate) {
		t.Errorf("duplicate register = %v", err)
	}
	if got := strings.Join(g.Names(), ","); got != "alice,bob" {
		t.Errorf("names = %s", got)
	}
	if st := g.States(); len(st) != 2 || st["alice"].State.Kind != agent.Initializing {
		t.Errorf("states = %+v", st)
	}
	_, err := g.Runner("dave")
	var ue *UnknownAgentError
	if !errors.As(err, &ue) || !errors.Is(err, ErrUnknownAgent) || !strings.Contains(err.Error(), "alice, bob") {
		t.Errorf("Runner(dave) = %v", err)
	}
	if err := g.Remove("alice"); err == nil {
		t.Error("removed a running agent")
	}
	if err := g.Stop("alice", "operator"); err != nil {
		t.Fatal(err)
	}
	r, _ := g.Runner("alice")
	<-r.Done()
	if err := g.Remove("alice"); err != nil {
		t.Errorf("remove stopped: %v", err)
	}
	if err := g.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	bob, _ := g.Runner("bob")
	select {
	case <-bob.Done():
	default:
		t.Fatal("Shutdown returned before bob's runner finished")
	}
	if s := bob.Snapshot(); s.State.Kind != agent.Stopped || !strings.Contains(s.Reason, "daemon") {
		t.Errorf("bob after shutdown: %+v", s)
	}
	if err := g.Register(ctx, newRunner(t, "carol")); !errors.Is(err, ErrClosed) {
		t.Errorf("register after shutdown = %v", err)
	}
}

func TestReRegisterStoppedAgent(t *testing.T) {
	ctx := context.Background()
	g := New(nil)
	r1 := newRunner(t, "alice")
	if err := g.Register(ctx, r1); err != nil {
		t.Fatal(err)
	}
	r1.Stop("operator")
	select {
	case <-r1.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("runner did not stop")
	}
	if err := g.Register(ctx, newRunner(t, "alice")); err != nil {
		t.Errorf("re-register after stop: %v", err)
	}
	if err := g.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
