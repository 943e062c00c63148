package store

import (
	"context"
	"database/sql"
	"errors"
)

// SetSetting records key = value for every process that opens the file
// (the daemon records what its config says that other processes, which
// read no config, must follow).
func (db *DB) SetSetting(ctx context.Context, key, value string) error {
	if err := db.Check(); err != nil {
		return db.Wrap("set "+key, err)
	}
	if _, err := db.ExecCount(ctx, "set "+key, `INSERT INTO settings (key, value) VALUES (?, ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`, key, value); err != nil {
		return err
	}
	return nil
}

// Setting is what SetSetting recorded for key; ok is false when nothing was.
func (db *DB) Setting(ctx context.Context, key string) (value string, ok bool, err error) {
	err = db.reads.QueryRowContext(ctx, `SELECT value FROM settings WHERE key = ?`, key).Scan(&value)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, db.Wrap("read "+key, err)
	}
	return value, true, nil
}
