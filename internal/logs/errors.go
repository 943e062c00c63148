package logs

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Sentinel errors. Returned errors wrap them with the agent and operation;
// test with errors.Is.
var (
	// ErrNoSession: neither logs/ nor any archive holds the session asked for.
	ErrNoSession = errors.New("no such session")
	// ErrBadName: the agent name is not one the config allows, and so not safe
	// to put in a path.
	ErrBadName = errors.New("invalid agent name")
	// ErrChanged: a log changed while it was being archived, so something
	// is still writing it. The file is kept (a shrunk one fails the archive).
	ErrChanged = errors.New("log changed while archiving")
)

// NoSessionError is what Open and Follow return for a session that does not
// exist. It lists the sessions that do, so the operator can pick one.
type NoSessionError struct {
	Agent    string
	Seq      uint32
	Live     []uint32 // sorted
	Archived []uint32 // sorted; sessions that are also live are not repeated
}

func (e *NoSessionError) Error() string {
	var have []string
	if len(e.Live) > 0 {
		have = append(have, "live "+ranges(e.Live))
	}
	if len(e.Archived) > 0 {
		have = append(have, "archived "+ranges(e.Archived))
	}
	if len(have) == 0 {
		return fmt.Sprintf("agent %s has no session %d (no session logs at all)", e.Agent, e.Seq)
	}
	return fmt.Sprintf("agent %s has no session %d (sessions: %s)", e.Agent, e.Seq, strings.Join(have, "; "))
}

func (e *NoSessionError) Is(target error) bool { return target == ErrNoSession }

// ranges prints sorted seqs compactly: 1-4, 7, 9-10.
func ranges(seqs []uint32) string {
	var b strings.Builder
	for i := 0; i < len(seqs); {
		j := i
		for j+1 < len(seqs) && seqs[j+1] == seqs[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.FormatUint(uint64(seqs[i]), 10))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.FormatUint(uint64(seqs[j]), 10))
		}
		i = j + 1
	}
	return b.String()
}

// opErr gives every returned error the same shape: "logs: <op> <agent>: …".
func opErr(op, agent string, err error) error {
	if agent == "" {
		return fmt.Errorf("logs: %s: %w", op, err)
	}
	return fmt.Errorf("logs: %s %s: %w", op, agent, err)
}

// joinErrs is errors.Join on one line: messages are joined with "; " so that
// a log line or CLI error stays one line. It returns nil for no errors.
func joinErrs(errs ...error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return multiError(errs)
}

type multiError []error

func (m multiError) Error() string {
	parts := make([]string, len(m))
	for i, err := range m {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

func (m multiError) Unwrap() []error { return m }
