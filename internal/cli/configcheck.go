package cli

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"time"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/daemon"
)

// runnable is what `swarmd run` needs beyond a valid file, checked the way
// it will meet it: the repository is a git work tree, base_ref resolves to
// a commit (a new repository needs its first one), merge.into is a branch,
// and the listen address is free (unless this state dir's own daemon holds
// it). Each problem is one line, FILE:LINE: KEY: what is wrong (what to
// do), without LINE for a key the file leaves to its default.
func runnable(ctx context.Context, cfg *config.Config) []string {
	var out []string
	bad := func(key, format string, args ...any) {
		e := config.Error{File: cfg.Path, Line: config.KeyLine(cfg.Path, key), Key: key, Msg: fmt.Sprintf(format, args...)}
		out = append(out, e.Error())
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	git := func(args ...string) error {
		return exec.CommandContext(ctx, "git", append([]string{"-C", cfg.Repo}, args...)...).Run()
	}
	if git("rev-parse", "--is-inside-work-tree") != nil {
		bad("repo", "%s is not a git work tree (git init there, and commit something)", cfg.Repo)
		return out
	}
	if git("rev-parse", "--verify", "--quiet", cfg.BaseRef+"^{commit}") != nil {
		bad("base_ref", "%q is not a commit in %s (a new repository needs a first commit: git commit --allow-empty -m init)", cfg.BaseRef, cfg.Repo)
	}
	if cfg.Merge != nil && git("rev-parse", "--verify", "--quiet", "refs/heads/"+cfg.Merge.Into) != nil {
		bad("merge.into", "branch %q does not exist in %s (git branch %s)", cfg.Merge.Into, cfg.Repo, cfg.Merge.Into)
	}
	if cfg.Listen != "" {
		if running, _ := daemon.StateDirInUse(cfg.StateDir); !running {
			l, err := net.Listen("tcp", cfg.Listen)
			if err != nil {
				msg := err.Error()
				if i := strings.LastIndex(msg, ": "); i >= 0 {
					msg = msg[i+2:]
				}
				bad("listen", "%s: %s (another program has it: pick another address, or \"\" for none)", cfg.Listen, msg)
			} else {
				l.Close()
			}
		}
	}
	return out
}
