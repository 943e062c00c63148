package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// HistoryLog is a log the swarm keeps of its past that may be pruned by
// age: nothing the swarm does reads its old rows.
type HistoryLog struct {
	table string // with an INTEGER id primary key
	at    string // the row's time, FormatTime's text
	keep  string // a column: rows where it is not NULL are kept whatever their age ("": none)
}

// The logs history.max_age prunes. The event log keeps every event of a
// task: the merge queue counts a task's rejections there, and a restart
// reads a held task's last event. Its agent events (states, sessions,
// pauses) and the tool audit are read only by people.
var (
	AgentEvents = HistoryLog{table: "events", at: "at", keep: "task_id"}
	ToolCalls   = HistoryLog{table: "tool_calls", at: "started_at"}
)

// historyPage is how many rows a prune reads, and deletes in one statement
// at most: a short turn of the writers' lock.
const historyPage = 1000

// PruneHistory deletes the rows of l recorded before before, in id order,
// from after (the id PruneHistory returned last; 0 at first). It stops at
// the first row not old enough, and returns the last id it went past, to
// start from next time: rows kept (a task's events) are read once, not at
// every prune. Ids grow with time, mostly: a row a little out of order is
// pruned by a later call.
func (db *DB) PruneHistory(ctx context.Context, l HistoryLog, before time.Time, after int64) (deleted int, next int64, err error) {
	op := "prune " + l.table
	kept := "0"
	if l.keep != "" {
		kept = "CASE WHEN " + l.keep + " IS NULL THEN 0 ELSE 1 END"
	}
	next = after
	for {
		type row struct {
			id   int64
			at   string
			kept int
		}
		rows, err := QueryAll(ctx, db.reads, func(s Scanner) (row, error) {
			var r row
			return r, s.Scan(&r.id, &r.at, &r.kept)
		}, `SELECT id, `+l.at+`, `+kept+` FROM `+l.table+` WHERE id > ? ORDER BY id LIMIT ?`, next, historyPage)
		if err != nil {
			return deleted, next, db.Wrap(op, err)
		}
		var ids []any
		young := false
		last := next
		for _, r := range rows {
			if at, err := ParseTime(r.at); err != nil || !at.Before(before) {
				young = true // a time that does not parse is kept, and stops the prune here
				break
			}
			last = r.id
			if r.kept == 0 {
				ids = append(ids, r.id)
			}
		}
		if len(ids) > 0 {
			n, err := db.ExecCount(ctx, op, `DELETE FROM `+l.table+` WHERE id IN (?`+strings.Repeat(", ?", len(ids)-1)+`)`, ids...)
			if err != nil {
				return deleted, next, err
			}
			deleted += n
		}
		next = last
		if young || len(rows) < historyPage {
			return deleted, next, nil
		}
		if err := ctx.Err(); err != nil {
			return deleted, next, fmt.Errorf("%s: %w", op, err)
		}
	}
}
