// Package hooks runs the operator's shell hooks around an agent's sessions
// (docs/configuration.md, hooks). A hook is `/bin/sh -c COMMAND` run as a
// process tree of the proc.Supervisor, so a timeout or the end of the
// caller's context (the runner's: the agent's stop) ends everything it
// started, setsid grandchildren included. A failing or hanging hook is logged
// and counted but never fails the agent; the only result a caller acts on is
// a session_start hook that exits 2, which blocks that session.
package hooks

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/proc"
)

// Event names when a hook runs; the values are the swarmd.yaml keys.
type Event string

const (
	AgentStart   Event = "agent_start"   // once per agent run, worktree ready, before the first prompt
	SessionStart Event = "session_start" // before each backend session is spawned; exit 2 blocks it
	SessionEnd   Event = "session_end"   // after each backend session exits
	AgentStopped Event = "agent_stopped" // once, when the agent is Stopped (its logs archived, unless the whole daemon stops: then the next start does)
)

// Outcomes of one hook command, the result label of swarmd_hook_runs_total.
const (
	OutcomeOK      = "ok"
	OutcomeError   = "error"   // non-zero exit, killed, could not start, or cancelled
	OutcomeTimeout = "timeout" // killed after Config.Timeout
	OutcomeBlocked = "blocked" // a session_start hook exited 2
)

// BlockExitCode is the exit code with which a session_start hook blocks the
// session, as Claude Code hooks do.
const BlockExitCode = 2

// Defaults for Config's zero values.
const (
	DefaultTimeout   = 30 * time.Second
	DefaultMaxOutput = 64 << 10
)

// ErrBlocked is matched (errors.Is) by the *BlockedError that Run returns
// when a session_start hook blocks the session.
var ErrBlocked = errors.New("blocked by hook")

// BlockedError says which session_start hook blocked the session, and what it
// printed (Claude Code hooks give their reason on stderr).
type BlockedError struct {
	Command string
	Output  string // bounded by Config.MaxOutput
}

func (e *BlockedError) Error() string {
	msg := fmt.Sprintf("hooks: %s hook %q: %s", SessionStart, e.Command, ErrBlocked)
	if reason := lastLine(e.Output, 200); reason != "" {
		msg += ": " + reason
	}
	return msg
}

func (e *BlockedError) Unwrap() error { return ErrBlocked }

// Config is the hooks part of swarmd.yaml plus its limits.
type Config struct {
	Commands map[Event][]string // shell commands per event, run in order with /bin/sh -c
	Timeout  time.Duration      // per command; 0 means DefaultTimeout
	// MaxOutput is how many bytes of a command's combined stdout and stderr
	// are kept for the daemon log (0 means DefaultMaxOutput). The rest is
	// read, counted and dropped: a hook that prints megabytes neither bloats
	// memory nor blocks on a full pipe.
	MaxOutput int
	// Sandbox, when set, contains each hook run of agent (run in dir): it
	// wraps the command line in a sandbox, as proc.Spec.Wrapped, and
	// returns what to do once the run's processes have all ended (nil:
	// nothing), before the hook's result is reported.
	Sandbox func(agent, dir string, argv []string) (wrapped []string, ended func())
}

// Payload is the JSON object a hook reads on its standard input.
type Payload struct {
	Event      Event     `json:"event"`
	Agent      string    `json:"agent"`
	SessionID  string    `json:"session_id"`
	Seq        uint32    `json:"seq"`
	State      string    `json:"state"`
	Outcome    string    `json:"outcome,omitempty"`     // session_end: the session's exit outcome
	Reason     string    `json:"reason,omitempty"`      // session_end: and its reason
	HeadBefore string    `json:"head_before,omitempty"` // session_end
	HeadAfter  string    `json:"head_after,omitempty"`  // session_end
	Commits    int       `json:"commits,omitempty"`     // session_end: commits the session made
	StopReason string    `json:"stop_reason,omitempty"` // agent_stopped
	Time       time.Time `json:"time"`                  // set by the caller, which owns the clock
}

