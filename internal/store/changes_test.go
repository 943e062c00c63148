package store

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestChangeOf(t *testing.T) {
	for _, c := range []struct {
		query string
		want  Change
	}{
		{`SELECT id FROM messages WHERE to_agent = ?`, 0},
		{"\n\t\tSELECT 1", 0},
		{`INSERT INTO messages (from_agent) VALUES (?)`, ChangedMail},
		{`INSERT OR IGNORE INTO task_deps(task_id, dep_id) VALUES (?, ?)`, ChangedTasks},
		{`INSERT OR REPLACE INTO settings (k, v) VALUES (?, ?)`, ChangedOther},
		{"UPDATE\n tasks SET state = ?", ChangedTasks},
		{`UPDATE messages SET delivered_at = ? WHERE id IN (SELECT id FROM tasks)`, ChangedMail},
		{`DELETE FROM merge_queue WHERE task = ?`, ChangedTasks},
		{`DELETE FROM agent_leases RETURNING agent`, ChangedOther},
		{`UPDATE "review_rounds" SET x = 1`, ChangedTasks},
		// What it cannot read narrowly is everything.
		{`WITH x AS (SELECT 1) UPDATE tasks SET state = 'OPEN'`, ChangedAll},
		{`UPDATE tasks SET a = 1; DELETE FROM messages`, ChangedAll},
		{`CREATE INDEX i ON tasks (id)`, ChangedAll},
		{`INSERT`, ChangedAll},
		{`DELETE tasks`, ChangedAll},
		{``, ChangedAll},
		{`UPDATE tasks SET a = 1;`, ChangedTasks},
		// The journal's mark, in every batch: what it says is every
		// daemon's reads at every commit of the journal.
		{markSQL, ChangedOther},
	} {
		if got := changeOf(c.query); got != c.want {
			t.Errorf("changeOf(%q) = %b, want %b", c.query, got, c.want)
		}
	}
}

func TestInsertsEvents(t *testing.T) {
	for _, c := range []struct {
		query string
		want  bool
	}{
		{`INSERT INTO events (at, agent) VALUES (?, ?)`, true},
		{"\n\t\tinsert into \"events\"(at) SELECT at FROM x", true},
		{`INSERT OR IGNORE INTO events (at) VALUES (?)`, true},
		{`INSERT INTO messages (body) VALUES ('events')`, false},
		{`INSERT INTO events_archive (at) VALUES (?)`, false},
		{`SELECT id FROM events WHERE id > ?`, false},
		{`UPDATE events SET reason = ''`, false},
		{`DELETE FROM events WHERE at < ?`, false},
		// What it cannot read is a yes when it names events.
		{`WITH x AS (SELECT 1) INSERT INTO events (at) SELECT 1 FROM x`, true},
		{`UPDATE tasks SET a = 1; INSERT INTO events (at) VALUES (1)`, true},
		{`CREATE INDEX i ON events (agent)`, true},
		{`WITH x AS (SELECT 1) UPDATE tasks SET state = 'OPEN'`, false},
		{`INSERT`, false},
		{``, false},
	} {
		if got := insertsEvents(c.query); got != c.want {
			t.Errorf("insertsEvents(%q) = %v, want %v", c.query, got, c.want)
		}
	}
}

func TestPayloadChange(t *testing.T) {
	for payload, want := range map[string]Change{
		"1": ChangedMail, "2": ChangedTasks, "4": ChangedOther, "7": ChangedMail | ChangedTasks | ChangedOther, "3": ChangedMail | ChangedTasks,
		"8": ChangedOpen, "10": ChangedTasks | ChangedOpen, "15": ChangedAll,
		"": ChangedAll, "0": ChangedAll, "16": ChangedAll, "010": ChangedAll, "+8": ChangedAll, "x": ChangedAll,
	} {
		if got := payloadChange(payload); got != want {
			t.Errorf("payloadChange(%q) = %b, want %b", payload, got, want)
		}
	}
	sent := &pgConn{lock: heldLock} // a transaction that has sent its BEGIN
	for c := Change(1); c <= ChangedAll; c++ {
		end := sent.commitWrite(c)
		if len(end) != 2 || end[1].sql != "COMMIT" || end[0].args[0] != changesChannel {
			t.Fatalf("commitWrite(%b) = %+v, want a notification on %s, then COMMIT", c, end, changesChannel)
		}
		if got := payloadChange(end[0].args[1].(string)); got != c {
			t.Errorf("commitWrite(%b)'s payload reads back as %b", c, got)
		}
		// Nothing sent yet: the notification goes in the lock's statement.
		held := &pgConn{lock: heldLock, held: []heldBack{heldBegin, heldLock}}
		if end := held.commitWrite(c); len(end) != 1 || end[0].sql != "COMMIT" {
			t.Fatalf("commitWrite(%b) before the BEGIN went = %+v, want the COMMIT alone", c, end)
		}
		lock := held.held[1]
		if !strings.HasPrefix(lock.sql, heldLock.sql) || !strings.Contains(lock.sql, "pg_notify($1, $2)") || lock.args[0] != changesChannel {
			t.Fatalf("the lock's statement = %+v, want the lock and the notification", lock)
		}
		if got := payloadChange(lock.args[1].(string)); got != c {
			t.Errorf("commitWrite(%b)'s payload in the lock's statement reads back as %b", c, got)
		}
	}
	if got := sent.commitWrite(0); len(got) != 1 || got[0].sql != "COMMIT" {
		t.Errorf("commitWrite(0) = %+v, want a COMMIT that tells no one", got)
	}
}

