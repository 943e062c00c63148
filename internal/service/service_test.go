package service

import (
	"context"
	"errors"
	"slices"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// counted is a Func that counts its starts and stops.
func counted(starts, stops *int) Service {
	return Func(func(context.Context) (func(), error) {
		*starts++
		return func() { *stops++ }, nil
	})
}

// Start twice starts once; Stop before Start, and Stop twice, stop nothing
// more than what ran; a stopped service starts again.
func TestFuncIdempotent(t *testing.T) {
	var starts, stops int
	s := counted(&starts, &stops)
	s.Stop()
	if stops != 0 {
		t.Fatalf("Stop before Start stopped %d times", stops)
	}
	ctx := context.Background()
	for range 2 {
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if starts != 1 {
		t.Fatalf("two Starts started %d times, want 1", starts)
	}
	s.Stop()
	s.Stop()
	if stops != 1 {
		t.Fatalf("two Stops stopped %d times, want 1", stops)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if got, want := [2]int{starts, stops}, [2]int{2, 2}; got != want {
		t.Fatalf("start, stop, start, stop: %v starts and stops, want %v", got, want)
	}
}

// A Func whose start fails is not running: Stop does not call a stop, and
// the next Start tries again.
func TestFuncStartError(t *testing.T) {
	boom := errors.New("boom")
	var tries int
	s := Func(func(context.Context) (func(), error) {
		tries++
		if tries == 1 {
			return func() { t.Error("stop of a start that failed") }, boom
		}
		return nil, nil
	})
	if err := s.Start(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Start: %v, want %v", err, boom)
	}
	s.Stop()
	if err := s.Start(context.Background()); err != nil || tries != 2 {
		t.Fatalf("Start after a failure: %v after %d tries, want nil after 2", err, tries)
	}
	s.Stop() // a nil stop: nothing to do
}

// Stop cancels the loop's context and returns only once run has returned.
func TestLoopStopWaits(t *testing.T) {
	cancelled, release, ended := make(chan struct{}), make(chan struct{}), make(chan struct{})
	s := Loop(func(ctx context.Context) {
		<-ctx.Done()
		close(cancelled)
		<-release // run is slow to return: Stop must wait for it
		close(ended)
	})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil { // running: a no-op, not a second goroutine
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() { s.Stop(); close(stopped) }()
	<-cancelled
	select {
	case <-stopped:
		t.Fatal("Stop returned while run was still running")
	default:
	}
	close(release)
	<-stopped
	select {
	case <-ended:
	default:
		t.Fatal("Stop returned before run did")
	}
	s.Stop() // again: nothing runs, nothing to wait for
}

// The context given to Start bounds the loop too.
func TestLoopStartContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan struct{})
	s := Loop(func(ctx context.Context) { <-ctx.Done(); close(ended) })
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-ended
	s.Stop()
}

// recorder is a Service that writes its name to a log at each start and
// stop, and fails to start with err.
type recorder struct {
	name string
	log  *[]string
	err  error
	loop Service // a goroutine of its own while it runs
}

func (r *recorder) Start(ctx context.Context) error {
	if r.err != nil {
		return r.err
	}
	if r.loop == nil {
		r.loop = Loop(func(ctx context.Context) { <-ctx.Done() })
	}
	*r.log = append(*r.log, "start "+r.name)
	return r.loop.Start(ctx)
}

func (r *recorder) Stop() {
	*r.log = append(*r.log, "stop "+r.name)
	r.loop.Stop()
}

// A group starts in order and stops in reverse, once.
func TestGroupOrder(t *testing.T) {
	var log []string
	g := NewGroup(&recorder{name: "a", log: &log}, &recorder{name: "b", log: &log}, &recorder{name: "c", log: &log})
	g.Stop() // before Start: nothing to stop
	ctx := context.Background()
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	g.Stop()
	g.Stop()
	want := []string{"start a", "start b", "start c", "stop c", "stop b", "stop a"}
	if !slices.Equal(log, want) {
		t.Fatalf("got %q, want %q", log, want)
	}
}

// A service that fails to start stops those started before it, in
// reverse, starts none after it, and leaves no goroutine (goleak); the
// group's Stop then has nothing to stop.
func TestGroupStartError(t *testing.T) {
	var log []string
	boom := errors.New("boom")
	g := NewGroup(&recorder{name: "a", log: &log}, &recorder{name: "b", log: &log},
		&recorder{name: "c", log: &log, err: boom}, &recorder{name: "d", log: &log})
	if err := g.Start(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Start: %v, want %v", err, boom)
	}
	g.Stop()
	want := []string{"start a", "start b", "stop b", "stop a"}
	if !slices.Equal(log, want) {
		t.Fatalf("got %q, want %q", log, want)
	}
}
