package mailbox

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/store/storetest"
)

// raceProcs is how many processes race on the mail.
const raceProcs = 20

// raceRecipients is who gets the racing mail: several processes claim for each.
var raceRecipients = []string{"r0", "r1", "r2", "r3"}

// TestMailExactlyOnceAcrossProcesses: 20 processes send mail and run
// "sessions" at once, each claiming its agent's mail for a prompt and
// acknowledging it when done; every message is delivered (acknowledged)
// exactly once: 0 lost, 0 doubled. On both engines.
func TestMailExactlyOnceAcrossProcesses(t *testing.T) {
	storetest.Engines(t, "mailrace", func(t *testing.T, fresh func(t *testing.T) string) {
		ctx := context.Background()
		target := fresh(t)
		const each = 15
		storetest.Race(t, "TestMailRaceChild", target, "mail", raceProcs, each)
		db := storetest.OpenTarget(t, target)
		mb, err := New(ctx, db, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer mb.Close()
		acked := 0
		for i := range raceProcs {
			v, _, err := db.Setting(ctx, fmt.Sprint("acked.p", i))
			if err != nil {
				t.Fatal(err)
			}
			n, _ := strconv.Atoi(v)
			acked += n
		}
		for _, r := range raceRecipients { // what arrived after its sessions' last look
			n, err := raceSession(ctx, mb, r, r+"-final")
			if err != nil {
				t.Fatal(err)
			}
			acked += n
		}
		var total, pending int
		if err := db.ReadSQL().QueryRowContext(ctx, `SELECT COUNT(*), COUNT(CASE WHEN delivered_at IS NULL THEN 1 END) FROM messages`).Scan(&total, &pending); err != nil {
			t.Fatal(err)
		}
		if total != raceProcs*each || pending != 0 || acked != total {
			t.Fatalf("%d messages stored, %d still pending, %d acknowledgements; want %d stored, each acknowledged once", total, pending, acked, raceProcs*each)
		}
	})
}

// TestMailRaceChild is one process of TestMailExactlyOnceAcrossProcesses:
// it sends its messages to the next recipient and, after each, runs a
// session of its own recipient's; it records how many it acknowledged.
func TestMailRaceChild(t *testing.T) {
	target, _, agent, n, ok := storetest.ChildArgs()
	if !ok {
		t.Skip("run by TestMailExactlyOnceAcrossProcesses")
	}
	ctx := context.Background()
	db := storetest.OpenTarget(t, target)
	mb, err := New(ctx, db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mb.Close()
	i, _ := strconv.Atoi(strings.TrimPrefix(agent, "p"))
	mine, theirs := raceRecipients[i%len(raceRecipients)], raceRecipients[(i+1)%len(raceRecipients)]
	acked := 0
	for k := range n {
		if _, err := mb.Send(ctx, Draft{From: agent, To: theirs, Body: fmt.Sprint(agent, " ", k)}); err != nil {
			t.Fatal(err)
		}
		got, err := raceSession(ctx, mb, mine, fmt.Sprint(agent, "-", k))
		if err != nil {
			t.Fatal(err)
		}
		acked += got
	}
	if err := db.SetSetting(ctx, "acked."+agent, strconv.Itoa(acked)); err != nil {
		t.Fatal(err)
	}
}

// raceSession is one session's mail: claimed for its prompt, acknowledged
// when it completes. It returns how many messages it acknowledged.
func raceSession(ctx context.Context, mb *Mailbox, agent, id string) (int, error) {
	if _, err := mb.ConsumeForPrompt(ctx, agent, id); err != nil {
		return 0, err
	}
	now := time.Now()
	return mb.Ack(ctx, store.SessionRecord{SessionID: id, Agent: agent, Seq: 1, Started: now, Ended: &now})
}

// TestMailIdsVisibleInOrder: senders on several handles of one store (each
// its own process's pools on PostgreSQL), some sending alone and some
// replying inside write transactions (another lock path there), while a
// follower reads urgent mail by watermark as the router does (id > the
// largest seen): it must see every message, which it can only if ids
// become visible in increasing order. On both engines.
func TestMailIdsVisibleInOrder(t *testing.T) {
	storetest.Engines(t, "mailorder", func(t *testing.T, fresh func(t *testing.T) string) {
		ctx := context.Background()
		target := fresh(t)
		const senders, each = 4, 40
		follower, err := New(ctx, storetest.OpenTarget(t, target), Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer follower.Close()
		seed, err := follower.Send(ctx, Draft{From: "s0", To: "r0", Subject: "seed", Body: "x"})
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, senders)
		for i := range senders {
			mb, err := New(ctx, storetest.OpenTarget(t, target), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer mb.Close()
			go func() {
				var err error
				for k := 0; k < each && err == nil; k++ {
					if (i+k)%3 == 0 {
						_, err = mb.Reply(ctx, "r0", seed.ID, "urgent reply", true) // to s0, in a write transaction
					} else {
						_, err = mb.Send(ctx, Draft{From: fmt.Sprint("s", i), To: "r1", Subject: "u", Body: "urgent", Urgent: true})
					}
				}
				errs <- err
			}()
		}
		seen := map[int64]bool{}
		var last int64
		look := func() {
			ms, err := follower.PendingUrgent(ctx, last)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range ms {
				seen[m.ID] = true
				last = max(last, m.ID)
			}
		}
		for done := 0; done < senders; {
			select {
			case err := <-errs:
				if err != nil {
					t.Fatal(err)
				}
				done++
			default:
				look()
			}
		}
		look()
		if len(seen) != senders*each {
			t.Fatalf("the follower saw %d of %d urgent messages: ids became visible out of order", len(seen), senders*each)
		}
	})
}

// TestSendTakesTurnsWithMailInWriteTransactions (PostgreSQL): a message
// added inside a write transaction (a reply) and one sent on the mail
// pool take the same turn: the send waits until the transaction commits,
// then gets the next id. Without that turn both would read the same
// largest id, and the send would fail on the duplicate (or, with ids from
// elsewhere, commit out of order behind the router's watermark).
func TestSendTakesTurnsWithMailInWriteTransactions(t *testing.T) {
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "mailturn")
	ctx := context.Background()
	db := storetest.OpenTarget(t, srv.URL(dbName))
	mb, err := New(ctx, db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mb.Close()
	other, err := New(ctx, storetest.OpenTarget(t, srv.URL(dbName)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	first, err := mb.insert(ctx, tx.Tx, mb.draftMessage(Draft{From: "a", To: "b", Subject: "in a transaction", Body: "x"}))
	if err != nil {
		t.Fatal(err)
	}
	type sent struct {
		m   Message
		err error
	}
	done := make(chan sent, 1)
	go func() {
		m, err := other.Send(ctx, Draft{From: "c", To: "d", Subject: "alone", Body: "y", Urgent: true})
		done <- sent{m, err}
	}()
	// The send is waiting on a lock (the senders' turn) before the
	// transaction commits.
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := srv.Query(dbName, `SELECT COUNT(*) FROM pg_stat_activity WHERE datname = '`+dbName+`' AND wait_event_type = 'Lock'`)
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(out) != "0" {
			break
		}
		select {
		case s := <-done:
			t.Fatalf("the send finished (%+v, %v) while a message was being added in a write transaction", s.m.ID, s.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the send never waited")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	s := <-done
	if s.err != nil || s.m.ID != first.ID+1 {
		t.Fatalf("send after the transaction = id %d, %v; want id %d", s.m.ID, s.err, first.ID+1)
	}
}
