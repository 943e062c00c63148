package control

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fakeAPI struct {
	mu      sync.Mutex
	stopped []string
	paused  map[string]PauseRequest
	events  []Event
}

func (f *fakeAPI) Agents() []AgentStatus {
	return []AgentStatus{{Name: "alice", State: "Running", Seq: 3}, {Name: "bob", State: "Stopped"}}
}

func (f *fakeAPI) Agent(name string) (AgentStatus, error) {
	for _, a := range f.Agents() {
		if a.Name == name {
			return a, nil
		}
	}
	return AgentStatus{}, fmt.Errorf("%w %q (agents: alice, bob)", ErrUnknownAgent, name)
}

func (f *fakeAPI) StopAgent(ctx context.Context, name string) error {
	if pid, ok := PeerPID(ctx); !ok || pid != os.Getpid() {
		return fmt.Errorf("peer pid %d, %v; want this process, %d", pid, ok, os.Getpid())
	}
	if _, err := f.Agent(name); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = append(f.stopped, name)
	return nil
}

func (f *fakeAPI) StartAgent(_ context.Context, name string) error {
	if name == "alice" {
		return fmt.Errorf("%w: alice is Running, not Stopped", ErrConflict)
	}
	return nil
}

func (f *fakeAPI) PauseAgent(_ context.Context, name string, req PauseRequest) (PauseResult, error) {
	if _, err := f.Agent(name); err != nil {
		return PauseResult{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	_, already := f.paused[name]
	f.paused[name] = req
	return PauseResult{Agent: name, State: "Running", Already: already, Frozen: req.Now, Processes: 7}, nil
}

func (f *fakeAPI) ResumeAgent(_ context.Context, name string) (ResumeResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	req, ok := f.paused[name]
	if !ok {
		return ResumeResult{}, fmt.Errorf("%w: %s is not paused", ErrConflict, name)
	}
	delete(f.paused, name)
	return ResumeResult{Agent: name, State: "Running", Thawed: req.Now}, nil
}

func (f *fakeAPI) add(e Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e.ID = int64(len(f.events) + 1)
	f.events = append(f.events, e)
}

func (f *fakeAPI) Events(_ context.Context, agent string, after int64, limit int) ([]Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Event
	for _, e := range f.events {
		if e.ID > after && (agent == "" || e.Agent == agent) {
			out = append(out, e)
		}
	}
	return out, nil
}

func serve(t *testing.T) (*fakeAPI, *Client, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "swarmd.sock")
	api := &fakeAPI{paused: map[string]PauseRequest{}}
	s, err := Listen(path, api, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return api, NewClient(path), path
}

func TestSocketModeAndCalls(t *testing.T) {
	api, c, path := serve(t)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("socket mode %o, want 600", got)
	}
	ctx := context.Background()
	as, err := c.Agents(ctx)
	if err != nil || len(as) != 2 || as[0].Name != "alice" || as[0].Seq != 3 {
		t.Fatalf("Agents = %+v, %v", as, err)
	}
	if _, err := c.Agent(ctx, "dave"); !errors.Is(err, ErrUnknownAgent) {
		t.Errorf("Agent(dave) = %v", err)
	}
	if err := c.Stop(ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx, "alice"); !errors.Is(err, ErrConflict) {
		t.Errorf("Start(alice) = %v, want conflict", err)
	}
	if len(api.stopped) != 1 || api.stopped[0] != "bob" {
		t.Errorf("stopped = %v", api.stopped)
	}
}

func TestEventsFollow(t *testing.T) {
	api, c, _ := serve(t)
	api.add(Event{Agent: "alice", Event: "WorktreeReady"})
	api.add(Event{Agent: "bob", Event: "WorktreeReady"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan Event, 10)
	errc := make(chan error, 1)
	go func() {
		errc <- c.Events(ctx, "alice", 0, true, func(e Event) error { got <- e; return nil })
	}()
	if e := <-got; e.ID != 1 {
		t.Fatalf("first event %+v", e)
	}
	api.add(Event{Agent: "bob", Event: "PromptReady"})
	api.add(Event{Agent: "alice", Event: "PromptReady"})
	select {
	case e := <-got:
		if e.ID != 4 || e.Event != "PromptReady" {
			t.Fatalf("followed event %+v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no followed event")
	}
	cancel()
	<-errc
}

func TestNoDaemon(t *testing.T) {
	c := NewClient(filepath.Join(t.TempDir(), "swarmd.sock"))
	if _, err := c.Agents(context.Background()); !errors.Is(err, ErrNoDaemon) {
		t.Errorf("err = %v, want ErrNoDaemon", err)
	}
}

// TestPauseResume: the request's options reach the API and its results
// come back; resuming an agent that is not paused is a conflict.
func TestPauseResume(t *testing.T) {
	api, c, _ := serve(t)
	ctx := context.Background()
	res, err := c.Pause(ctx, "alice", PauseRequest{Now: true, Reason: "deploy window"})
	if err != nil || res != (PauseResult{Agent: "alice", State: "Running", Frozen: true, Processes: 7}) {
		t.Fatalf("Pause = %+v, %v", res, err)
	}
	if got := api.paused["alice"]; got != (PauseRequest{Now: true, Reason: "deploy window"}) {
		t.Fatalf("the API got %+v", got)
	}
	if res, err := c.Pause(ctx, "alice", PauseRequest{}); err != nil || !res.Already {
		t.Fatalf("second Pause = %+v, %v", res, err)
	}
	if _, err := c.Pause(ctx, "dave", PauseRequest{}); !errors.Is(err, ErrUnknownAgent) {
		t.Fatalf("Pause(dave) = %v", err)
	}
	if r, err := c.Resume(ctx, "alice"); err != nil || r.Agent != "alice" {
		t.Fatalf("Resume = %+v, %v", r, err)
	}
	if _, err := c.Resume(ctx, "alice"); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "not paused") {
		t.Fatalf("second Resume = %v, want a conflict", err)
	}
}
