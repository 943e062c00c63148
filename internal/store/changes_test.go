package store

import (
	"testing"
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
	} {
		if got := changeOf(c.query); got != c.want {
			t.Errorf("changeOf(%q) = %b, want %b", c.query, got, c.want)
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
	for c := Change(1); c <= ChangedAll; c++ {
		end := commitWrite(c)
		if len(end) != 2 || end[1].sql != "COMMIT" || end[0].args[0] != changesChannel {
			t.Fatalf("commitWrite(%b) = %+v, want a notification on %s, then COMMIT", c, end, changesChannel)
		}
		if got := payloadChange(end[0].args[1].(string)); got != c {
			t.Errorf("commitWrite(%b)'s payload reads back as %b", c, got)
		}
	}
	if got := commitWrite(0); len(got) != 1 || got[0].sql != "COMMIT" {
		t.Errorf("commitWrite(0) = %+v, want a COMMIT that tells no one", got)
	}
}