// Result is how one hook command went.
type Result struct {
	Command   string
	Outcome   string // OutcomeOK, OutcomeError, OutcomeTimeout or OutcomeBlocked
	ExitCode  int    // -1 if it was killed by a signal or did not start
	Output    string // combined stdout and stderr, at most Config.MaxOutput bytes; or why it did not start
	Truncated int64  // bytes of output dropped beyond MaxOutput
	Duration  time.Duration
}

// Runner runs hooks. It is safe for concurrent use: every agent's runner
// shares one.
type Runner struct {
	sup      *proc.Supervisor
	cfg      Config
	log      *zap.Logger
	onResult func(Event, Result)
	idPrefix string        // per Runner, so two Runners on one Supervisor never share a tree id
	runs     atomic.Uint64 // numbers tree ids
}

// New returns a Runner that starts hooks as trees of sup. onResult, if not
// nil, is called once for every command that ran (it feeds
// swarmd_hook_runs_total{event,result}); it must not block.
func New(sup *proc.Supervisor, cfg Config, log *zap.Logger, onResult func(Event, Result)) *Runner {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxOutput <= 0 {
		cfg.MaxOutput = DefaultMaxOutput
	}
	if log == nil {
		log = zap.NewNop()
	}
	var nonce [4]byte
	_, _ = rand.Read(nonce[:]) // never fails on Linux (getrandom)
	return &Runner{
		sup:      sup,
		cfg:      cfg,
		log:      log,
		onResult: onResult,
		idPrefix: "hook-" + hex.EncodeToString(nonce[:]) + "-",
	}
}

// Has reports whether any command is configured for ev: a caller with
// nothing to run spares itself the hook's environment.
func (r *Runner) Has(ev Event) bool {
	return len(r.cfg.Commands[ev]) > 0
}

// Run runs every command configured for p.Event, in order, in dir, with the
// JSON payload on standard input. env is the hook's whole environment (the
// caller passes the session's: the daemon's plus the SWARM_* variables); Run
// adds SWARM_HOOK_EVENT.
//
// Failures of a hook (non-zero exit, timeout, a shell that cannot start) are
// logged with the hook's output and counted, and Run goes on to the next
// command and returns nil: a hook never wedges the agent. Two things stop
// Run early: a session_start command that exits 2 (Run returns a
// *BlockedError, which matches ErrBlocked, and runs no further command), and
// ctx being done (the running hook's tree is killed at once and Run returns
// ctx's error, wrapped).
func (r *Runner) Run(ctx context.Context, dir string, env []string, p Payload) error {
	cmds := r.cfg.Commands[p.Event]
	if len(cmds) == 0 {
		return nil
	}
	stdin, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("hooks: %s: encode payload: %w", p.Event, err)
	}
	stdin = append(stdin, '\n') // so that `read line` in a shell hook sees a whole line
	env = hookEnv(env, p.Event)
	for _, cmd := range cmds {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("hooks: %s: %w", p.Event, err)
		}
		res, cancelled := r.runOne(ctx, p.Agent, dir, env, stdin, p.Event, cmd)
		r.report(p, res, cancelled)
		if cancelled {
			return fmt.Errorf("hooks: %s hook %q: %w", p.Event, cmd, ctx.Err())
		}
		if res.Outcome == OutcomeBlocked {
			return &BlockedError{Command: cmd, Output: res.Output}
		}
	}
	return nil
}

