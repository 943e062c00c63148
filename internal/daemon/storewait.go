package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/service"
	"github.com/swarmd/swarmd/internal/store"
)

// A store that is away is not a failed start (issue 28). A daemon started
// while its PostgreSQL server is down or restarting, or whose server
// restarts while it starts (the migrations, recovery, its leases, the
// namesake wait), or whose SQLite file another process keeps locked, waits
// for the store and goes on by itself, as its agents wait at run time.
// What the store refuses for good (a wrong name or password, a schema of a
// newer swarmd, an agent another daemon holds) still ends the start at
// once. One classification decides: store.Transient.
//
// Each step of the start that the store can interrupt is run again whole:
// opening the store, recording the settings, taking the leases and
// recovering (recovery is written to survive a daemon killed at any point
// of it, so a step cut short by the store leaves nothing another run of it
// does not finish), loading the budgets, the first lease renewal, reading
// each agent's pause.

// Backoff between the tries of a step while the store is away: short at
// first (a restart takes a second or two), at most storeWaitMax, so that
// the start goes on within that of the store's return.
const (
	storeWaitFirst = 100 * time.Millisecond
	storeWaitMax   = 2 * time.Second
)

// storeWaitExtend is how long each try tells systemd to wait for the next
// word from a start that waits on the store (EXTEND_TIMEOUT_USEC): longer
// than the backoff and than a try that hangs on a silent network for a
// while, so that TimeoutStartSec= does not end a start that still waits.
const storeWaitExtend = 3 * time.Minute

// waitStore runs step until it succeeds, fails for another reason than
// the store being away or busy (store.Transient; a *SetupError is never
// waited on), or ctx ends: then it returns an error wrapping ctx's. what
// names the step in the one line logged when the wait begins, in /readyz
// and in systemd's status while it lasts.
func (d *Daemon) waitStore(ctx context.Context, what string, step func(context.Context) error) error {
	delay := storeWaitFirst
	var since time.Time
	defer func() {
		if !since.IsZero() {
			d.run.storeWait.Store(nil)
			systemd{}.status("")
		}
	}()
	for {
		err := step(ctx)
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("%s: stopped while the start waited for the store: %w (last: %v)", what, ctx.Err(), err)
		}
		var se *SetupError
		if err == nil || errors.As(err, &se) || !store.Transient(err) {
			if err == nil && !since.IsZero() {
				d.log.Info("the store answers: the start goes on", zap.String("step", what),
					zap.Duration("waited", time.Since(since).Round(time.Millisecond)))
			}
			return err
		}
		why := "waiting for the store to " + what + ": " + oneLine(err.Error())
		if since.IsZero() {
			since = time.Now()
			cfg, _ := d.current()
			d.log.Warn("the store is unreachable or busy: the start waits for it, trying again every "+storeWaitMax.String()+
				" at most (SIGTERM ends the wait)",
				zap.String("step", what), zap.String("store", store.Redact(cfg.StoreTarget())), zap.Error(err))
		} else {
			d.log.Debug("the store still does not answer", zap.String("step", what), zap.Error(err))
		}
		d.run.storeWait.Store(&why)
		systemd{}.waiting(why, storeWaitExtend)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: stopped while the start waited for the store: %w (last: %v)", what, ctx.Err(), err)
		case <-t.C:
		}
		delay = min(2*delay, storeWaitMax)
	}
}

// storeWaiting is svc, whose Start waits while the store is away
// (waitStore) until ctx ends. Each try is given ctx: svc keeps nothing of
// its Start's context (the budgets' keeper, the lease keeper).
func (d *Daemon) storeWaiting(ctx context.Context, what string, svc service.Service) service.Service {
	return waitingStart{Service: svc, d: d, ctx: ctx, what: what}
}

type waitingStart struct {
	service.Service
	d    *Daemon
	ctx  context.Context
	what string
}

func (w waitingStart) Start(context.Context) error {
	return w.d.waitStore(w.ctx, w.what, w.Service.Start)
}

// oneLine is s on one line, for systemd's status and /readyz's reason.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
