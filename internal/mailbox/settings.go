package mailbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
)

// settingMaxBody is the settings key of Options.MaxBodyBytes.
const settingMaxBody = "mailbox.max_body"

// RecordLimits writes the limits this DB enforces into the database, so
// that every process that opens the file without limits of its own (Options
// fields left zero) enforces the same: the daemon calls it at start, and a
// `swarmd mail` inside a session, which reads no config, is bound by it.
func (db *DB) RecordLimits(ctx context.Context) error {
	if err := db.Check(); err != nil {
		return db.wrap("record limits", err)
	}
	_, err := db.write.ExecContext(ctx, `INSERT INTO settings (key, value) VALUES (?, ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`, settingMaxBody, strconv.Itoa(db.maxBody))
	if err != nil {
		return db.wrap("record limits", err)
	}
	return nil
}

// recordedMaxBody is the body limit RecordLimits wrote, or 0 when none was.
func (db *DB) recordedMaxBody(ctx context.Context) (int, error) {
	var v string
	err := db.read.QueryRowContext(ctx, `SELECT value FROM settings WHERE key = ?`, settingMaxBody).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, db.wrap("read limits", err)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("mailbox: read limits: %s = %q in %s is not a positive integer", settingMaxBody, v, db.path)
	}
	return n, nil
}

// SetSetting records key = value for every process that opens the file
// (the daemon records what its config says that other processes, which
// read no config, must follow).
func (db *DB) SetSetting(ctx context.Context, key, value string) error {
	if err := db.Check(); err != nil {
		return db.wrap("set "+key, err)
	}
	if _, err := db.write.ExecContext(ctx, `INSERT INTO settings (key, value) VALUES (?, ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`, key, value); err != nil {
		return db.wrap("set "+key, err)
	}
	return nil
}

// Setting is what SetSetting recorded for key; ok is false when nothing was.
func (db *DB) Setting(ctx context.Context, key string) (value string, ok bool, err error) {
	err = db.read.QueryRowContext(ctx, `SELECT value FROM settings WHERE key = ?`, key).Scan(&value)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, db.wrap("read "+key, err)
	}
	return value, true, nil
}
