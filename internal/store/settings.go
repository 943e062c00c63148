package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
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
