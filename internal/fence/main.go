package fence

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Command is the first argument of the guard's command line (`swarmd
// lease-guard`): the daemon starts its own binary with it.
const Command = "lease-guard"

// Args are the guard's arguments after Command: the cgroup directory that
// holds the daemon's trees (cgroup.kill ends all of it), or, without
// cgroups, the owner and instance of the trees' markers.
func Args(cgroupDir, owner, instance string) []string {
	if cgroupDir != "" {
		return []string{Command, "-cgroup", cgroupDir}
	}
	return []string{Command, "-owner", owner, "-instance", instance}
}

// Main is the guard process: `swarmd lease-guard -cgroup DIR` or `swarmd
// lease-guard -owner OWNER -instance INSTANCE`, deadlines on stdin (see
// Run). killMarked kills the marked trees (proc.KillInstance); it is
// passed in so that this package does not import the supervisor's.
func Main(args []string, stdin io.Reader, stderr io.Writer, killMarked func(owner, instance string) (int, error)) int {
	fs := flag.NewFlagSet(Command, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("cgroup", "", "the cgroup directory holding the daemon's trees")
	owner := fs.String("owner", "", "the owner of the trees' markers")
	instance := fs.String("instance", "", "the daemon instance of the trees' markers")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var killTrees func() error
	switch {
	case *dir != "" && filepath.IsAbs(*dir):
		killTrees = func() error { return os.WriteFile(filepath.Join(*dir, "cgroup.kill"), []byte("1"), 0) }
	case *owner != "" && *instance != "":
		killTrees = func() error { _, err := killMarked(*owner, *instance); return err }
	default:
		fmt.Fprintln(stderr, "swarmd lease-guard: want -cgroup ABSOLUTE_DIR, or -owner and -instance")
		return 2
	}
	kill := func(why string) error {
		fmt.Fprintf(stderr, "swarmd lease-guard: %s: %s: killing every session of the daemon\n", time.Now().UTC().Format(time.RFC3339Nano), why)
		return killTrees()
	}
	if err := Run(context.Background(), stdin, kill); err != nil {
		fmt.Fprintf(stderr, "swarmd lease-guard: %v\n", err)
		return 1
	}
	return 0
}
