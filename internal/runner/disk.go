package runner

import (
	"fmt"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
)

// setDiskFull records how the agent's last write failed for lack of space
// ("" once a write works again); Snapshot.DiskFull shows it, and the daemon's
// readiness with it.
func (r *Runner) setDiskFull(msg string) {
	was := r.pacing.setDiskFull(msg)
	if was != msg {
		// Published now, not at the next transition: an agent waiting on
		// a full disk makes none.
		r.snaps.update(func(s *Snapshot) bool { s.DiskFull = msg; return true })
	}
	switch {
	case msg != "" && was == "":
		r.log.Error("disk full: the agent backs off until its writes work again", zap.String("error", msg))
	case msg == "" && was != "":
		r.log.Info("disk no longer full: the agent's writes work again")
	}
}

// promptNotStored handles a prompt file that could not be written (the
// StorePrompt effect, in Spawning). A full disk is the host's, not the
// agent's: the agent waits in Spawning, counting no error (five in a row
// stopped it for good, and cost its task a retry), with the mail and task
// its prompt claimed kept for its session, and spawn writes the prompt
// again every diskRetry until it is stored. Anything else is fatal.
func (r *Runner) promptNotStored(err error) {
	if !backend.IsDiskFull(err) {
		r.apply(agent.EvFatalError(fmt.Sprintf("store prompt: %v", err)), "runner", "")
		return
	}
	r.setDiskFull("disk full: store prompt: " + err.Error())
	r.work.unstored = true
}

// diskRefused waits diskRetry when a prompt's build failed for a full
// disk, its error's or the worktree's filesystem's (git, starting a task's
// line, says only that it could not write a file), and reports whether
// it did: the build is tried again, not a FatalError that stopped the
// agent for good.
func (r *Runner) diskRefused(err error) bool {
	if !backend.IsDiskFull(err) && !fsFull(r.tree.wt.Path) {
		return false
	}
	r.setDiskFull("disk full: build the prompt: " + err.Error())
	sleep(r.stop.ctx, diskRetry)
	return true
}

// fsFull reports whether the filesystem of path has no block or no inode
// left for an unprivileged writer.
func fsFull(path string) bool {
	var st unix.Statfs_t
	if path == "" || unix.Statfs(path, &st) != nil {
		return false
	}
	return st.Bavail == 0 || (st.Files > 0 && st.Ffree == 0)
}

// diskRetry is how often an agent waiting on a full disk tries its write
// again.
const diskRetry = time.Second

// storeAgain writes the prompt a full disk refused, after diskRetry; it
// reports whether the prompt is stored now. A stop cuts the wait short.
func (r *Runner) storeAgain() bool {
	if !sleep(r.stop.ctx, diskRetry) {
		return false
	}
	err := r.storePrompt(r.work.text)
	switch {
	case err == nil:
		r.work.unstored = false
		r.setDiskFull("")
		return true
	case backend.IsDiskFull(err):
		r.setDiskFull("disk full: store prompt: " + err.Error())
	default:
		r.work.unstored = false
		r.apply(agent.EvFatalError(fmt.Sprintf("store prompt: %v", err)), "runner", "")
	}
	return false
}
