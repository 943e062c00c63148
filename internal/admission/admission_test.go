package admission

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// grants records the order in which agents got their slots.
type grants struct {
	mu    sync.Mutex
	order []string
	rel   map[string]func()
}

func (g *grants) take(t *testing.T, a *Admission, ctx context.Context, agent, provider string, reasons *sync.Map) {
	go func() {
		rel, err := a.Acquire(ctx, agent, provider, func(r string) { reasons.Store(agent, r) })
		if err != nil {
			return
		}
		g.mu.Lock()
		g.order = append(g.order, agent)
		g.rel[agent] = rel
		g.mu.Unlock()
	}()
	synctest.Wait()
}

func (g *grants) got() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.order...)
}

func (g *grants) release(agent string) {
	g.mu.Lock()
	rel := g.rel[agent]
	g.mu.Unlock()
	rel()
	synctest.Wait()
}

func eq(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }

// At most MaxRunning hold a slot; the rest are served in the order they
// asked, each told why it waits.
func TestMaxRunningInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New(Limits{MaxRunning: 2})
		g := &grants{rel: map[string]func(){}}
		var reasons sync.Map
		ctx := context.Background()
		for _, ag := range []string{"a", "b", "c", "d"} {
			g.take(t, a, ctx, ag, "claude", &reasons)
		}
		if got := g.got(); !eq(got, []string{"a", "b"}) {
			t.Fatalf("granted %v, want a, b", got)
		}
		if r, _ := reasons.Load("d"); !strings.Contains(r.(string), "2 of 2 sessions running") || !strings.Contains(r.(string), "1 in line before it") {
			t.Fatalf("d waits for %q", r)
		}
		g.release("b")
		g.release("a")
		if got := g.got(); !eq(got, []string{"a", "b", "c", "d"}) {
			t.Fatalf("granted %v, want c then d after the releases", got)
		}
		if a.Running() != 2 || a.Waiting() != 0 {
			t.Fatalf("running %d, waiting %d", a.Running(), a.Waiting())
		}
		g.release("c")
		g.release("d")
		if a.Running() != 0 {
			t.Fatalf("running %d after every release", a.Running())
		}
	})
}

// A waiter held back by its provider's limit does not hold back another
// provider's behind it.
func TestPerProvider(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New(Limits{PerProvider: map[string]int{"claude": 1}})
		g := &grants{rel: map[string]func(){}}
		var reasons sync.Map
		ctx := context.Background()
		g.take(t, a, ctx, "c1", "claude", &reasons)
		g.take(t, a, ctx, "c2", "claude", &reasons)
		g.take(t, a, ctx, "x1", "codex", &reasons)
		if got := g.got(); !eq(got, []string{"c1", "x1"}) {
			t.Fatalf("granted %v, want c1 and x1 (c2 waits for claude)", got)
		}
		if r, _ := reasons.Load("c2"); !strings.Contains(r.(string), "1 of 1 claude sessions") {
			t.Fatalf("c2 waits for %q", r)
		}
		g.release("c1")
		if got := g.got(); !eq(got, []string{"c1", "x1", "c2"}) {
			t.Fatalf("granted %v", got)
		}
		g.release("x1")
		g.release("c2")
	})
}

// Below MinAvailable nothing starts; once the host has the memory again,
// the waiter gets its slot at the next look.
func TestMinAvailableMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New(Limits{MinAvailable: 2 << 30})
		var mu sync.Mutex
		avail := int64(1 << 30)
		a.memAvailable = func() (int64, error) { mu.Lock(); defer mu.Unlock(); return avail, nil }
		g := &grants{rel: map[string]func(){}}
		var reasons sync.Map
		g.take(t, a, context.Background(), "a", "claude", &reasons)
		if got := g.got(); len(got) != 0 {
			t.Fatalf("granted %v with 1 GiB available", got)
		}
		if r, _ := reasons.Load("a"); !strings.Contains(r.(string), "1024 MiB of memory available") {
			t.Fatalf("a waits for %q", r)
		}
		mu.Lock()
		avail = 3 << 30
		mu.Unlock()
		time.Sleep(a.memPoll)
		synctest.Wait()
		if got := g.got(); !eq(got, []string{"a"}) {
			t.Fatalf("granted %v once 3 GiB are available", got)
		}
		g.release("a")
	})
}

// A waiter whose context ends leaves the line; the slot it did not get
// goes to the next.
func TestCancelledWaiterLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New(Limits{MaxRunning: 1})
		g := &grants{rel: map[string]func(){}}
		var reasons sync.Map
		g.take(t, a, context.Background(), "a", "claude", &reasons)
		ctx, cancel := context.WithCancel(context.Background())
		g.take(t, a, ctx, "b", "claude", &reasons)
		g.take(t, a, context.Background(), "c", "claude", &reasons)
		cancel()
		synctest.Wait()
		if a.Waiting() != 1 {
			t.Fatalf("waiting %d after b left, want 1 (c)", a.Waiting())
		}
		g.release("a")
		if got := g.got(); !eq(got, []string{"a", "c"}) {
			t.Fatalf("granted %v, want a then c", got)
		}
		g.release("c")
	})
}

func TestParseMemAvailable(t *testing.T) {
	got, err := parseMemAvailable([]byte("MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   2048 kB\n"))
	if err != nil || got != 2048<<10 {
		t.Fatalf("got %d, %v", got, err)
	}
	if _, err := parseMemAvailable([]byte("MemTotal: 1 kB\n")); err == nil {
		t.Fatal("no MemAvailable: want an error")
	}
}
