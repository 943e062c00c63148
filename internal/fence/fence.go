// Package fence keeps a daemon's sessions inside its agents' leases on a
// shared store. The store refuses a daemon's writes for an agent whose
// lease it lost (store.FenceTx); this package makes sure its sessions are
// gone by then too: a guard process, apart from the daemon, kills every
// session tree of the daemon once the deadline it was last given passes
// (the daemon was paused, or cut off from the store, past its lease) or as
// soon as the daemon is gone. Another daemon that takes the agents once
// their leases expire can then never run a session of one alongside a
// session this daemon left running.
//
// The guard is its own process because the cases it is for are the ones
// where the daemon cannot act: stopped (SIGSTOP, a frozen VM), or dead.
package fence

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Protocol, one line each, daemon to guard on the guard's stdin:
//
//	deadline UNIX_NANOS   kill the trees at that time unless a later deadline comes first
//	stop                  the daemon stops cleanly: exit without killing
//
// End of input without "stop" is the daemon gone: kill at once.
const (
	cmdDeadline = "deadline"
	cmdStop     = "stop"
)

// Guard is the daemon's handle on its guard process.
type Guard struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	w    io.WriteCloser
	done chan struct{} // closed when the guard process has exited
	err  error         // its exit, once done
}

// Start starts the guard, argv (the swarmd binary and its lease-guard
// arguments, see Main), with the first deadline. The guard must not be in
// the trees it kills: it is started here, as a plain child of the daemon,
// never through the session supervisor.
func Start(argv []string, deadline time.Time) (*Guard, error) {
	if len(argv) == 0 {
		return nil, errors.New("start lease guard: no command")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	w, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("start lease guard: %w", err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start lease guard %s: %w", argv[0], err)
	}
	g := &Guard{cmd: cmd, w: w, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		g.mu.Lock()
		g.err = err
		g.mu.Unlock()
		close(g.done)
	}()
	if err := g.Extend(deadline); err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// Extend moves the deadline to d: the daemon renewed its leases.
func (g *Guard) Extend(d time.Time) error {
	return g.send(cmdDeadline + " " + strconv.FormatInt(d.UnixNano(), 10))
}

func (g *Guard) send(line string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.w == nil {
		return errors.New("lease guard: closed")
	}
	if _, err := io.WriteString(g.w, line+"\n"); err != nil {
		return fmt.Errorf("lease guard: %w (it has exited: the sessions were killed)", err)
	}
	return nil
}

// Done is closed once the guard process has exited: after Close, or when
// it fired (a deadline passed) or failed.
func (g *Guard) Done() <-chan struct{} { return g.done }

// Close stops the guard without killing anything and waits for it.
func (g *Guard) Close() error {
	_ = g.send(cmdStop)
	g.mu.Lock()
	if g.w != nil {
		g.w.Close()
		g.w = nil
	}
	g.mu.Unlock()
	select {
	case <-g.done:
	case <-time.After(5 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.done
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// Run is the guard's loop: it reads deadlines from r and calls kill, with
// why, once the latest passes, or at once when r ends without a stop. It
// returns after kill (its error), on stop (nil), or when ctx ends.
func Run(ctx context.Context, r io.Reader, kill func(why string) error) error {
	type msg struct {
		deadline time.Time
		stop     bool
		eof      bool
	}
	ctx, cancel := context.WithCancel(ctx) // ends the reader once Run returns
	defer cancel()
	lines := make(chan msg)
	readErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			var m msg
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 1 && f[0] == cmdStop:
				m.stop = true
			case len(f) == 2 && f[0] == cmdDeadline:
				n, err := strconv.ParseInt(f[1], 10, 64)
				if err != nil {
					readErr <- fmt.Errorf("lease guard: bad deadline %q", f[1])
					return
				}
				m.deadline = time.Unix(0, n)
			default:
				readErr <- fmt.Errorf("lease guard: bad line %q", sc.Text())
				return
			}
			select {
			case lines <- m:
			case <-ctx.Done():
				return
			}
			if m.stop {
				return
			}
		}
		select {
		case lines <- msg{eof: true}:
		case <-ctx.Done():
		}
	}()
	var timer *time.Timer
	var fire <-chan time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-readErr:
			// Input the guard cannot read is a daemon it cannot trust to
			// renew: kill, as on the end of input.
			return errors.Join(err, kill(err.Error()))
		case m := <-lines:
			switch {
			case m.stop:
				return nil
			case m.eof:
				return kill("the daemon is gone")
			}
			if timer != nil {
				timer.Stop()
			}
			timer = time.NewTimer(time.Until(m.deadline))
			fire = timer.C
		case <-fire:
			return kill("the daemon did not renew its leases before the deadline")
		}
	}
}
