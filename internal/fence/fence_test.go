package fence

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

// TestMain doubles as the guard: the tests start this binary with Command
// as the guard, whose kill writes the file $FENCE_TEST_KILLED names.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == Command {
		os.Exit(Main(os.Args[2:], os.Stdin, os.Stderr, func(owner, instance string) (int, error) {
			return 1, os.WriteFile(os.Getenv("FENCE_TEST_KILLED"), []byte(owner+" "+instance), 0o644)
		}))
	}
	goleak.VerifyTestMain(m)
}

// guard runs Run in a bubble on a pipe and reports when kill was called.
type guard struct {
	w      *io.PipeWriter
	killed chan string
	done   chan error
}

func startRun(t *testing.T) *guard {
	r, w := io.Pipe()
	g := &guard{w: w, killed: make(chan string, 1), done: make(chan error, 1)}
	go func() {
		g.done <- Run(context.Background(), r, func(why string) error { g.killed <- why; return nil })
		r.Close()
	}()
	return g
}

func (g *guard) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(g.w, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

func deadline(d time.Time) string { return "deadline " + strconv.FormatInt(d.UnixNano(), 10) }

// The trees are killed when the deadline passes, not before; a renewal
// moves it.
func TestRunKillsAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := startRun(t)
		start := time.Now()
		g.send(t, deadline(start.Add(10*time.Second)))
		time.Sleep(9 * time.Second)
		g.send(t, deadline(start.Add(20*time.Second))) // renewed
		time.Sleep(10*time.Second + time.Millisecond)
		synctest.Wait()
		select {
		case why := <-g.killed:
			t.Fatalf("killed at %s, before the renewed deadline: %s", time.Since(start), why)
		default:
		}
		time.Sleep(time.Second)
		synctest.Wait()
		select {
		case <-g.killed:
		default:
			t.Fatalf("not killed %s after the start, past the deadline", time.Since(start))
		}
		if err := <-g.done; err != nil {
			t.Fatal(err)
		}
		g.w.Close()
	})
}

// A clean stop kills nothing; the end of input (the daemon gone) kills at
// once; a line the guard cannot read kills too.
func TestRunStopEOFAndGarbage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := startRun(t)
		g.send(t, deadline(time.Now().Add(time.Second)))
		g.send(t, "stop")
		if err := <-g.done; err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if len(g.killed) != 0 {
			t.Fatal("killed after a stop")
		}
		g.w.Close()

		g = startRun(t)
		g.send(t, deadline(time.Now().Add(time.Hour)))
		g.w.Close()
		synctest.Wait()
		if len(g.killed) != 1 {
			t.Fatal("not killed at once when the daemon went")
		}
		<-g.done

		g = startRun(t)
		g.send(t, "deadline soon")
		synctest.Wait()
		if len(g.killed) != 1 {
			t.Fatal("not killed on a line it cannot read")
		}
		if err := <-g.done; err == nil {
			t.Fatal("no error for a bad line")
		}
		g.w.Close()
	})
}

// The guard is a process of its own: once the daemon stops giving it
// deadlines it kills on its own; a Close kills nothing.
func TestGuardProcess(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	killed := filepath.Join(t.TempDir(), "killed")
	t.Setenv("FENCE_TEST_KILLED", killed)
	argv := append([]string{exe}, Args("", "owner", "inst-1")...)

	g, err := Start(argv, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Extend(time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := os.Stat(killed); err == nil {
		t.Fatal("a closed guard killed the trees")
	}

	g, err = Start(argv, time.Now().Add(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the guard did not fire 10 s after its deadline")
	}
	b, err := os.ReadFile(killed)
	if err != nil || string(b) != "owner inst-1" {
		t.Fatalf("what the guard killed: %q, %v", b, err)
	}
	if err := g.Extend(time.Now().Add(time.Hour)); err == nil {
		t.Error("extending a guard that fired succeeded")
	}
	g.Close()
}
