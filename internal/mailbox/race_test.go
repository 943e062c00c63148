package mailbox

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

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
