package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/swarmd/swarmd/internal/agent"
)

// ErrNotFile: the operation works on a SQLite file, and the store is a
// PostgreSQL server (whose own tools copy it).
var ErrNotFile = errors.New("the store is a PostgreSQL database, not a file")

// CopyTo writes a consistent copy of the SQLite store to path, which must
// not exist: the store as one transaction saw it, compacted (VACUUM INTO).
// It reads through a connection of its own, so the daemon's writers go on
// meanwhile; only the WAL's checkpoint waits for the copy to end.
//
// The read pool cannot make it: its connections are query_only, which
// refuses VACUUM INTO; a read-only open (mode=ro) does not.
func (db *DB) CopyTo(ctx context.Context, path string) error {
	if !db.file {
		return fmt.Errorf("store: copy: %w", ErrNotFile)
	}
	if err := db.Check(); err != nil {
		return db.Wrap("copy", err)
	}
	src, err := sql.Open("sqlite", strings.Replace(dsn(db.path, false), "mode=rw", "mode=ro", 1))
	if err != nil {
		return db.Wrap("copy", err)
	}
	defer src.Close()
	conn, err := src.Conn(ctx)
	if err != nil {
		return db.Wrap("copy", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `PRAGMA query_only = 0`); err != nil {
		return db.Wrap("copy", err)
	}
	if _, err := conn.ExecContext(ctx, `VACUUM INTO ?`, path); err != nil {
		return db.Wrap("copy to "+path, err)
	}
	return nil
}

// ErrDamaged: the database's integrity check found faults.
var ErrDamaged = errors.New("the database is damaged")

// CheckIntegrity runs SQLite's integrity check of the whole file: every
// page, index and constraint. It reads all of it, so it is for a copy,
// not for a store in use.
func (db *DB) CheckIntegrity(ctx context.Context) error {
	if !db.file {
		return fmt.Errorf("store: integrity check: %w", ErrNotFile)
	}
	rows, err := db.reads.QueryContext(ctx, `PRAGMA integrity_check(20)`)
	if err != nil {
		return db.Wrap("integrity check", err)
	}
	defer rows.Close()
	var faults []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return db.Wrap("integrity check", err)
		}
		if line != "ok" {
			faults = append(faults, line)
		}
	}
	if err := rows.Err(); err != nil {
		return db.Wrap("integrity check", err)
	}
	if len(faults) > 0 {
		return fmt.Errorf("store: integrity check of %s: %w: %s", db.path, ErrDamaged, strings.Join(faults, "; "))
	}
	return nil
}

// seqFloorKey is the setting under which a restored store keeps the
// highest session seq an agent's logs had (SetSeqFloor).
func seqFloorKey(agent string) string { return "seq_floor/" + agent }

// SetSeqFloor makes MaxSeq of agent name at least seq: a store restored from a
// backup has not the rows of the sessions run since, and their logs are
// still in the state dir. A seq of theirs used again would add a new
// session's output to another's log. A floor never goes down.
func (db *DB) SetSeqFloor(ctx context.Context, name string, seq uint32) error {
	if !agent.ValidName(name) {
		return fmt.Errorf("store: seq floor: %w", Invalid("agent", ErrInvalidName, "%q is not a valid agent name", name))
	}
	_, err := db.ExecCount(ctx, "set the seq floor of "+name, `INSERT INTO settings (key, value) VALUES (?, ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value
		WHERE CAST(settings.value AS INTEGER) < CAST(excluded.value AS INTEGER)`,
		seqFloorKey(name), strconv.FormatUint(uint64(seq), 10))
	return err
}
