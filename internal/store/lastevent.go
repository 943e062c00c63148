package store

import "context"

// LastEventID is the newest event's id, 0 when the log is empty: where a
// reader that wants only what comes next starts.
func (db *DB) LastEventID(ctx context.Context) (int64, error) {
	var id int64
	if err := db.reads.QueryRowContext(ctx, `SELECT IFNULL(MAX(id), 0) FROM events`).Scan(&id); err != nil {
		return 0, db.Wrap("last event id", err)
	}
	return id, nil
}