func TestPayloadUrgent(t *testing.T) {
	at := time.Date(2026, 11, 29, 7, 14, 23, 123456000, time.UTC)
	u, ok := payloadUrgent("u42 2026-11-29T07:14:23.123456Z bob")
	if want := (Urgent{ID: 42, To: "bob", CreatedAt: at}); !ok || u != want {
		t.Errorf("payloadUrgent = %+v, %v; want %+v", u, ok, want)
	}
	// A recipient is the rest of the payload, spaces and all.
	if u, ok := payloadUrgent("u7 2026-11-29T07:14:23.123456Z the operator"); !ok || u.To != "the operator" {
		t.Errorf("a recipient with a space: %+v, %v", u, ok)
	}
	for _, bad := range []string{"", "u", "1", "8", "u42", "u42 2026-11-29T07:14:23.123456Z", "u42 2026-11-29T07:14:23.123456Z ",
		"u0 2026-11-29T07:14:23.123456Z bob", "u-1 2026-11-29T07:14:23.123456Z bob", "ux 2026-11-29T07:14:23.123456Z bob",
		"u42 yesterday bob", "U42 2026-11-29T07:14:23.123456Z bob"} {
		if u, ok := payloadUrgent(bad); ok {
			t.Errorf("payloadUrgent(%q) = %+v, want no urgent message", bad, u)
		}
	}
}

// TestWatchKeepsAnnouncementsItCanHold: past maxUrgent untaken, a
// listener is told everything may have changed, so that it reads.
func TestWatchKeepsAnnouncementsItCanHold(t *testing.T) {
	w := newWatch()
	for i := range maxUrgent + 1 {
		w.notified("u" + strconv.Itoa(i+1) + " 2026-11-29T07:14:23.123456Z bob")
	}
	if got := w.Take(); got != ChangedAll {
		t.Errorf("after %d announcements: Take = %b, want everything", maxUrgent+1, got)
	}
	got := w.TakeUrgent(nil)
	if len(got) != maxUrgent || got[0].ID != 1 || got[maxUrgent-1].ID != maxUrgent {
		t.Fatalf("TakeUrgent: %d messages, want the first %d in order", len(got), maxUrgent)
	}
	if again := w.TakeUrgent(nil); len(again) != 0 {
		t.Errorf("a second TakeUrgent: %d messages, want none", len(again))
	}
	w.notified("u9 2026-11-29T07:14:23.123456Z bob")
	if got := w.Take(); got != ChangedMail {
		t.Errorf("one announcement: Take = %b, want mail", got)
	}
}

// FuzzNotification: a notification's payload, whatever a client of the
// server sent, is an urgent message that reads back the same or a Change
// a listener can act on; nothing panics.
func FuzzNotification(f *testing.F) {
	for _, s := range []string{"1", "8", "15", "", "u42 2026-11-29T07:14:23.123456Z bob", "u1 x y", "u9223372036854775807 2026-11-29T07:14:23.123456Z a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, payload string) {
		if u, ok := payloadUrgent(payload); ok {
			if u.ID < 1 || u.To == "" {
				t.Fatalf("payloadUrgent(%q) = %+v", payload, u)
			}
			again := "u" + strconv.FormatInt(u.ID, 10) + " " + u.CreatedAt.Format(TimeLayout) + " " + u.To
			if back, ok := payloadUrgent(again); !ok || back != u {
				t.Fatalf("payloadUrgent(%q) = %+v; its payload %q reads back as %+v, %v", payload, u, again, back, ok)
			}
			return
		}
		if c := payloadChange(payload); c == 0 || c > ChangedAll {
			t.Fatalf("payloadChange(%q) = %b", payload, c)
		}
	})
}
