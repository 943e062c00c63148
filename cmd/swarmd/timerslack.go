package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// envStartSlack carries the timer slack the daemon was started with across
// its execution of itself, for the trees it starts; it is removed at once.
const envStartSlack = "SWARMD_STARTED_TIMER_SLACK"

// selfExe is the running binary, even if its file was replaced since.
const selfExe = "/proc/self/exe"

// raiseTimerSlack applies limits.daemon_timer_slack: the timer slack of
// every thread of the daemon (how late the kernel may end a timed sleep).
//
// Why: while the daemon works, the Go runtime's monitor thread (sysmon)
// sleeps 20µs at a time, and each wake-up costs a context switch; it backs
// off only after a millisecond without work for it, and every time the
// daemon goes idle and wakes (each session's start and end) it starts over.
// That was 11-20% of the daemon's CPU (BENCHMARKS.md). With a slack of a
// few milliseconds its short sleeps, and the runtime's other short waits,
// last about that long.
//
// A thread's slack is copied by the threads it creates, and the monitor
// thread is the runtime's first, made before main runs: only a process
// started with the slack gives it to that thread. So the daemon, started
// with another, sets its own thread's and executes itself again (same pid,
// arguments and environment, plus envStartSlack), which the rest of the
// process then inherits. It returns the slack the trees are to get back
// (0: this process's, when nothing was raised), or an error when the slack
// stays as it was.
func raiseTimerSlack(want time.Duration) (trees int, err error) {
	started, again := os.LookupEnv(envStartSlack)
	if again {
		os.Unsetenv(envStartSlack) // sessions must not see it
	}
	cur, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		return 0, fmt.Errorf("timer slack: %w", err)
	}
	if again {
		// Executed again: never a second time, whatever happened.
		n, perr := strconv.Atoi(started)
		if perr != nil || n <= 0 {
			return 0, fmt.Errorf("timer slack: %s=%q is not a slack", envStartSlack, started)
		}
		if time.Duration(cur) != want {
			return n, fmt.Errorf("timer slack is %dns after executing again, want %dns", cur, want.Nanoseconds())
		}
		return n, nil
	}
	if want <= 0 || time.Duration(cur) == want {
		return 0, nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(want.Nanoseconds()), 0, 0, 0); err != nil {
		return 0, fmt.Errorf("timer slack: %w", err)
	}
	err = syscall.Exec(selfExe, os.Args, append(os.Environ(), envStartSlack+"="+strconv.Itoa(cur)))
	// Still here: the exec failed. This thread gets its slack back.
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(cur), 0, 0, 0)
	return 0, fmt.Errorf("timer slack: execute %s again: %w", selfExe, err)
}
