package runner

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
)

// setDiskFull records how the agent's last write failed for lack of space
// ("" once a write works again); Snapshot.DiskFull shows it, and the daemon's
// readiness with it.
func (r *Runner) setDiskFull(msg string) {
	switch was := r.pacing.setDiskFull(msg); {
	case msg != "" && was == "":
		r.log.Error("disk full: the agent backs off until its writes work again", zap.String("error", msg))
	case msg == "" && was != "":
		r.log.Info("disk no longer full: the agent's writes work again")
	}
}

// promptNotStored handles a prompt file that could not be written (the
// StorePrompt effect, in Spawning). A full disk is this agent's retryable
// session error: it backs off and tries again, and the mail its prompt
// claimed goes back. Anything else is fatal, as before.
func (r *Runner) promptNotStored(err error) {
	if !backend.IsDiskFull(err) {
		r.apply(agent.EvFatalError(fmt.Sprintf("store prompt: %v", err)), "runner", "")
		return
	}
	msg := "disk full: store prompt: " + err.Error()
	r.setDiskFull(msg)
	r.release()
	r.work.why = Why{Kind: WhyAfterError, Detail: msg}
	r.apply(agent.EvSessionExited(agent.ExitOutcome{Kind: agent.Error, Msg: msg}), "runner", msg)
}
