package daemon

import (
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"
)

// notifier speaks systemd's notify protocol (Type=notify). Every call is a
// no-op when NOTIFY_SOCKET is unset.
type notifier struct{}

func (notifier) ready()    { _, _ = sd.SdNotify(false, sd.SdNotifyReady) }
func (notifier) stopping() { _, _ = sd.SdNotify(false, sd.SdNotifyStopping) }

// watchdog sends WATCHDOG=1 at half the unit's WatchdogSec for as long as
// the daemon proves healthy (database answers, agents registered): a wedged
// daemon stops petting and systemd restarts it. It returns a stop function.
func (notifier) watchdog(health func() string, log *zap.Logger) (stop func()) {
	interval, err := sd.SdWatchdogEnabled(false)
	if err != nil || interval <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(interval / 2)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if why := health(); why != "" {
					log.Warn("not petting the systemd watchdog", zap.String("reason", why))
					continue
				}
				_, _ = sd.SdNotify(false, sd.SdNotifyWatchdog)
			}
		}
	}()
	return func() { close(done); <-finished }
}
