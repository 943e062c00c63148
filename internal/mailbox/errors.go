package mailbox

import (
	"errors"

	"github.com/swarmd/swarmd/internal/store"
)

// Sentinels. Validation failures wrap one of these in a *store.ValidationError, so
// callers can both test the kind with errors.Is and print a message a person
// can act on.
var (
	ErrNotFound         = errors.New("message not found")
	ErrTooLarge         = errors.New("message too large")
	ErrUnknownRecipient = errors.New("unknown recipient")
	ErrUnknownSender    = errors.New("unknown sender")
	ErrSelfSend         = errors.New("message to self")
	ErrEmptyBody        = errors.New("empty message body")
	ErrNoRecipients     = errors.New("no recipients")
)

func invalid(field string, sentinel error, format string, args ...any) error {
	return store.Invalid(field, sentinel, format, args...)
}
