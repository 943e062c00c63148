package proc

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// bwrapArgs wraps argv in a minimal bubblewrap sandbox with a pid namespace
// (the shape internal/sandbox makes), or skips loudly without bwrap.
func bwrapArgs(t *testing.T, argv ...string) (string, []string) {
	t.Helper()
	path, err := exec.LookPath("bwrap")
	if err != nil && os.Getenv("SWARMD_REQUIRE_BWRAP") == "1" {
		t.Fatal("bwrap is not installed and SWARMD_REQUIRE_BWRAP=1")
	}
	if err != nil {
		t.Skip("*** bwrap not installed: the wrapped-tree tests did NOT run")
	}
	return path, append([]string{"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--"}, argv...)
}

// A wrapped tree's signal reaches the command inside, not the wrapper: the
// command handles it (exit 7) where the wrapper, signalled, would have
// died and ended the tree with the signal. With and without cgroups.
func TestWrappedTreeSignalReachesTheCommand(t *testing.T) {
	for _, withCgroup := range []bool{false, true} {
		t.Run(map[bool]string{false: "group", true: "cgroup"}[withCgroup], func(t *testing.T) {
			var s *Supervisor
			if withCgroup {
				s, _ = cgroupSupervisor(t)
			} else {
				s = newSupervisor(t)
			}
			out := newLineSink()
			path, args := bwrapArgs(t, "/bin/sh", "-c", `trap 'echo got; exit 7' INT; echo ready; while :; do sleep 0.05; done`)
			tr, err := s.Start(Spec{Path: path, Args: args, ID: "wrapped-int", Output: out, Wrapped: true})
			if err != nil {
				t.Fatal(err)
			}
			if got := out.next(t); got != "ready" {
				t.Fatalf("first line %q", got)
			}
			if err := tr.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			waitDone(t, tr)
			if st := tr.Exit(); st.Code != 7 || st.Signal != 0 {
				t.Errorf("exit %v, want exit status 7 (the command handled SIGINT)", st)
			}
		})
	}
}

// A wrapped command killed by a signal reads as that signal, not as the
// wrapper's exit status 128+N.
func TestWrappedTreeExitReadsAsTheSignal(t *testing.T) {
	s := newSupervisor(t)
	path, args := bwrapArgs(t, "/bin/sh", "-c", `kill -TERM $$`)
	tr, err := s.Start(Spec{Path: path, Args: args, ID: "wrapped-term", Wrapped: true})
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, tr)
	if st := tr.Exit(); st.Signal != syscall.SIGTERM || st.Code != -1 {
		t.Errorf("exit %v, want killed by SIGTERM", st)
	}
}

// A signal sent before the command inside exists ends the tree through its
// wrapper instead of being lost.
func TestWrappedTreeEarlySignalIsNotLost(t *testing.T) {
	s := newSupervisor(t)
	path, args := bwrapArgs(t, "/bin/sleep", "3600")
	tr, err := s.Start(Spec{Path: path, Args: args, ID: "wrapped-early", Wrapped: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitDone(t, tr)
	if st := tr.Exit(); st.Signal != syscall.SIGTERM {
		t.Errorf("exit %v, want killed by SIGTERM", st)
	}
}
