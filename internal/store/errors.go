package store

import (
	"errors"
	"fmt"
)

// Sentinels. Callers test the kind with errors.Is; the wrapped error says
// what to do.
var (
	// ErrSchemaTooNew: the database was migrated by a newer swarmd.
	ErrSchemaTooNew = errors.New("database schema is newer than this swarmd")
	// ErrNoDatabase: Options.NoCreate was set and the file does not exist.
	ErrNoDatabase = errors.New("database does not exist")
	// ErrDiskFull and ErrReadOnly classify storage failures (SQLITE_FULL,
	// SQLITE_READONLY) so that callers can say what to fix.
	ErrDiskFull = errors.New("disk full")
	ErrReadOnly = errors.New("database is read-only")
	// ErrJournalClosed is reported (through JournalOptions.OnError) for a
	// record enqueued after Journal.Close: it is dropped.
	ErrJournalClosed = errors.New("journal closed")
	// ErrJournalFull is reported (through JournalOptions.OnError) for an
	// event or tool call enqueued while JournalOptions.MaxQueued records
	// wait for a database that refuses writes: it is dropped.
	ErrJournalFull = errors.New("journal queue full")
	// ErrDatabaseGone: the file this DB opened is no longer at its path
	// (deleted or replaced). Nothing more is written: it would go into an
	// unlinked file and be lost.
	ErrDatabaseGone = errors.New("database file deleted or replaced")
	// ErrInvalidName: an agent name breaks agent.NamePattern.
	ErrInvalidName = errors.New("invalid agent name")
)

// ValidationError is a refused request: nothing was stored.
type ValidationError struct {
	Field string // "from", "to", "subject", "body", "agent", "session", "agents"
	Err   error  // a sentinel (ErrInvalidName, or one of the caller's)
	Msg   string // one line, for a person
}

func (e *ValidationError) Error() string { return e.Msg }
func (e *ValidationError) Unwrap() error { return e.Err }

// Invalid is a ValidationError of field, wrapping sentinel.
func Invalid(field string, sentinel error, format string, args ...any) error {
	return &ValidationError{Field: field, Err: sentinel, Msg: fmt.Sprintf(format, args...)}
}

// Wrap names the operation and classifies storage errors: every error of
// the store goes through here, so they all read "store: <op>: …" and say
// what to fix.
func (db *DB) Wrap(op string, err error) error { return db.WrapFor("store", op, err) }

// WrapFor is Wrap for a package that keeps its tables in the store: its
// errors read "<pkg>: <op>: …".
func (db *DB) WrapFor(pkg, op string, err error) error {
	if !errors.Is(err, ErrDatabaseGone) && db.Check() != nil {
		// The file went: that is the cause (a connection opened after it
		// cannot open it), whatever the driver said.
		err = fmt.Errorf("%w (%w)", ErrDatabaseGone, err)
	}
	if errors.Is(err, ErrDatabaseGone) {
		return fmt.Errorf("%s: %s: %w: %s is not the file swarmd opened (restart swarmd)", pkg, op, err, db.path)
	}
	switch db.drv.classify(err) {
	case ErrDiskFull:
		return fmt.Errorf("%s: %s: %w: %w (free space on the filesystem holding %s)", pkg, op, ErrDiskFull, err, db.path)
	case ErrReadOnly:
		return fmt.Errorf("%s: %s: %w: %w (check the permissions of %s and its directory)", pkg, op, ErrReadOnly, err, db.path)
	}
	return fmt.Errorf("%s: %s: %w", pkg, op, err)
}
