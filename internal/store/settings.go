package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// SetSetting records key = value for every process that opens the file
// (the daemon records what its config says that other processes, which
// read no config, must follow).
func (db *DB) SetSetting(ctx context.Context, key, value string) error {
	if err := db.Check(); err != nil {
		return db.Wrap("set "+key, err)
	}
	if _, err := db.ExecCount(ctx, "set "+key, setSettingSQL, key, value); err != nil {
		return err
	}
	return nil
}

// setSettingSQL writes key = value (SetSetting, ClaimDaemonSetting).
const setSettingSQL = `INSERT INTO settings (key, value) VALUES (?, ?)
	ON CONFLICT (key) DO UPDATE SET value = excluded.value`

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

// daemonPrefix starts the keys of the settings a daemon records as its own
// (SetDaemonSetting): "daemon/" NAME "/" KEY.
const daemonPrefix = "daemon/"

// SetDaemonSetting records key = value as daemon's own: where the daemons
// of one swarm may differ, each records what its config says, and
// DaemonSettings lists them side by side.
func (db *DB) SetDaemonSetting(ctx context.Context, daemon, key, value string) error {
	return db.SetSetting(ctx, daemonPrefix+daemon+"/"+key, value)
}

// DaemonSettings is what each daemon recorded for key (SetDaemonSetting),
// by daemon.
func (db *DB) DaemonSettings(ctx context.Context, key string) (map[string]string, error) {
	rows, err := db.reads.QueryContext(ctx, `SELECT key, value FROM settings WHERE substr(key, 1, ?) = ?`, len(daemonPrefix), daemonPrefix)
	if err != nil {
		return nil, db.Wrap("read the daemons' "+key, err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, db.Wrap("read the daemons' "+key, err)
		}
		if daemon, ok := strings.CutSuffix(strings.TrimPrefix(k, daemonPrefix), "/"+key); ok {
			out[daemon] = v
		}
	}
	if err := rows.Err(); err != nil {
		return nil, db.Wrap("read the daemons' "+key, err)
	}
	return out, nil
}

// SettingConflictError is ClaimDaemonSetting's refusal: a daemon that runs
// recorded another value for Key.
type SettingConflictError struct {
	Key    string
	Daemon string // the running daemon
	Theirs string // what it recorded
}

func (e *SettingConflictError) Error() string {
	return fmt.Sprintf("daemon %s, which runs on this store, recorded %s = %q", e.Daemon, e.Key, e.Theirs)
}

// ClaimDaemonSetting records key = value as daemon's own
// (SetDaemonSetting) and as the swarm's (SetSetting), where the swarm's
// daemons must agree on it: in the same write transaction, it first
// refuses, writing nothing, with a *SettingConflictError when another
// daemon that holds an unexpired lease at now recorded another value.
// Write transactions take turns on both engines (one writer on SQLite, the
// writers' lock on PostgreSQL), so of daemons that take their leases and
// then claim, the first to claim wins and every later one with another
// value is refused, however close together they start: each sees the
// winner's leases and value, committed before its turn.
func (db *DB) ClaimDaemonSetting(ctx context.Context, daemon, key, value string, now time.Time) error {
	return db.InTx(ctx, "claim "+key, func(tx *sql.Tx) error {
		var other, theirs string
		err := tx.QueryRowContext(ctx, `SELECT l.daemon, s.value
			FROM (SELECT DISTINCT daemon FROM agent_leases WHERE expires_at > ? AND daemon <> ?) l
			JOIN settings s ON s.key = '`+daemonPrefix+`' || l.daemon || ?
			WHERE s.value <> ? ORDER BY l.daemon LIMIT 1`, FormatTime(now), daemon, "/"+key, value).Scan(&other, &theirs)
		switch {
		case err == nil:
			return &SettingConflictError{Key: key, Daemon: other, Theirs: theirs}
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		for _, k := range []string{daemonPrefix + daemon + "/" + key, key} {
			if _, err := tx.ExecContext(ctx, setSettingSQL, k, value); err != nil {
				return err
			}
		}
		return nil
	})
}
