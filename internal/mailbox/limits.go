package mailbox

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/swarmd/swarmd/internal/store"
)

// settingMaxBody is the settings key of Options.MaxBodyBytes.
const settingMaxBody = "mailbox.max_body"

// RecordLimits writes the limits this mailbox enforces into the database,
// so that every process that opens the file without limits of its own
// (Options fields left zero) enforces the same: the daemon calls it at
// start, and a `swarmd mail` inside a session, which reads no config, is
// bound by it.
func (mb *Mailbox) RecordLimits(ctx context.Context) error {
	if err := mb.db.SetSetting(ctx, settingMaxBody, strconv.Itoa(mb.maxBody)); err != nil {
		return err
	}
	return mb.db.SetSetting(ctx, settingUrgentEvery, mb.urgentEvery.String())
}

// MaxBody is the longest body this mailbox takes, in bytes.
func (mb *Mailbox) MaxBody() int { return mb.maxBody }

// settingUrgentEvery records Options.UrgentEvery for the session commands,
// which read no config ("0s": no bound).
const settingUrgentEvery = "mailbox.urgent_every"

// recordedUrgentEvery is the bound RecordLimits wrote, or 0 when none was.
func recordedUrgentEvery(ctx context.Context, db *store.DB) (time.Duration, error) {
	v, ok, err := db.Setting(ctx, settingUrgentEvery)
	if err != nil || !ok {
		return 0, err
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("mailbox: read limits: %s = %q in %s is not a duration", settingUrgentEvery, v, db.Path())
	}
	return d, nil
}

// recordedMaxBody is the body limit RecordLimits wrote, or 0 when none was.
func recordedMaxBody(ctx context.Context, db *store.DB) (int, error) {
	v, ok, err := db.Setting(ctx, settingMaxBody)
	if err != nil || !ok {
		return 0, err
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("mailbox: read limits: %s = %q in %s is not a positive integer", settingMaxBody, v, db.Path())
	}
	return n, nil
}
