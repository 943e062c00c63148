package mailbox

import (
	"errors"
	"fmt"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Sentinels. Validation failures wrap one of these in a *ValidationError, so
// callers can both test the kind with errors.Is and print a message a person
// can act on.
var (
	ErrNotFound         = errors.New("message not found")
	ErrTooLarge         = errors.New("message too large")
	ErrUnknownRecipient = errors.New("unknown recipient")
	ErrSelfSend         = errors.New("message to self")
	ErrEmptyBody        = errors.New("empty message body")
	ErrInvalidName      = errors.New("invalid agent name")
	ErrNoRecipients     = errors.New("no recipients")

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
)

// ValidationError is a refused message: nothing was stored.
type ValidationError struct {
	Field string // "from", "to", "subject", "body", "agent", "session", "agents"
	Err   error  // one of the sentinels above
	Msg   string // one line, for a person
}

func (e *ValidationError) Error() string { return e.Msg }
func (e *ValidationError) Unwrap() error { return e.Err }

func invalid(field string, sentinel error, format string, args ...any) error {
	return &ValidationError{Field: field, Err: sentinel, Msg: fmt.Sprintf(format, args...)}
}

// wrap names the operation and classifies storage errors. Every error the
// package returns goes through here, so they all read "mailbox: <op>: …".
func (db *DB) wrap(op string, err error) error {
	if errors.Is(err, ErrDatabaseGone) {
		return fmt.Errorf("mailbox: %s: %w: %s is not the file swarmd opened (restart swarmd)", op, err, db.path)
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff { // primary code; extended codes carry detail in the high bits
		case sqlite3.SQLITE_FULL:
			return fmt.Errorf("mailbox: %s: %w: %w (free space on the filesystem holding %s)", op, ErrDiskFull, err, db.path)
		case sqlite3.SQLITE_READONLY:
			return fmt.Errorf("mailbox: %s: %w: %w (check the permissions of %s and its directory)", op, ErrReadOnly, err, db.path)
		}
	}
	return fmt.Errorf("mailbox: %s: %w", op, err)
}
