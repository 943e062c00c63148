package runner

import (
	"sync"
	"testing"
)

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// The first actor to ask for a stop is the one recorded; a stop is not a
// force stop; a force stop is a stop by the daemon when nobody asked first.
func TestStopper(t *testing.T) {
	var s stopper
	s.init()
	if s.requested() || s.by() != "" || isClosed(s.forced()) || isClosed(s.done) {
		t.Fatal("a new stopper is stopped")
	}
	s.stop("operator", "")
	s.stop("daemon", "")
	if got, want := s.by(), "operator"; !s.requested() || got != want {
		t.Fatalf("after two stops: requested %v, by %q; want true, %q", s.requested(), got, want)
	}
	if isClosed(s.forced()) {
		t.Fatal("a stop forced")
	}
	s.force()
	if !isClosed(s.forced()) || s.by() != "operator" {
		t.Fatalf("force stop: forced %v, by %q", isClosed(s.forced()), s.by())
	}

	var f stopper
	f.init()
	f.force()
	if got, want := f.by(), "daemon"; !f.requested() || got != want {
		t.Fatalf("a force stop alone: requested %v, by %q; want true, %q", f.requested(), got, want)
	}
}

// Concurrent stops record exactly one of their actors.
func TestStopperConcurrent(t *testing.T) {
	var s stopper
	s.init()
	var wg sync.WaitGroup
	for _, a := range []string{"a", "b", "c", "d"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.stop(a, "")
		}()
	}
	wg.Wait()
	if got := s.by(); got != "a" && got != "b" && got != "c" && got != "d" {
		t.Fatalf("by %q", got)
	}
}
