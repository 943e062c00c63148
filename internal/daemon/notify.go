package daemon

import (
	"context"
	"strconv"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"github.com/swarmd/swarmd/internal/service"
	"go.uber.org/zap"
)

// systemd speaks systemd's notify protocol (Type=notify). Every call is a
// no-op when NOTIFY_SOCKET is unset.
type systemd struct{}

func (systemd) ready()    { _, _ = sd.SdNotify(false, sd.SdNotifyReady) }
func (systemd) stopping() { _, _ = sd.SdNotify(false, sd.SdNotifyStopping) }

// status sets the line `systemctl status` shows ("" clears it).
func (systemd) status(line string) { _, _ = sd.SdNotify(false, "STATUS="+line) }

// waiting says what the start waits for (status) and that it is alive: a
// start that says so at least every extend is not ended by the unit's
// TimeoutStartSec= (EXTEND_TIMEOUT_USEC).
func (systemd) waiting(line string, extend time.Duration) {
	_, _ = sd.SdNotify(false, "STATUS="+line+"\nEXTEND_TIMEOUT_USEC="+strconv.FormatInt(extend.Microseconds(), 10))
}

// watchdog is the service that sends WATCHDOG=1 at half the unit's
// WatchdogSec for as long as the daemon proves healthy (database answers,
// agents registered): a wedged daemon stops petting and systemd restarts
// it. Without a watchdog it runs nothing.
func (systemd) watchdog(health func() string, log *zap.Logger) service.Service {
	return service.Loop(func(ctx context.Context) {
		interval, err := sd.SdWatchdogEnabled(false)
		if err != nil || interval <= 0 {
			return
		}
		t := time.NewTicker(interval / 2)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if why := health(); why != "" {
					log.Warn("not petting the systemd watchdog", zap.String("reason", why))
					continue
				}
				_, _ = sd.SdNotify(false, sd.SdNotifyWatchdog)
			}
		}
	})
}
