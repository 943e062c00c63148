package main

import (
	"context"
	"fmt"
	"time"

	"github.com/swarmd/swarmd/internal/store"
)

// defaultStoreWait is how long `swarmd task` and `swarmd mail` wait for a
// store that is busy (another client holds its write lock) or away (a
// PostgreSQL server restarting) before they give up, saying so. A session's
// report must not be lost to a lock held for a few seconds, and must never
// be reported done when it was not written.
const defaultStoreWait = 2 * time.Minute

// waitStore runs f until it succeeds, fails for a reason that does not pass
// (the request refused, the database gone), or the store has refused it for
// longer than wait: then the error says that nothing was recorded.
func waitStore(ctx context.Context, db *store.DB, wait time.Duration, op string, f func(context.Context) error) error {
	deadline := time.Now().Add(wait)
	// The deadline also cuts short an attempt waiting in SQLite's busy
	// handler.
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	delay := 10 * time.Millisecond
	for {
		err := f(ctx)
		if err == nil || !db.Transient(err) {
			return err
		}
		if time.Now().Add(delay).After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: the store stayed busy or unreachable for %s (raise --store-wait): nothing was recorded, run it again: %w",
				op, wait, err)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: the store stayed busy or unreachable for %s (raise --store-wait): nothing was recorded, run it again: %w",
				op, wait, err)
		case <-t.C:
		}
		delay = min(2*delay, time.Second)
	}
}
