// Package cli is swarmd's commands other than `swarmd run`: each command
// group in a file of its own (task.go, mail.go, ...), each command an
// options struct and a run function that tests call in-process, and what
// they share written once (cmdutil.go: finding swarm.db, who calls, a
// message body, waiting on a busy store). cmd/swarmd wires them under its
// root command.
package cli

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
	"golang.org/x/sys/unix"
)

// Streams are a command's standard streams and environment, injectable for
// tests.
type Streams struct {
	In       io.Reader
	Out, Err io.Writer
	Getenv   func(string) string
	// Store, when set, is the daemon's open store, which mail and task use
	// for SWARM_DB_PATH: the daemon runs a session's command (cmd/swarmd's
	// runSessionCLI).
	Store *store.DB
	// Board, when set with Store, is the daemon's task board, which task
	// uses: the session's command claims and reports as the daemon's own
	// prompts do, by the config of the daemon that runs its agent (its
	// reviewers, its merge queue), never by what another daemon sharing
	// the store recorded.
	Board *taskboard.Board
	// MailMaxBody, when set with Store, is the daemon's mailbox.max_body,
	// which binds the session's mail: the store's recorded limit is
	// whichever daemon sharing it started last.
	MailMaxBody int
}

// UsageError marks errors that are the user's input (bad flags, bad config,
// a state dir in use): exit code 2.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usage marks err, when not nil, as the user's mistake.
func Usage(err error) error {
	if err == nil {
		return nil
	}
	return UsageError{err}
}

// Usagef is Usage(fmt.Errorf(format, args...)).
func Usagef(format string, args ...any) error { return UsageError{fmt.Errorf(format, args...)} }

func usage(err error) error                   { return Usage(err) }
func usagef(format string, args ...any) error { return Usagef(format, args...) }

// OneLine keeps an error on one line even when it quotes input that holds
// line breaks.
func OneLine(s string) string {
	return strings.NewReplacer("\r\n", `\n`, "\n", `\n`, "\r", `\r`).Replace(strings.TrimRight(s, "\n"))
}

func oneLine(s string) string { return OneLine(s) }

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
