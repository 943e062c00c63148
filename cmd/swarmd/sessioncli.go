package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/swarmd/swarmd/internal/cli"
	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/daemon"
	"github.com/swarmd/swarmd/internal/proc"
	"github.com/swarmd/swarmd/internal/runner"
)

// forwardSessionCLI runs `swarmd mail …` and `swarmd task …` through the
// local daemon's control socket when they run inside a session with no
// SWARM_DB_PATH: with a shared store the session holds no database
// credentials, the daemon does, and it knows the caller by its process, not
// by what it sends. ok is false when the command runs here as usual.
func forwardSessionCLI(ctx context.Context, args []string, s streams) (code int, ok bool) {
	if len(args) == 0 || (args[0] != "mail" && args[0] != "task") || s.getenv("SWARM_DB_PATH") != "" {
		return 0, false
	}
	c, ok := proc.CallerFromEnv(s.getenv)
	if !ok {
		return 0, false
	}
	if _, ok := runner.AgentOfSession(c.TreeID); !ok {
		return 0, false // a hook's tree, not a session's
	}
	// What SWARM_AGENT_ID says goes too: naming another agent is refused
	// there, as it is where the command runs in the session itself.
	req := control.SessionCLIRequest{Args: args, AgentID: s.getenv("SWARM_AGENT_ID")}
	if readsStdin(args, s) {
		// One byte past the limit, so that the client refuses an oversize
		// input with its clear error instead of it being cut here.
		b, err := io.ReadAll(io.LimitReader(s.in, control.MaxSessionCLIStdin+1))
		if err != nil {
			fmt.Fprintf(s.err, "swarmd: %s: read standard input: %s\n", args[0], cli.OneLine(err.Error()))
			return exitRuntime, true
		}
		req.Stdin = string(b)
	}
	res, err := control.NewClient(filepath.Join(c.Owner, "swarmd.sock")).SessionCLI(ctx, req)
	if err != nil {
		fmt.Fprintf(s.err, "swarmd: %s: through the daemon (this session has no SWARM_DB_PATH): %s\n", args[0], cli.OneLine(err.Error()))
		return exitRuntime, true
	}
	_, _ = io.WriteString(s.out, res.Stdout)
	_, _ = io.WriteString(s.err, res.Stderr)
	return res.Code, true
}

// readsStdin reports whether the command line reads standard input: `mail
// send` and `mail reply` with a BODY of "-" or none, `task add --body -`.
// A command line that does not parse reads none: the daemon reports why.
func readsStdin(args []string, s streams) bool {
	cmd, rest, err := newRootCommand(s).Find(args)
	if err != nil || cmd.ParseFlags(rest) != nil {
		return false
	}
	pos := cmd.Flags().Args()
	body := func(i int) bool { return len(pos) <= i || pos[i] == "-" }
	switch commandPath(cmd) {
	case "mail send":
		return body(0)
	case "mail reply":
		return body(1)
	case "task add":
		f := cmd.Flags().Lookup("body")
		return f != nil && f.Value.String() == "-"
	}
	return false
}

// commandPath is cmd's path without the binary's name: "mail send".
func commandPath(cmd *cobra.Command) string {
	p := cmd.CommandPath()
	if i := strings.IndexByte(p, ' '); i >= 0 {
		return p[i+1:]
	}
	return ""
}

// runSessionCLI is the daemon's side (daemon.Options.SessionCLI): the
// command line runs here as it would in the session, seeing only the
// environment the daemon gives it.
func runSessionCLI(ctx context.Context, req daemon.CLIRequest) (stdout, stderr string, code int) {
	var out, errb bytes.Buffer
	defer func() {
		// A bug in one command must not take the daemon's agents down.
		if r := recover(); r != nil {
			fmt.Fprintf(&errb, "swarmd: %s: internal error: %v\n", strings.Join(req.Args, " "), r)
			stdout, stderr, code = out.String(), errb.String(), exitRuntime
		}
	}()
	code = Main(ctx, req.Args, streams{in: strings.NewReader(req.Stdin), out: &out, err: &errb,
		getenv: func(k string) string { return req.Env[k] }, store: req.Store, board: req.Board, mailMaxBody: req.MailMaxBody})
	return out.String(), errb.String(), code
}
