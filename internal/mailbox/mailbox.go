// Package mailbox is the mail agents and the operator send each other,
// kept in the messages table of swarm.db (see package store, which opens the
// file and owns its schema). A message is marked delivered in the same
// transaction that reads it for a prompt, so it is delivered exactly once,
// across processes: the daemon and every short-lived `swarmd mail`.
package mailbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/store"
)

// Operator is the sender name outside a backend session. It is always a
// valid recipient (agents reply to the operator) but never an agent, so a
// broadcast does not reach it.
const Operator = "operator"

// DefaultMaxBodyBytes is the body limit when Options.MaxBodyBytes is zero
// and the daemon recorded none (config key mailbox.max_body).
const DefaultMaxBodyBytes = 64 << 10

// maxSubjectBytes keeps a subject a line, not a second body that would slip
// past the body limit into prompts.
const maxSubjectBytes = 1024

// Options configure New.
type Options struct {
	// MaxBodyBytes refuses larger bodies (config key mailbox.max_body).
	// Zero means the limit the daemon recorded in the database (see
	// RecordLimits), else DefaultMaxBodyBytes.
	MaxBodyBytes int
	// Agents are the known recipients. Nil disables the recipient check
	// (and makes Broadcast impossible). Operator is always known.
	Agents []string
	// UrgentEvery is how often one agent's urgent mail may interrupt one
	// recipient: more in that time is stored as normal mail (Message.Calmed),
	// read at the recipient's next session. Urgent mail ends the
	// recipient's running session, so an agent (a prompt-injected one)
	// sending it in a loop would keep a peer from ever finishing one. The
	// operator's urgent mail is not bounded. Zero means what the daemon
	// recorded (RecordLimits), else no bound.
	UrgentEvery time.Duration
}

// DefaultUrgentEvery is the daemon's UrgentEvery.
const DefaultUrgentEvery = 10 * time.Minute

// Mailbox is the mail in one swarm.db. It is safe for concurrent use.
type Mailbox struct {
	db *store.DB
	// owned: Close closes db too (Open made it).
	owned bool
	// insertStmt is prepared once: parsing the INSERT costs about as much as
	// running it.
	insertStmt *sql.Stmt

	maxBody     int
	urgentEvery time.Duration // 0: no bound
	// known are the recipients (nil: any well-formed one); SetAgents
	// replaces them while the mailbox is in use.
	known atomic.Pointer[recipients]
}

// recipients are the known recipients of a mailbox.
type recipients struct {
	agents map[string]bool // the agents and Operator
	list   []string        // the agents, sorted, for error messages and Broadcast
}

// newRecipients is the recipients agents and Operator.
func newRecipients(agents []string) (*recipients, error) {
	r := &recipients{agents: make(map[string]bool, len(agents)+1)}
	for _, a := range agents {
		if !agent.ValidName(a) {
			return nil, invalid("agents", store.ErrInvalidName, "agent name %q is invalid (want %s)", a, agent.NamePattern)
		}
		if a != Operator && !r.agents[a] {
			r.list = append(r.list, a)
		}
		r.agents[a] = true
	}
	r.agents[Operator] = true
	slices.Sort(r.list)
	return r, nil
}

// SetAgents makes agents the known recipients (with Operator), as a
// reload changes the config's agents, for a mailbox New gave agents to.
func (mb *Mailbox) SetAgents(agents []string) error {
	r, err := newRecipients(agents)
	if err != nil {
		return fmt.Errorf("mailbox: set agents: %w", err)
	}
	mb.known.Store(r)
	return nil
}

// New is the mailbox of db. Close it before db.
func New(ctx context.Context, db *store.DB, opts Options) (*Mailbox, error) {
	mb := &Mailbox{db: db, maxBody: opts.MaxBodyBytes, urgentEvery: opts.UrgentEvery}
	if opts.Agents != nil {
		r, err := newRecipients(opts.Agents)
		if err != nil {
			return nil, fmt.Errorf("mailbox: open: %w", err)
		}
		mb.known.Store(r)
	}
	var err error
	if mb.maxBody <= 0 {
		if mb.maxBody, err = recordedMaxBody(ctx, db); err != nil {
			return nil, err
		}
	}
	if mb.maxBody <= 0 {
		mb.maxBody = DefaultMaxBodyBytes
	}
	if mb.urgentEvery <= 0 {
		if mb.urgentEvery, err = recordedUrgentEvery(ctx, db); err != nil {
			return nil, err
		}
	}
	if mb.insertStmt, err = db.MailSQL().PrepareContext(ctx, insertSQL); err != nil {
		return nil, mb.wrap("open", err)
	}
	return mb, nil
}

// Open opens the database at path (store.Open) and its mailbox, for a
// process that needs nothing else of it; Close closes both.
func Open(ctx context.Context, path string, sopts store.Options, opts Options) (*Mailbox, error) {
	db, err := store.Open(ctx, path, sopts)
	if err != nil {
		return nil, err
	}
	mb, err := New(ctx, db, opts)
	if err != nil {
		db.Close()
		return nil, err
	}
	mb.owned = true
	return mb, nil
}

// Store is the database the mailbox lives in.
func (mb *Mailbox) Store() *store.DB { return mb.db }

// Check reports store.store.ErrDatabaseGone once the file is gone (store.DB.Check).
func (mb *Mailbox) Check() error { return mb.db.Check() }

// DataVersion changes whenever anything commits (store.DB.DataVersion).
func (mb *Mailbox) DataVersion(ctx context.Context) (int64, error) { return mb.db.DataVersion(ctx) }

// Close releases the mailbox, and the database when Open opened it. It is
// idempotent.
func (mb *Mailbox) Close() error {
	var errs []error
	if mb.insertStmt != nil {
		errs = append(errs, mb.insertStmt.Close())
		mb.insertStmt = nil
	}
	if mb.owned {
		errs = append(errs, mb.db.Close())
	}
	return errors.Join(errs...)
}

// wrap names the operation and classifies storage errors (store.DB.WrapFor).
func (mb *Mailbox) wrap(op string, err error) error { return mb.db.WrapFor("mailbox", op, err) }

// validName is the agent name rule (agent.NamePattern).
func validName(s string) bool { return agent.ValidName(s) }
