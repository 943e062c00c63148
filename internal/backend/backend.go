// Package backend runs backend sessions: one subprocess tree of a coding-agent
// CLI or any command per session, with the prompt on stdin, output appended to
// the session's log file and read as it streams, and an exit classification
// that does not take exit code 0 for success where the backend has its own
// success record (SPEC §5). Process trees are owned by a proc.Supervisor, so
// nothing a session starts outlives it.
package backend

import (
	"context"
	"errors"
	"strconv"
	"syscall"
	"time"
)

// Outcome is how a session ended. The runner maps it to the state machine's
// exit outcome; this package does not import agent.
type Outcome uint8

// Outcomes. The zero value is not an outcome, so a Result that was never
// filled in is not mistaken for a success.
const (
	OutcomeSuccess Outcome = iota + 1
	OutcomeError
	OutcomeTimeout
)

func (o Outcome) String() string {
	switch o {
	case OutcomeSuccess:
		return "success"
	case OutcomeError:
		return "error"
	case OutcomeTimeout:
		return "timeout"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Abort reasons of seed 004 for abnormal terminations.
const (
	AbortUserInterrupt    = "user_interrupt"    // SIGINT, exit 130
	AbortShutdownSignal   = "shutdown_signal"   // SIGTERM, exit 143
	AbortTimeout          = "timeout"           // the session timeout, exit 124
	AbortOOM              = "oom"               // SIGKILL that we did not send, exit 137
	AbortPermissionDenied = "permission_denied" // exit 126
	AbortUnknown          = "unknown"
)

// DefaultGraceAfterTimeout is how long a session that timed out gets to exit
// after the cancel signal before it is killed.
const DefaultGraceAfterTimeout = 5 * time.Second

// Spec is one session to start.
type Spec struct {
	Agent     string
	SessionID string // unique across daemon restarts; also the process tree's id
	Seq       uint32 // 1 for an agent's first session
	Dir       string // working directory; must exist
	// Env is extra KEY=VALUE (SWARM_* and the configured env), applied over
	// the daemon's environment and the backend's own env.
	Env    []string
	Prompt string // written to stdin, never put on the command line
	// HeadBefore is the worktree's HEAD when the session starts, for the
	// log header (may be empty).
	HeadBefore string
	LogPath    string // stdout and stderr are appended here, between a header and a footer line
	// Timeout, if positive, cancels the session (cancel signal) when it
	// expires and kills it GraceAfterTimeout later; the outcome is Timeout.
	Timeout           time.Duration
	GraceAfterTimeout time.Duration // 0 means DefaultGraceAfterTimeout
}

// Result is how a session ended.
type Result struct {
	Outcome Outcome
	// Reason is for people: "exit status 1", "killed by SIGKILL (force
	// stop)", "session timeout after 1h0m0s", "binary not found: claude",
	// "exit 0 without a success record".
	Reason   string
	ExitCode int    // -1 if killed by a signal
	Signal   string // "SIGTERM" etc.; "" if the leader exited
	// AbortReason classifies an abnormal end by seed 004's table; "" for a
	// success or an ordinary error exit.
	AbortReason    string
	Started, Ended time.Time
}

// Session is one running backend session.
type Session interface {
	ID() string
	Pid() int // the leader's pid; 0 if it never started
	// Done is closed when the session has ended and its whole process tree is gone.
	Done() <-chan struct{}
	Result() Result // valid once Done is closed
	// Cancel asks the session to stop: the backend's cancel signal to its
	// process group. It returns nil if the session has already ended.
	Cancel() error
	// ForceStop kills everything the session started. It returns nil if the
	// session has already ended.
	ForceStop() error
	// LastOutput is when the session last wrote output (its heartbeat); the
	// start time until it writes any.
	LastOutput() time.Time
}

// Backend starts sessions.
type Backend interface {
	Name() string
	// Start starts a session. ctx bounds only the start, not the session.
	Start(ctx context.Context, spec Spec) (Session, error)
}

// StreamParser reads a backend's output line by line as it streams (from one
// goroutine), for backends that report their own result. A backend makes a
// new one per session.
type StreamParser interface {
	Line(line []byte)
	// Verdict is asked once the session's tree is gone: success if the
	// backend's own success record was seen, and the backend's error text,
	// if any, for the Result's reason.
	Verdict() (success bool, detail string)
}

// ErrInvalidSpec is returned by Start for a Spec it cannot run.
var ErrInvalidSpec = errors.New("backend: invalid session spec")

// Start errors for a backend binary that cannot run: the session never
// started. The error text names the binary.
var (
	ErrBinaryNotFound = errors.New("binary not found")
	ErrNotExecutable  = errors.New("permission denied")
)

// AbortReasonFor classifies a leader's exit by seed 004's table: exit codes
// 124, 126, 130, 137 and 143 and the signals SIGINT, SIGTERM and SIGKILL. It
// returns "" for any other exit code, and AbortUnknown for other signals.
func AbortReasonFor(exitCode int, sig syscall.Signal) string {
	switch sig {
	case 0:
	case syscall.SIGINT:
		return AbortUserInterrupt
	case syscall.SIGTERM:
		return AbortShutdownSignal
	case syscall.SIGKILL:
		return AbortOOM
	default:
		return AbortUnknown
	}
	switch exitCode {
	case 124:
		return AbortTimeout
	case 126:
		return AbortPermissionDenied
	case 130:
		return AbortUserInterrupt
	case 137:
		return AbortOOM
	case 143:
		return AbortShutdownSignal
	}
	return ""
}

// abortForSignal is the abort reason of a signal we sent.
func abortForSignal(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return AbortUserInterrupt
	case syscall.SIGTERM:
		return AbortShutdownSignal
	}
	return AbortUnknown
}
