package daemon

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/proc"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// CLIRequest is a session's `swarmd mail` or `swarmd task` command line as
// the daemon runs it for the session (Options.SessionCLI): Env is the whole
// environment the command sees.
type CLIRequest struct {
	Args  []string
	Stdin string
	Env   map[string]string
	// Store is the daemon's open store, Env's SWARM_DB_PATH: the command
	// uses it, not opening the target again (the daemon's environment no
	// longer holds the store's password), and leaves it open.
	Store *store.DB
	// Board is the daemon's task board: the command claims and reports on
	// it, as the daemon's prompts do.
	Board *taskboard.Board
	// MailMaxBody is the daemon's mailbox.max_body, which binds its
	// sessions' mail: on a shared store the one recorded in the store is
	// whichever daemon started last.
	MailMaxBody int
}

var _ control.SessionCLI = controlAPI{}

// isSessionCommand: a session may have its daemon run the commands that act
// in the store, which with a shared store only the daemon can open.
func isSessionCommand(s string) bool { return s == "mail" || s == "task" }

// TaskHeadEnv names, in the environment of a session command the daemon
// runs (SessionCLI), the commit the session's worktree is at, as the
// daemon read it through the worktree's registered git directory ("-":
// none could be read): the session writes its worktree's .git link and
// HEAD, which git run there follows. `swarmd task done` freezes it.
const TaskHeadEnv = "SWARMD_TASK_HEAD"

// usageExit is the binary's exit code for a command refused as given
// (docs/operations.md), which a session's command refused here ends with.
const usageExit = 2

// ForeignAgentID is the one line that refuses a session's command whose
// SWARM_AGENT_ID names another agent than the session's, whether the
// daemon runs it (SessionCLI) or the session itself. claimed is the
// caller's to write (printableClaim).
func ForeignAgentID(claimed, agentName string) string {
	return fmt.Sprintf("SWARM_AGENT_ID is %s, but this session is %s's", printableClaim(claimed), agentName)
}

// printableClaim is a name a caller claims, as it may be shown: a name
// that is not an agent's quoted, and cut (it can be as long as a request).
func printableClaim(claimed string) string {
	if agent.ValidName(claimed) {
		return claimed
	}
	if len(claimed) > 64 {
		claimed = claimed[:64] + "..."
	}
	return strconv.Quote(claimed)
}

// SessionCLI runs a session's mail or task command in the daemon's process,
// with the daemon's store and the session's identity: the caller is known
// by its peer pid and its tree's cgroup or marker (callerSession), never by
// what it sent.
func (a controlAPI) SessionCLI(ctx context.Context, req control.SessionCLIRequest) (control.SessionCLIResult, error) {
	d := a.d
	name, c, ok := d.callerSession(ctx)
	if !ok || c.Instance != d.host.sup.Instance() {
		return control.SessionCLIResult{}, fmt.Errorf("%w: session-cli: only a session of this daemon's agents may run commands through it", control.ErrForbidden)
	}
	if len(req.Args) == 0 || !isSessionCommand(req.Args[0]) {
		got := ""
		if len(req.Args) > 0 {
			got = req.Args[0]
		}
		return control.SessionCLIResult{}, fmt.Errorf("%w: session-cli: runs only mail and task, not %q", control.ErrForbidden, got)
	}
	if req.AgentID != "" && req.AgentID != name {
		// Refused, not ignored: the command must not act as the agent it
		// names, nor, silently, as another than the one its caller meant.
		d.log.Warn("a session's command named another agent in SWARM_AGENT_ID", zap.String("agent", name),
			zap.String("session", c.TreeID), zap.String("claimed", printableClaim(req.AgentID)))
		return control.SessionCLIResult{Stderr: fmt.Sprintf("swarmd: %s: %s\n", req.Args[0], ForeignAgentID(req.AgentID, name)), Code: usageExit}, nil
	}
	cfg, _ := d.current()
	ag, ok := cfg.Agent(name)
	if !ok {
		return control.SessionCLIResult{}, fmt.Errorf("%w: session-cli: agent %s is no longer in the config", control.ErrForbidden, name)
	}
	if d.opts.SessionCLI == nil {
		return control.SessionCLIResult{}, fmt.Errorf("%w: session-cli: this daemon runs no session commands", control.ErrForbidden)
	}
	// The environment a session with the store's file would have (settings),
	// with the store's target, which the session itself never sees.
	agents, err := SwarmAgents(ctx, d.db, cfg)
	if err != nil {
		return control.SessionCLIResult{}, fmt.Errorf("session-cli: %w", err)
	}
	env := map[string]string{
		"SWARM_DB_PATH":    cfg.StoreTarget(),
		"SWARM_AGENT_ID":   name,
		"SWARM_SESSION_ID": c.TreeID,
		"SWARM_WORKTREE":   d.trees.Path(name),
		proc.MarkerEnv:     c.String(),
	}
	for _, kv := range agentVars(ag, strings.Join(agents, ",")) {
		env[kv[0]] = kv[1]
	}
	taskDone := req.Args[0] == "task" && slices.Contains(req.Args, "done")
	done := taskDone && d.host.sandboxes != nil
	if done {
		// The commit the report freezes must be in the repository before
		// the review or the merge queue reads it: its objects are in the
		// agent's quarantine while its session runs.
		d.moveObjects(name)
	}
	if taskDone {
		// The commit it freezes, read by the worktree's registration, not
		// by the .git link and HEAD its session writes (git rev-parse
		// there followed them to whatever the session made).
		head, err := d.trees.Head(ctx, name)
		if err != nil || head == "" {
			head = "-"
		}
		env[TaskHeadEnv] = head
	}
	stdout, stderr, code := d.opts.SessionCLI(ctx, CLIRequest{Args: req.Args, Stdin: req.Stdin, Env: env, Store: d.db, Board: d.tasks,
		MailMaxBody: d.mail.MaxBody()})
	if done {
		// And once more: the session may have committed between the move
		// and the report's reading of its HEAD.
		d.moveObjects(name)
	}
	d.log.Debug("session command", zap.String("agent", name), zap.String("session", c.TreeID),
		zap.Strings("args", req.Args), zap.Int("code", code))
	return control.SessionCLIResult{Stdout: stdout, Stderr: stderr, Code: code}, nil
}
