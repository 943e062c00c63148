package mailbox

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/store"
)

// TestConsumeExactlyOnce is the daemon and many `swarmd mail` processes at
// once: 8 senders and 2 consumers, each with its own *Mailbox (its own
// connections, as a separate process has), on one file. Both consumers
// consume both recipients, so they race for the same rows; each consumer's
// session completes at once (Ack). Two consumers may both be shown a message
// (the daemon never runs two sessions of one agent at once), but exactly one
// acknowledges it.
func TestConsumeExactlyOnce(t *testing.T) {
	const (
		senders   = 8
		perSender = 200
		consumers = 2
		// drainLimit bounds the rounds after the last send.
		drainLimit = 10 * time.Second
	)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "swarm.db")
	recipients := []string{"alice", "bob"}
	agents := append([]string(nil), recipients...)
	for g := range senders {
		agents = append(agents, fmt.Sprintf("s%d", g))
	}
	openTest(t, path, Options{Agents: agents}) // migrated before the race starts

	var (
		mu      sync.Mutex
		errs    []error
		sent    = map[int64]bool{}
		claimed = map[int64]map[string]bool{} // id -> sessions shown it
		acked   int
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}

	sendersDone := make(chan struct{})
	var sendWG, consumeWG sync.WaitGroup
	for g := range senders {
		sendWG.Go(func() {
			db, err := Open(ctx, path, store.Options{}, Options{Agents: agents})
			if err != nil {
				fail(err)
				return
			}
			defer db.Close()
			for i := range perSender {
				m, err := db.Send(ctx, Draft{
					From: fmt.Sprintf("s%d", g), To: recipients[i%2],
					Body: fmt.Sprintf("%d/%d", g, i), Urgent: i%5 == 0,
				})
				if err != nil {
					fail(err)
					return
				}
				mu.Lock()
				sent[m.ID] = true
				mu.Unlock()
			}
		})
	}
	for c := range consumers {
		consumeWG.Go(func() {
			db, err := Open(ctx, path, store.Options{}, Options{Agents: agents})
			if err != nil {
				fail(err)
				return
			}
			defer db.Close()
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			// Once the senders are done, what is left drains in a few
			// rounds; mail that keeps coming back (an acknowledgement
			// lost) must fail the test, not loop until its timeout.
			var drainBy time.Time
			for round := 0; ; round++ {
				// Read "done" before the round: a round that starts after the
				// last send and finds nothing proves nothing is left.
				var done bool
				select {
				case <-sendersDone:
					done = true
				default:
				}
				if done && drainBy.IsZero() {
					drainBy = time.Now().Add(drainLimit)
				}
				if done && time.Now().After(drainBy) {
					fail(fmt.Errorf("consumer %d: mail still claimed %s after the last send (round %d): is it acknowledged?", c, drainLimit, round))
					return
				}
				v, err := db.DataVersion(ctx)
				if err != nil {
					fail(err)
					return
				}
				got := 0
				for _, r := range recipients {
					session := fmt.Sprintf("c%d-%d-%s", c, round, r)
					ms, err := db.ConsumeForPrompt(ctx, r, session)
					if err != nil {
						fail(err)
						return
					}
					got += len(ms)
					for i, m := range ms {
						if i > 0 && (ms[i-1].Urgent == m.Urgent && ms[i-1].ID > m.ID || !ms[i-1].Urgent && m.Urgent) {
							fail(fmt.Errorf("session %s: messages out of order at %d", session, i))
						}
					}
					if len(ms) == 0 {
						continue
					}
					now := time.Now()
					n, err := db.Ack(ctx, store.SessionRecord{SessionID: session, Agent: r, Seq: 1, Started: now, Ended: &now})
					if err != nil {
						fail(err)
						return
					}
					mu.Lock()
					acked += n
					for _, m := range ms {
						if claimed[m.ID] == nil {
							claimed[m.ID] = map[string]bool{}
						}
						claimed[m.ID][session] = true
					}
					mu.Unlock()
				}
				if done && got == 0 {
					return
				}
				// Wait for another commit the way the router does: poll
				// data_version, not sleep.
			wait:
				for {
					select {
					case <-sendersDone:
						break wait
					case <-tick.C:
						nv, err := db.DataVersion(ctx)
						if err != nil {
							fail(err)
							return
						}
						if nv != v {
							break wait
						}
					}
				}
			}
		})
	}
	sendWG.Wait()
	close(sendersDone)
	consumeWG.Wait()

	for _, err := range errs {
		if strings.Contains(err.Error(), "locked") || strings.Contains(err.Error(), "busy") {
			t.Errorf("lock contention surfaced as an error: %v", err)
		} else {
			t.Error(err)
		}
	}
	if acked != senders*perSender {
		t.Fatalf("%d acknowledgements for %d messages", acked, senders*perSender)
	}
	if len(sent) != senders*perSender {
		t.Fatalf("%d messages sent, want %d", len(sent), senders*perSender)
	}
	for id := range sent {
		if _, ok := claimed[id]; !ok {
			t.Fatalf("message %d was never delivered", id)
		}
	}
	if len(claimed) != len(sent) {
		t.Fatalf("%d delivered, %d sent", len(claimed), len(sent))
	}

	// The database agrees with what the consumers were handed.
	db := openTest(t, path, Options{})
	if n := countRows(t, db, "delivered_at IS NULL"); n != 0 {
		t.Fatalf("%d messages still pending", n)
	}
	rows, err := db.Store().SQL().Query(`SELECT id, claimed_session FROM messages`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var s string
		if err := rows.Scan(&id, &s); err != nil {
			t.Fatal(err)
		}
		if !claimed[id][s] {
			t.Fatalf("message %d: acknowledged by session %q, which was not shown it (shown to %v)", id, s, claimed[id])
		}
	}
}
