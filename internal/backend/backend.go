// Package backend runs backend sessions: one subprocess tree of a coding-agent
// CLI or any command per session, with the prompt on stdin, output appended to
// the session's log file and read as it streams, and an exit classification
// that does not take exit code 0 for success where the backend has its own
// success record. Process trees are owned by a proc.Supervisor, so
// nothing a session starts outlives it.
package backend

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/swarmd/swarmd/internal/proc"
)

// Outcome is how a session ended. The runner maps it to the state machine's
// exit outcome; this package does not import agent.
type Outcome uint8

// Outcomes. The zero value is not an outcome, so a Result that was never
// filled in is not mistaken for a success.
// DefaultGracePeriod is how long a cancelled or interrupted session gets
// between SIGTERM and SIGKILL when nothing sets it: the config's
// defaults.grace_period and the runner's zero value both mean this.
const DefaultGracePeriod = 10 * time.Second

const (
	OutcomeSuccess Outcome = iota + 1
	OutcomeError
)

func (o Outcome) String() string {
	switch o {
	case OutcomeSuccess:
		return "success"
	case OutcomeError:
		return "error"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Abort reasons of seed 004 for abnormal terminations.
const (
	AbortUserInterrupt  = "user_interrupt"  // SIGINT, exit 130
	AbortShutdownSignal = "shutdown_signal" // SIGTERM, exit 143
	AbortTimeout        = "timeout"         // the session timeout, exit 124
	AbortOOM            = "oom"             // SIGKILL that we did not send, exit 137
	// AbortOOMKilled: the kernel killed a process of the session for its
	// cgroup's memory.max (memory_max), as memory.events counts it.
	AbortOOMKilled        = "oom_killed"
	AbortPermissionDenied = "permission_denied" // exit 126
	AbortUnknown          = "unknown"
	// AbortUrgentMessage is set by the runner, not a backend: urgent mail
	// interrupted the session, whatever cancel signal its backend uses.
	AbortUrgentMessage = "urgent_message"
	// AbortMaxTurns: the session reached Spec.MaxTurns, by the CLI's own
	// limit (Claude Code's --max-turns) or by swarmd's count of the stream.
	AbortMaxTurns = "max_turns"
	// AbortBudgetExhausted is set by the runner: the agent's budget ran out
	// and swarmd cancelled the session.
	AbortBudgetExhausted = "budget_exhausted"
	// AbortProviderError is set by the runner: the session's CLI kept
	// retrying against a provider that stayed down, and swarmd ended it
	// (its agent waits for the provider's probe like the others).
	AbortProviderError = "provider_error"
	// AbortParentAborted is set by the runner: swarmd, the session's
	// parent, ended it because its daemon could not keep the agent's lease
	// on a shared store (the lease guard killed it, or another daemon took
	// the agent).
	AbortParentAborted = "parent_aborted"
)

// Spec is one session to start.
type Spec struct {
	Agent     string
	SessionID string // unique across daemon restarts; also the process tree's id
	Seq       uint32 // 1 for an agent's first session
	Dir       string // working directory; must exist
	// Env is extra KEY=VALUE (SWARM_* and the configured env), applied over
	// the daemon's environment and the backend's own env.
	Env []string
	// Defaults are KEY=VALUE swarmd gives every session (the agent's git
	// identity): over the daemon's environment, under the backend's env
	// and Env, so that anything configured wins.
	Defaults []string
	// PathPrepend, if set, goes first in the session's effective PATH
	// (whichever of the daemon's env, the backend's or Env set it): swarmd's
	// own directory, so that agents find `swarmd mail`.
	PathPrepend string
	Prompt      string // written to stdin, never put on the command line
	// HeadBefore is the worktree's HEAD when the session starts, for the
	// log header (may be empty).
	HeadBefore string
	LogPath    string // stdout and stderr are appended here, between a header and a footer line
	// MaxLogBytes, if positive, caps the output appended to LogPath: past it
	// output is still parsed but not written, and one line at the end says
	// how many bytes were dropped.
	MaxLogBytes int64
	// There is no timeout here: the runner owns session_timeout (it
	// cancels the session, then force-stops it after the grace period).

	// MaxTurns, if positive, limits the session's model turns (responses):
	// passed to a CLI that has a flag for it (Claude Code's --max-turns),
	// counted from the stream for the others, which are cancelled once the
	// last allowed turn's tool calls have ended. Such a session ends with
	// AbortMaxTurns. Backends without a stream ignore it.
	MaxTurns int
	// MemoryMax, if positive, bounds the session's process tree in bytes
	// (its cgroup's memory.max, where cgroups with the memory controller
	// are in use).
	MemoryMax int64
	// OnTool, if set, is told of every tool call of a session with a stream:
	// when it ends, and when the session ends for a call that never did. It
	// is called from the goroutine reading the output, so it must be quick.
	OnTool func(ToolCall)
	// Tools is the agent's tool policy: given to the CLI where it has a
	// mechanism for it, and enforced from the stream: a session that
	// starts a refused call is cancelled (Result.Denied, abort reason
	// permission_denied). Backends without a stream ignore it.
	Tools ToolPolicy
	// Sandbox, if set, wraps the session's command line (its binary found
	// in the session's PATH, by absolute path) in a sandbox: the returned
	// command line runs instead, as a wrapper (proc.Spec.Wrapped). files
	// are what the command line names that the backend wrote for the
	// session (a tools policy), which the sandbox must show, read-only.
	Sandbox func(argv, files []string) []string
	// OnProgress, if set, is told what the stream has shown so far (usage,
	// model, provider trouble) each time that changes. It is called from
	// the goroutine reading the output, so it must be quick.
	OnProgress func(Progress)
	// Probe: the session tests a provider that was down (the provider's
	// breaker granted it). A CLI whose own retries can be capped gets them
	// capped (Claude Code's CLAUDE_CODE_MAX_RETRIES): one probe is a
	// handful of requests, not a retry storm of its own.
	Probe bool
}

// Progress is what a running session's stream has shown so far beyond its
// output: the tokens (and cost, if the backend reports one before its end),
// the model, and trouble with the provider.
type Progress struct {
	Usage Usage
	Model string
	// RateLimited: the provider refused a request for a rate limit;
	// RateLimitedUntil is its reset when known. The CLI may still be
	// retrying.
	RateLimited      bool
	RateLimitedUntil time.Time
	// ProviderError is the first server error, overload or network error
	// the stream showed ("" when none).
	ProviderError string
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
	// success, an ordinary error exit or a fatal error.
	AbortReason    string
	Started, Ended time.Time

	// The fields below are filled by backends with structured output
	// (claude, codex, gemini); see Reporter.

	Usage     Usage
	ToolCalls int // tool calls started
	// CPU is the whole process tree's CPU time, from its cgroup (0
	// without one); OOMKilled says the kernel killed one of its processes
	// for the cgroup's memory limit.
	CPU       time.Duration
	OOMKilled bool
	Tools     []ToolCall // the first MaxToolCalls of them, in order
	// Turns is how many model turns (responses) the stream showed.
	Turns int
	// TurnLimit: the CLI said it stopped at its own turn limit.
	TurnLimit bool
	// Text is the backend's final result text, cut to MaxResultText bytes.
	Text string
	// ResultAt is when the backend's result record was read; zero without one.
	ResultAt time.Time
	// Fatal names the cause of an error that no retry can fix (an invalid
	// API key). The runner stops the agent with it instead of starting
	// another session. A session that saw one is ended at once, without
	// waiting for the backend's own retries, and its Outcome is Error.
	Fatal string
	// RateLimited reports that a session that did not succeed was refused
	// for a rate limit (HTTP 429). RetryAfter is the provider's reset time
	// when the backend reported one (a retry-after, a reset timestamp),
	// else zero: the agent stays in CoolingDown at least until then.
	RateLimited bool
	RetryAfter  time.Time
	// ProviderError is the first server error (5xx), overload or network
	// error of the provider that the stream showed, for a session that did
	// not succeed ("" when none).
	ProviderError string
	// Model is the model the stream named ("" when it names none).
	Model string
	// Denied is the first tool call that Spec.Tools refused: the session
	// was cancelled for it (abort reason permission_denied).
	Denied *ToolDenial

	// LogDropped is how many bytes of output were not written to the log
	// because of Spec.MaxLogBytes.
	LogDropped int64
	// DiskFull, if set, says how writing the session log failed for lack of
	// space (ENOSPC or EDQUOT). Such a session is an error, whatever its
	// exit: its output is lost and the agent should back off.
	DiskFull string
}

// Usage is the tokens and cost a session reported. Input tokens exclude
// cache reads and writes, which are counted on their own, whatever the
// provider's convention.
type Usage struct {
	InputTokens      int64
	OutputTokens     int64
	CacheReadTokens  int64
	CacheWriteTokens int64
	CostUSD          float64 // 0 when the backend does not report a cost
}

// Tokens is the sum of all token kinds.
func (u Usage) Tokens() int64 {
	return u.InputTokens + u.OutputTokens + u.CacheReadTokens + u.CacheWriteTokens
}

// ToolCall is one tool call of a session. End is zero for a call that never
// finished (the session ended during it).
type ToolCall struct {
	ID   string // the backend's id of the call, "" when it gives none
	Name string
	// Input summarises the call's input: its main argument (a shell
	// command, a file path, a search pattern) or its arguments as compact
	// JSON, at most MaxToolInput bytes.
	Input      string
	Start, End time.Time
	Failed     bool // the tool reported an error (a shell command's non-zero exit)
}

// Limits on what a Result holds of a session's output.
const (
	MaxResultText = 2 << 10
	MaxToolCalls  = 256
	MaxToolInput  = 1 << 10
)

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

// Reporter is a StreamParser that reports more than a verdict: usage, tool
// calls, the result text, and errors that decide what the runner does next.
// The claude, codex and gemini backends' parsers are Reporters.
type Reporter interface {
	StreamParser
	// Fatal returns the cause of an error that no retry can fix as soon as
	// the output showed one, else "". It is asked after every line: the
	// session then ends at once instead of waiting for the CLI's retries.
	Fatal() string
	// Exit tells the parser how the leader ended (-1: killed by a signal),
	// before Verdict and Report; some CLIs say it only in their exit code.
	Exit(code int)
	// Report fills r's Usage, ToolCalls, Tools, Turns, TurnLimit, Text,
	// ResultAt, Fatal, RateLimited and RetryAfter, and hands the calls that
	// never ended to the OnTool function.
	Report(r *Result)
	// OnTool sets the function told of each tool call as it ends (see
	// Spec.OnTool); it is called before the first line.
	OnTool(func(ToolCall))
	// Turns is how many model turns the output has shown so far, and
	// whether the last one called tools that have all ended: the CLI is
	// about to ask the model for another turn.
	Turns() (n int, settled bool)
	// OnToolStart sets the function told of each tool call as it starts
	// (before the first line), so that a refused one is caught at once.
	OnToolStart(func(ToolCall))
	// Progress is what the output has shown so far (Spec.OnProgress).
	Progress() Progress
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

// AgentCLIConfig configures the claude, codex and gemini backends.
type AgentCLIConfig struct {
	Name    string   // default: the backend type ("claude", ...)
	Command string   // the binary: a path, or a name looked up in PATH at each start; default the type
	Args    []string // appended to the built-in invocation
	Model   string   // --model, when set
	// AllowedTools is passed as --allowedTools, one flag each (claude only).
	AllowedTools []string
	CancelSignal syscall.Signal // default SIGINT for claude and codex, SIGTERM for gemini
	Env          []string       // KEY=VALUE for every session, over the backend's own, under Spec.Env
	// FilesDir is where the files written for a session go (Gemini CLI's
	// tools policy), each removed when its session ends; "" is the
	// system's temporary directory.
	FilesDir string
	// Now is the clock for tool-call times and reset times; nil means time.Now.
	Now func() time.Time
}

// agentCLI is what the agent-CLI backends share: a fixed argv and env per
// backend and a new parser per session.
type agentCLI struct {
	sup       *proc.Supervisor
	name      string
	command   string
	args      []string
	env       []string
	cancelSig syscall.Signal
	filesDir  string // AgentCLIConfig.FilesDir
	parser    func() Reporter
	// turnsFlag is the CLI's flag for Spec.MaxTurns ("" when it has none:
	// swarmd counts the turns from the stream).
	turnsFlag string
	// toolArgs maps Spec.Tools to the CLI's own mechanism: the arguments,
	// and a file to remove when the session ends ("" for none). Nil: the
	// CLI has none, and swarmd's check of the stream is all there is.
	toolArgs func(p ToolPolicy, sessionID, dir string) (args []string, file string, err error)
	// probeArgs and probeEnv cap the CLI's own retries in a probe session
	// (Spec.Probe): arguments before the last one (the prompt's "-" where
	// there is one), and variables over the backend's env.
	probeArgs, probeEnv []string
	// probeArgsFor, if set, gives probeArgs from the session's environment
	// (KEY=VALUE, later entries winning), for a CLI whose cap depends on it.
	probeArgsFor func(env []string) []string
}

// insertBeforeStdin puts more before args' last element when that is "-"
// (the prompt read from stdin, which must stay last), else at the end.
func insertBeforeStdin(args, more []string) []string {
	if n := len(args); n > 0 && args[n-1] == "-" {
		return slices.Concat(args[:n-1], more, []string{"-"})
	}
	return slices.Concat(args, more)
}

func newAgentCLI(sup *proc.Supervisor, typ string, cfg AgentCLIConfig, cancel syscall.Signal) (agentCLI, error) {
	if sup == nil {
		return agentCLI{}, fmt.Errorf("backend: new %s backend: nil supervisor", typ)
	}
	if cfg.Name == "" {
		cfg.Name = typ
	}
	if cfg.Command == "" {
		cfg.Command = typ
	}
	if cfg.CancelSignal == 0 {
		cfg.CancelSignal = cancel
	}
	return agentCLI{sup: sup, name: cfg.Name, command: cfg.Command, cancelSig: cfg.CancelSignal, filesDir: cfg.FilesDir}, nil
}

func (a *agentCLI) start(ctx context.Context, spec Spec) (Session, error) {
	args := a.args
	if spec.MaxTurns > 0 && a.turnsFlag != "" {
		args = append(slices.Clip(args), a.turnsFlag, strconv.Itoa(spec.MaxTurns))
	}
	env := a.env
	if spec.Probe {
		more := a.probeArgs
		if a.probeArgsFor != nil {
			more = a.probeArgsFor(slices.Concat(os.Environ(), spec.Defaults, a.env, spec.Env))
		}
		if len(more) > 0 {
			args = insertBeforeStdin(args, more)
		}
		env = append(slices.Clip(env), a.probeEnv...)
	}
	var file string
	if !spec.Tools.Empty() && a.toolArgs != nil {
		more, f, err := a.toolArgs(spec.Tools, spec.SessionID, a.filesDir)
		if err != nil {
			return nil, err
		}
		args, file = append(slices.Clip(args), more...), f
	}
	s, err := startSession(ctx, a.sup, spec, launch{
		path:       a.command,
		args:       args,
		env:        env,
		cancelSig:  a.cancelSig,
		parser:     a.parser(),
		turnsByCLI: a.turnsFlag != "",
		removeFile: file,
	})
	if err != nil && file != "" {
		os.Remove(file)
	}
	return s, err
}