// runOne runs one command to its end. cancelled reports that ctx ended it.
func (r *Runner) runOne(ctx context.Context, agent, dir string, env []string, stdin []byte, ev Event, cmd string) (res Result, cancelled bool) {
	res = Result{Command: cmd, Outcome: OutcomeError, ExitCode: -1}
	out := &boundedBuffer{max: r.cfg.MaxOutput}
	start := time.Now()
	spec := proc.Spec{
		Path:   "/bin/sh",
		Args:   []string{"-c", cmd},
		Dir:    dir,
		Env:    env,
		Stdin:  bytes.NewReader(stdin),
		Output: out,
		ID:     r.idPrefix + string(ev) + "-" + strconv.FormatUint(r.runs.Add(1), 10),
	}
	if r.cfg.Sandbox != nil {
		// A hook may run a script from the agent's branch: contained like
		// the agent's sessions.
		argv, ended := r.cfg.Sandbox(agent, dir, append([]string{spec.Path}, spec.Args...))
		spec.Path, spec.Args, spec.Wrapped = argv[0], argv[1:], true
		if ended != nil {
			defer ended() // the tree has ended by the time runOne returns
		}
	}
	tree, err := r.sup.Start(spec)
	if err != nil {
		res.Output = err.Error()
		res.Duration = time.Since(start)
		return res, false
	}

	why := tree.WaitBounded(ctx, r.cfg.Timeout, 0)
	timedOut := why == proc.EndedAtBound
	cancelled = why == proc.EndedByContext
	// Done happens after the last Write to out: reading it here is safe.
	res.Duration = time.Since(start)
	res.Output, res.Truncated = string(out.buf), out.dropped
	st := tree.Exit()
	res.ExitCode = st.Code
	killedByUs := (timedOut || cancelled) && st.Signal != 0 // not if it exited just in time
	switch {
	case killedByUs && timedOut:
		res.Outcome = OutcomeTimeout
	case killedByUs:
		// Cancelled: counted as an error, the daemon is force-stopping.
	case st.Signal == 0 && st.Code == 0:
		res.Outcome = OutcomeOK
	case st.Signal == 0 && st.Code == BlockExitCode && ev == SessionStart:
		res.Outcome = OutcomeBlocked
	}
	return res, killedByUs && cancelled
}

// report logs one command's result in one line and counts it.
func (r *Runner) report(p Payload, res Result, cancelled bool) {
	fields := []zap.Field{
		zap.String("agent", p.Agent),
		zap.String("session", p.SessionID),
		zap.String("event", string(p.Event)),
		zap.String("command", res.Command),
		zap.String("outcome", res.Outcome),
		zap.Int("exit_code", res.ExitCode),
		zap.String("output", res.Output),
		zap.Int64("output_dropped", res.Truncated),
		zap.Duration("duration", res.Duration),
	}
	switch {
	case cancelled:
		r.log.Warn("hook cancelled", fields...)
	case res.Outcome == OutcomeOK:
		r.log.Info("hook ran", fields...)
	case res.Outcome == OutcomeBlocked:
		r.log.Info("hook blocked the session", fields...)
	case res.Outcome == OutcomeTimeout:
		r.log.Warn("hook timed out", append(fields, zap.Duration("timeout", r.cfg.Timeout))...)
	default:
		r.log.Warn("hook failed", fields...)
	}
	if r.onResult != nil {
		r.onResult(p.Event, res)
	}
}

// hookEnv copies env without any SWARM_HOOK_EVENT (a hook run by a hook must
// see its own event) and adds ours. It never appends to the caller's slice.
func hookEnv(env []string, ev Event) []string {
	const key = "SWARM_HOOK_EVENT="
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, key) {
			out = append(out, kv)
		}
	}
	return append(out, key+string(ev))
}

// boundedBuffer keeps the first max bytes written to it and counts the rest.
// It grows as output arrives, so a quiet hook costs no 64 KiB buffer.
type boundedBuffer struct {
	buf     []byte
	max     int
	dropped int64
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if room := b.max - len(b.buf); room > 0 {
		k := min(room, len(p))
		b.buf = append(b.buf, p[:k]...)
		p = p[k:]
	}
	b.dropped += int64(len(p))
	return n, nil
}

// lastLine is the last non-blank line of s, cut to at most n bytes.
func lastLine(s string, n int) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[i+1:])
	}
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") // a rune cut in two
	}
	return s
}
