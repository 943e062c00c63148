package mailbox

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/store"
)

// Message is one delivery: a broadcast is one Message per recipient.
type Message struct {
	ID       int64
	ThreadID int64 // the first message's ID
	ReplyTo  int64 // 0: not a reply
	From     string
	To       string
	Subject  string
	Body     string
	Urgent   bool
	// CreatedAt and DeliveredAt are UTC, microsecond precision.
	CreatedAt   time.Time
	DeliveredAt *time.Time // nil: pending
	// Calmed says that the message was asked for as urgent and stored as
	// normal mail (Options.UrgentEvery); set on what Send, Reply and
	// Broadcast return only.
	Calmed bool
	// ClaimedSession is the session whose prompt carried the message last.
	ClaimedSession string
	// ShownNote says why a session whose prompt carried the message did not
	// acknowledge it ("" if none did): the next prompt shows it again with it.
	ShownNote string
	// AckedBy is how the message was acknowledged: AckSession, AckRead, or ""
	// (pending, or delivered before acknowledgements were recorded).
	AckedBy string
}

// How a message was acknowledged (Message.AckedBy).
const (
	AckSession = "session" // the session whose prompt carried it completed
	AckRead    = "read"    // the recipient read it with `swarmd mail read`
)

// Draft is a message to send.
type Draft struct {
	From, To, Subject, Body string
	Urgent                  bool
	// At is when the message was written; zero is now. A caller that sends
	// it again when an attempt failed (the store away) sets it once, for
	// every attempt: an attempt may have committed unseen (on PostgreSQL a
	// connection can die between the COMMIT and its answer), and a
	// message from the same sender to the same recipient at the same time,
	// with the same subject and body, is then that attempt's, returned
	// instead of sent twice.
	At time.Time
}

const msgCols = `id, thread_id, reply_to, sender, recipient, subject, body, urgency, created_at, delivered_at, claimed_session,
	shown_note, acked_by`

// insertSQL assigns the id itself so that a new thread's thread_id can be
// the same id in one statement. An INSERT takes the senders' turn before it
// reads (SQLite's write lock; on PostgreSQL the mail lock, store.MailSQL and
// LockMailTx), so MAX(id)+1 is race-free across processes, and ids become
// visible in id order (the router's watermark relies on that).
const insertSQL = `INSERT INTO messages (id, thread_id, reply_to, sender, recipient, subject, body, urgency, created_at)
VALUES ((SELECT IFNULL(MAX(id), 0) + 1 FROM messages),
        IFNULL(?, (SELECT IFNULL(MAX(id), 0) + 1 FROM messages)),
        ?, ?, ?, ?, ?, ?, ?)
RETURNING id`

// insert stores m with mb.insertStmt, in tx if not nil. m.ThreadID 0 starts
// a new thread. It returns m with its ID and ThreadID set.
func (mb *Mailbox) insert(ctx context.Context, tx *sql.Tx, m Message) (Message, error) {
	if err := mb.calm(ctx, tx, &m); err != nil {
		return Message{}, err
	}
	var thread, replyTo sql.NullInt64
	if m.ThreadID != 0 {
		thread = sql.NullInt64{Int64: m.ThreadID, Valid: true}
	}
	if m.ReplyTo != 0 {
		replyTo = sql.NullInt64{Int64: m.ReplyTo, Valid: true}
	}
	args := []any{thread, replyTo, m.From, m.To, m.Subject, m.Body, urgency(m.Urgent), m.CreatedAt.Format(store.TimeLayout)}
	var row *sql.Row
	if tx == nil {
		row = mb.insertStmt.QueryRowContext(ctx, args...)
	} else {
		// In a write transaction of its own (a reply, a broadcast), which
		// takes the senders' turn too; the statement was prepared on the
		// mail pool, which may not be tx's.
		if err := mb.db.LockMailTx(ctx, tx); err != nil {
			return Message{}, err
		}
		row = tx.QueryRowContext(ctx, insertSQL, args...)
	}
	if err := row.Scan(&m.ID); err != nil {
		return Message{}, err
	}
	if m.ThreadID == 0 {
		m.ThreadID = m.ID
	}
	return m, nil
}

// calm sends m as normal mail (Calmed) when its sender's urgent mail
// interrupted its recipient less than UrgentEvery ago; read in tx if not
// nil.
func (mb *Mailbox) calm(ctx context.Context, tx *sql.Tx, m *Message) error {
	if !m.Urgent || m.From == Operator || mb.urgentEvery <= 0 {
		return nil
	}
	recent, err := mb.interruptedLately(ctx, tx, *m)
	if err != nil {
		return err
	}
	m.Urgent, m.Calmed = !recent, recent
	return nil
}

const interruptedSQL = `SELECT EXISTS (SELECT 1 FROM messages WHERE sender = ? AND recipient = ? AND urgency = 'urgent' AND created_at > ?)`

// interruptedLately reports whether m's sender sent its recipient urgent
// mail less than UrgentEvery before m.
func (mb *Mailbox) interruptedLately(ctx context.Context, tx *sql.Tx, m Message) (bool, error) {
	q := interruptedSQL
	args := []any{m.From, m.To, m.CreatedAt.Add(-mb.urgentEvery).Format(store.TimeLayout)}
	var recent bool
	var err error
	if tx != nil {
		err = tx.QueryRowContext(ctx, q, args...).Scan(&recent)
	} else {
		err = mb.db.ReadSQL().QueryRowContext(ctx, q, args...).Scan(&recent)
	}
	return recent, err
}

// Send stores one message. It starts a new thread.
func (mb *Mailbox) Send(ctx context.Context, d Draft) (Message, error) {
	if err := mb.validate(d); err != nil {
		return Message{}, fmt.Errorf("mailbox: send: %w", err)
	}
	return mb.send(ctx, "send", d)
}

// send stores d, checked already, as a new message; op names it in errors.
func (mb *Mailbox) send(ctx context.Context, op string, d Draft) (Message, error) {
	if err := mb.db.Check(); err != nil {
		return Message{}, mb.wrap(op, err)
	}
	if !d.At.IsZero() {
		return mb.sendOnce(ctx, op, mb.draftMessage(d))
	}
	m, err := mb.insert(ctx, nil, mb.draftMessage(d))
	if err != nil {
		return Message{}, mb.wrap(op, err)
	}
	return m, nil
}

// insertOnceSQL is insertSQL for a draft that may have been stored by an
// earlier attempt whose answer was lost (Draft.At): it stores nothing when
// that attempt's message is there (same sender, recipient, time, subject
// and body; delivered or not), and returns no row. Like every send it
// runs in the senders' turn, not the writers' lock, so urgent mail still
// does not wait behind the swarm's writes; and since the turn is taken
// before it looks, an attempt the server still runs has committed, or
// will find this one's message.
const insertOnceSQL = `INSERT INTO messages (id, thread_id, reply_to, sender, recipient, subject, body, urgency, created_at)
SELECT (SELECT IFNULL(MAX(id), 0) + 1 FROM messages),
       IFNULL(?, (SELECT IFNULL(MAX(id), 0) + 1 FROM messages)),
       ?, ?, ?, ?, ?, ?, ?
WHERE NOT EXISTS (SELECT 1 FROM messages WHERE sender = ? AND recipient = ? AND created_at = ? AND subject = ? AND body = ?)
RETURNING id`

// sendOnce stores m unless an earlier attempt at it did, and returns the
// message stored, by this attempt or that one.
func (mb *Mailbox) sendOnce(ctx context.Context, op string, m Message) (Message, error) {
	if err := mb.calm(ctx, nil, &m); err != nil {
		return Message{}, mb.wrap(op, err)
	}
	at := m.CreatedAt.Format(store.TimeLayout)
	err := mb.db.MailSQL().QueryRowContext(ctx, insertOnceSQL, nil, nil, m.From, m.To, m.Subject, m.Body, urgency(m.Urgent), at,
		m.From, m.To, at, m.Subject, m.Body).Scan(&m.ID)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		got, err := scanMessage(mb.db.ReadSQL().QueryRowContext(ctx, sentBeforeSQL, m.To, m.From, at, m.Subject, m.Body))
		if err != nil {
			return Message{}, mb.wrap(op, fmt.Errorf("an earlier attempt's message: %w", err))
		}
		return got, nil
	case err != nil:
		return Message{}, mb.wrap(op, err)
	}
	m.ThreadID = m.ID
	return m, nil
}

// NoteToOperator leaves the operator a message from the daemon itself (a
// task the merge queue gave up on, a change whose objects were replaced):
// from operator to operator, which Send refuses as mail to oneself. Only
// the daemon's own code calls it; no request reaches it.
func (mb *Mailbox) NoteToOperator(ctx context.Context, subject, body string) (Message, error) {
	if err := mb.validateContent(subject, body); err != nil {
		return Message{}, fmt.Errorf("mailbox: note to the operator: %w", err)
	}
	return mb.send(ctx, "note to the operator", Draft{From: Operator, To: Operator, Subject: subject, Body: body})
}

// Reply answers message replyTo in its thread. It goes to the original
// sender, or, when from is the original sender (following up on one's own
// message), to the original recipient. The subject gets one "Re: ". An
// agent answers only a message it sent or received; the operator, any.
func (mb *Mailbox) Reply(ctx context.Context, from string, replyTo int64, body string, urgent bool) (Message, error) {
	// Check what needs no lookup before taking the write lock.
	if err := cmp.Or(mb.validateSender(from), mb.validateContent("", body)); err != nil {
		return Message{}, fmt.Errorf("mailbox: reply: %w", err)
	}
	tx, err := mb.db.Begin(ctx)
	if err != nil {
		return Message{}, mb.wrap("reply", err)
	}
	defer tx.Rollback()
	orig, err := get(ctx, tx, replyTo)
	if err != nil {
		return Message{}, mb.wrap(fmt.Sprintf("reply to message %d", replyTo), err)
	}
	if from != Operator && from != orig.From && from != orig.To {
		// An agent answers its own mail only: a reply to a peer's message
		// went into the peer's thread, and what it returns (the subject,
		// who sent it) read the peer's mail for it. The operator reads all.
		return Message{}, fmt.Errorf("mailbox: reply: %w", invalid("reply_to", ErrNotFound,
			"message %d is not %s's mail: an agent answers only messages it sent or received", replyTo, from))
	}
	d := Draft{From: from, To: orig.From, Subject: replySubject(orig.Subject), Body: body, Urgent: urgent}
	if from == orig.From {
		d.To = orig.To
	}
	if err := mb.validateRecipient(d.From, d.To); err != nil {
		return Message{}, fmt.Errorf("mailbox: reply to message %d: %w", replyTo, err)
	}
	m := mb.draftMessage(d)
	m.ThreadID, m.ReplyTo = orig.ThreadID, orig.ID
	if m, err = mb.insert(ctx, tx.Tx, m); err != nil {
		return Message{}, mb.wrap("reply", err)
	}
	if err := tx.Commit(); err != nil {
		return Message{}, mb.wrap("reply", err)
	}
	return m, nil
}

func replySubject(s string) string {
	if len(s) >= 3 && strings.EqualFold(s[:3], "re:") {
		return s
	}
	if s == "" {
		return ""
	}
	return "Re: " + s
}

// Broadcast sends d to every known agent other than d.From, one row each, in
// one transaction: all of them or none. The copies share one thread.
// d.To must be empty.
func (mb *Mailbox) Broadcast(ctx context.Context, d Draft) ([]Message, error) {
	if d.To != "" {
		return nil, fmt.Errorf("mailbox: broadcast: %w", invalid("to", ErrUnknownRecipient,
			"a broadcast goes to every agent; it takes no recipient (got %q)", d.To))
	}
	if err := cmp.Or(mb.validateSender(d.From), mb.validateContent(d.Subject, d.Body)); err != nil {
		return nil, fmt.Errorf("mailbox: broadcast: %w", err)
	}
	known := mb.known.Load()
	if known == nil {
		return nil, fmt.Errorf("mailbox: broadcast: %w", invalid("to", ErrNoRecipients,
			"broadcast needs the list of agents, and none was configured"))
	}
	var to []string
	for _, a := range known.list {
		if a != d.From {
			to = append(to, a)
		}
	}
	if len(to) == 0 {
		return nil, fmt.Errorf("mailbox: broadcast: %w", invalid("to", ErrNoRecipients,
			"no agent other than %s to broadcast to", d.From))
	}
	tx, err := mb.db.Begin(ctx)
	if err != nil {
		return nil, mb.wrap("broadcast", err)
	}
	defer tx.Rollback()
	out := make([]Message, 0, len(to))
	tmpl := mb.draftMessage(d)
	for _, a := range to {
		m := tmpl
		m.To = a
		if len(out) > 0 {
			m.ThreadID = out[0].ID
		}
		if !d.At.IsZero() {
			// The copies commit together: one stored before means all were.
			got, ok, err := mb.sentBefore(ctx, tx.Tx, m)
			if err != nil {
				return nil, mb.wrap("broadcast", err)
			}
			if ok {
				out = append(out, got)
				continue
			}
		}
		if m, err = mb.insert(ctx, tx.Tx, m); err != nil {
			return nil, mb.wrap("broadcast", err)
		}
		out = append(out, m)
	}
	if err := tx.Commit(); err != nil {
		return nil, mb.wrap("broadcast", err)
	}
	return out, nil
}

func (mb *Mailbox) draftMessage(d Draft) Message {
	at := d.At
	if at.IsZero() {
		at = mb.db.Now()
	}
	return Message{
		From: d.From, To: d.To, Subject: d.Subject, Body: d.Body, Urgent: d.Urgent,
		CreatedAt: at.UTC().Truncate(time.Microsecond),
	}
}

// sentBeforeSQL reads the message an earlier attempt at a draft stored
// (Draft.At): by recipient, sender, time, subject and body.
const sentBeforeSQL = `SELECT ` + msgCols + ` FROM messages
	WHERE recipient = ? AND sender = ? AND created_at = ? AND subject = ? AND body = ? ORDER BY id LIMIT 1`

// sentBefore is the message an earlier attempt at sending m stored (Draft.At),
// if any: read in tx after the senders' turn is taken, so that an attempt
// still running on the server has committed or will find this one's.
// Delivered or not, as insertOnceSQL: a copy its recipient read already
// was sent, and sent again it would be read twice.
func (mb *Mailbox) sentBefore(ctx context.Context, tx *sql.Tx, m Message) (Message, bool, error) {
	if err := mb.db.LockMailTx(ctx, tx); err != nil {
		return Message{}, false, err
	}
	got, err := scanMessage(tx.QueryRowContext(ctx, sentBeforeSQL, m.To, m.From, m.CreatedAt.Format(store.TimeLayout), m.Subject, m.Body))
	if errors.Is(err, sql.ErrNoRows) {
		return Message{}, false, nil
	}
	return got, err == nil, err
}

// validate checks a draft completely, so that nothing is stored half-way.
func (mb *Mailbox) validate(d Draft) error {
	if err := mb.validateSender(d.From); err != nil {
		return err
	}
	if err := mb.validateRecipient(d.From, d.To); err != nil {
		return err
	}
	return mb.validateContent(d.Subject, d.Body)
}

// validateSender checks the sender's name, and, when the swarm's agents
// are known, that it is one of them or the operator: mail from nobody of
// the swarm could not be answered (a reply to it is refused).
func (mb *Mailbox) validateSender(from string) error {
	known := mb.known.Load()
	switch {
	case from == "":
		return invalid("from", store.ErrInvalidName, "no sender (set SWARM_AGENT_ID, or send as %s)", Operator)
	case !validName(from):
		return invalid("from", store.ErrInvalidName, "sender %q is not a valid agent name (want %s)", from, agent.NamePattern)
	case known != nil && !known.agents[from]:
		return invalid("from", ErrUnknownSender, "unknown sender %q (known: %s)", from, strings.Join(append(known.list[:len(known.list):len(known.list)], Operator), ", "))
	}
	return nil
}

func (mb *Mailbox) validateContent(subject, body string) error {
	switch {
	case len(subject) > maxSubjectBytes:
		return invalid("subject", ErrTooLarge, "message subject is %d bytes, over the %d-byte limit", len(subject), maxSubjectBytes)
	case strings.TrimSpace(body) == "":
		return invalid("body", ErrEmptyBody, "message body is empty")
	case len(body) > mb.maxBody:
		return invalid("body", ErrTooLarge, "message body is %d bytes, over the %d-byte limit (mailbox.max_body)", len(body), mb.maxBody)
	}
	return nil
}

func (mb *Mailbox) validateRecipient(from, to string) error {
	known := mb.known.Load()
	switch {
	case to == "":
		return invalid("to", ErrUnknownRecipient, "no recipient")
	case known != nil && !known.agents[to]:
		return invalid("to", ErrUnknownRecipient, "unknown recipient %q (known: %s)", to, strings.Join(append(known.list[:len(known.list):len(known.list)], Operator), ", "))
	case !validName(to):
		return invalid("to", ErrUnknownRecipient, "recipient %q is not a valid agent name", to)
	case to == from:
		return invalid("to", ErrSelfSend, "%s cannot send a message to itself", from)
	}
	return nil
}

// inboxAllSQL is an agent's every message, in id order: its pending mail
// and its delivered mail, each through its partial index (messages_pending,
// messages_delivered), not a read of every message ever sent.
const inboxAllSQL = `SELECT ` + msgCols + ` FROM messages WHERE recipient = ? AND delivered_at IS NULL
	UNION ALL SELECT ` + msgCols + ` FROM messages WHERE recipient = ? AND delivered_at IS NOT NULL ORDER BY id`

// Inbox lists the agent's pending messages (all its messages if all), in id
// order. It acknowledges nothing: see Read.
func (mb *Mailbox) Inbox(ctx context.Context, agent string, all bool) ([]Message, error) {
	if !validName(agent) {
		return nil, fmt.Errorf("mailbox: inbox: %w", invalid("agent", store.ErrInvalidName, "%q is not a valid agent name", agent))
	}
	q, args := `SELECT `+msgCols+` FROM messages WHERE recipient = ? AND delivered_at IS NULL ORDER BY id`, []any{agent}
	if all {
		q, args = inboxAllSQL, []any{agent, agent}
	}
	ms, err := queryMessages(ctx, mb.db.ReadSQL(), q, args...)
	if err != nil {
		return nil, mb.wrap("inbox", err)
	}
	return ms, nil
}

// Get returns one message, or an error matching ErrNotFound.
func (mb *Mailbox) Get(ctx context.Context, id int64) (Message, error) {
	m, err := get(ctx, mb.db.ReadSQL(), id)
	if err != nil {
		return Message{}, mb.wrap(fmt.Sprintf("get message %d", id), err)
	}
	return m, nil
}

func get(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, id int64) (Message, error) {
	m, err := scanMessage(q.QueryRowContext(ctx, `SELECT `+msgCols+` FROM messages WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Message{}, ErrNotFound
	}
	return m, err
}

// ConsumeForPrompt claims the agent's pending messages for sessionID's
// prompt and returns them, urgent first, then by id. Claiming is not
// delivering: the messages stay pending until Ack (the session completed) or
// Read acknowledges them, so mail a session never finished with is shown
// again (with Message.ShownNote saying why). If the session never starts,
// Unconsume(sessionID) drops the claim.
//
// With no pending mail, the common case, it writes nothing.
func (mb *Mailbox) ConsumeForPrompt(ctx context.Context, agent, sessionID string) ([]Message, error) {
	if !validName(agent) {
		return nil, fmt.Errorf("mailbox: consume: %w", invalid("agent", store.ErrInvalidName, "%q is not a valid agent name", agent))
	}
	if sessionID == "" {
		return nil, fmt.Errorf("mailbox: consume: %w", invalid("session", store.ErrInvalidName, "no session id"))
	}
	if err := mb.db.Check(); err != nil {
		return nil, mb.wrap("consume", err)
	}
	var any bool
	if err := mb.db.ReadSQL().QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM messages
		WHERE recipient = ? AND delivered_at IS NULL)`, agent).Scan(&any); err != nil {
		return nil, mb.wrap("consume", err)
	}
	if !any {
		// Mail committed after this read was not claimed, so it is newer than
		// the prompt's watermark: an urgent one still interrupts.
		return nil, nil
	}
	tx, err := mb.db.Begin(ctx)
	if err != nil {
		return nil, mb.wrap("consume", err)
	}
	defer tx.Rollback()
	// Only while this daemon holds the agent's lease: a daemon that lost
	// it (paused past lease_timeout) would take the mail a session of the
	// agent's new daemon was shown, which that session's end could then
	// not acknowledge (shown again).
	if err := mb.db.FenceTx(ctx, tx.Tx, agent); err != nil {
		return nil, mb.wrap("consume", err)
	}
	ms, err := queryMessages(ctx, tx, `UPDATE messages SET claimed_session = ?
		WHERE recipient = ? AND delivered_at IS NULL RETURNING `+msgCols, sessionID, agent)
	if err != nil {
		return nil, mb.wrap("consume", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, mb.wrap("consume", err)
	}
	// RETURNING has no ORDER BY.
	slices.SortFunc(ms, func(a, b Message) int {
		if a.Urgent != b.Urgent {
			if a.Urgent {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return ms, nil
}

// Unconsume drops sessionID's claim on the messages its prompt carried. Call
// it for a session that never started: no session saw them, so they are
// pending as before, with no note. It returns how many claims it dropped.
func (mb *Mailbox) Unconsume(ctx context.Context, sessionID string) (int, error) {
	if sessionID == "" {
		return 0, fmt.Errorf("mailbox: unconsume: %w", invalid("session", store.ErrInvalidName, "no session id"))
	}
	return mb.db.ExecCount(ctx, "unconsume", unconsumeSQL, sessionID)
}

// UnconsumeTx is Unconsume in tx: with the close of the session's row
// (package settle).
func (mb *Mailbox) UnconsumeTx(ctx context.Context, tx *sql.Tx, sessionID string) (int, error) {
	if sessionID == "" {
		return 0, fmt.Errorf("mailbox: unconsume: %w", invalid("session", store.ErrInvalidName, "no session id"))
	}
	return mb.txCount(ctx, tx, "unconsume", unconsumeSQL, sessionID)
}

const unconsumeSQL = `UPDATE messages SET claimed_session = NULL WHERE claimed_session = ? AND delivered_at IS NULL`

// Ack acknowledges the messages s's prompt carried: session s completed
// (s.SessionID, Agent, Seq, Started and Ended are used). In the same
// transaction it records the session as ended with store.OutcomeSuccess, unless its
// end is recorded already, so that a crash can never leave mail acknowledged
// by a session that restart recovery then closes as orphaned, nor a completed
// session whose mail is shown again. The Journal's later end record fills in
// the rest. It returns how many messages it acknowledged.
func (mb *Mailbox) Ack(ctx context.Context, s store.SessionRecord) (int, error) {
	if s.SessionID == "" || s.Ended == nil {
		return 0, fmt.Errorf("mailbox: ack: %w", invalid("session", store.ErrInvalidName, "no session id or end time"))
	}
	tx, err := mb.db.Begin(ctx)
	if err != nil {
		return 0, mb.wrap("ack", err)
	}
	defer tx.Rollback()
	ended := store.FormatTime(*s.Ended)
	res, err := tx.ExecContext(ctx, `UPDATE messages SET delivered_at = ?, acked_by = ?
		WHERE claimed_session = ? AND delivered_at IS NULL`, ended, AckSession, s.SessionID)
	if err != nil {
		return 0, mb.wrap("ack", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, mb.wrap("ack", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO sessions (session_id, agent, seq, started_at, ended_at, outcome)
		VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (session_id) DO UPDATE SET ended_at = excluded.ended_at, outcome = excluded.outcome
		WHERE sessions.ended_at IS NULL`,
		s.SessionID, s.Agent, int64(s.Seq), store.FormatTime(s.Started), ended, store.OutcomeSuccess); err != nil {
		return 0, mb.wrap("ack", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, mb.wrap("ack", err)
	}
	return int(n), nil
}

// AckTx acknowledges, in the caller's transaction (a session's
// settlement, which records the session's end in it too), the messages
// sessionID's prompt carried: the session completed at ended. Only that
// session's claims are acknowledged: a message shown to a later session was
// claimed by it, and is not this one's to acknowledge.
func (mb *Mailbox) AckTx(ctx context.Context, tx *sql.Tx, sessionID string, ended time.Time) (int, error) {
	if sessionID == "" {
		return 0, fmt.Errorf("mailbox: ack: %w", invalid("session", store.ErrInvalidName, "no session id"))
	}
	return mb.txCount(ctx, tx, "ack", `UPDATE messages SET delivered_at = ?, acked_by = ?
		WHERE claimed_session = ? AND delivered_at IS NULL`, store.FormatTime(ended), AckSession, sessionID)
}

// UnackTx is Unack in the caller's transaction.
func (mb *Mailbox) UnackTx(ctx context.Context, tx *sql.Tx, sessionID, note string) (int, error) {
	if sessionID == "" {
		return 0, fmt.Errorf("mailbox: unack: %w", invalid("session", store.ErrInvalidName, "no session id"))
	}
	return mb.txCount(ctx, tx, "unack", `UPDATE messages SET shown_note = ? WHERE claimed_session = ? AND delivered_at IS NULL`, note, sessionID)
}

// txCount runs one statement in tx and returns the rows it changed.
func (mb *Mailbox) txCount(ctx context.Context, tx *sql.Tx, op, query string, args ...any) (int, error) {
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, mb.wrap(op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, mb.wrap(op, err)
	}
	return int(n), nil
}

// Unack records why sessionID did not acknowledge the messages its prompt
// carried (it was interrupted, failed, timed out, ...). They are pending
// already; the note is what the next prompt tells the agent about them.
func (mb *Mailbox) Unack(ctx context.Context, sessionID, note string) (int, error) {
	if sessionID == "" {
		return 0, fmt.Errorf("mailbox: unack: %w", invalid("session", store.ErrInvalidName, "no session id"))
	}
	return mb.db.ExecCount(ctx, "unack",
		`UPDATE messages SET shown_note = ? WHERE claimed_session = ? AND delivered_at IS NULL`, note, sessionID)
}

// Read returns message id and, when reader is its recipient, acknowledges it
// (AckRead): the agent has seen it, so it is not shown in a prompt again.
func (mb *Mailbox) Read(ctx context.Context, reader string, id int64) (Message, error) {
	m, err := mb.Get(ctx, id)
	if err != nil || m.To != reader || m.DeliveredAt != nil {
		return m, err
	}
	if err := mb.db.Check(); err != nil {
		return Message{}, mb.wrap(fmt.Sprintf("read message %d", id), err)
	}
	now := mb.db.Now().UTC().Truncate(time.Microsecond)
	if err := mb.db.Write(ctx, func(w *sql.DB) error {
		_, err := w.ExecContext(ctx, `UPDATE messages SET delivered_at = ?, acked_by = ?
		WHERE id = ? AND delivered_at IS NULL`, now.Format(store.TimeLayout), AckRead, id)
		return err
	}); err != nil {
		return Message{}, mb.wrap(fmt.Sprintf("read message %d", id), err)
	}
	m.DeliveredAt, m.AckedBy = &now, AckRead
	return m, nil
}

// execCount runs one write statement and returns the rows it changed.

// PendingUrgent lists pending urgent messages with id > afterID that no
// prompt has claimed yet, for any recipient, in id order. Ids become visible in increasing order, so a
// caller that remembers the largest id it saw misses none.
func (mb *Mailbox) PendingUrgent(ctx context.Context, afterID int64) ([]Message, error) {
	ms, err := queryMessages(ctx, mb.db.ReadSQL(), `SELECT `+msgCols+` FROM messages
		WHERE delivered_at IS NULL AND urgency = 'urgent' AND id > ? AND claimed_session IS NULL ORDER BY id`, afterID)
	if err != nil {
		return nil, mb.wrap("pending urgent", err)
	}
	return ms, nil
}

// PendingCounts is the number of pending messages per recipient; recipients
// with none are absent.
func (mb *Mailbox) PendingCounts(ctx context.Context) (map[string]int, error) {
	rows, err := mb.db.ReadSQL().QueryContext(ctx,
		`SELECT recipient, COUNT(*) FROM messages WHERE delivered_at IS NULL GROUP BY recipient`)
	if err != nil {
		return nil, mb.wrap("pending counts", err)
	}
	defer rows.Close()
	out := make(map[string]int)
	for rows.Next() {
		var r string
		var n int
		if err := rows.Scan(&r, &n); err != nil {
			return nil, mb.wrap("pending counts", err)
		}
		out[r] = n
	}
	if err := rows.Err(); err != nil {
		return nil, mb.wrap("pending counts", err)
	}
	return out, nil
}

func queryMessages(ctx context.Context, q store.Querier, query string, args ...any) ([]Message, error) {
	return store.QueryAll(ctx, q, scanMessage, query, args...)
}

func scanMessage(s store.Scanner) (Message, error) {
	var (
		m                 Message
		replyTo           sql.NullInt64
		urg, created      string
		delivered, claimd sql.NullString
		note, ackedBy     sql.NullString
	)
	if err := s.Scan(&m.ID, &m.ThreadID, &replyTo, &m.From, &m.To, &m.Subject, &m.Body,
		&urg, &created, &delivered, &claimd, &note, &ackedBy); err != nil {
		return Message{}, err
	}
	m.ReplyTo, m.Urgent, m.ClaimedSession = replyTo.Int64, urg == "urgent", claimd.String
	m.ShownNote, m.AckedBy = note.String, ackedBy.String
	var err error
	if m.CreatedAt, err = time.Parse(store.TimeLayout, created); err != nil {
		return Message{}, fmt.Errorf("message %d: created_at: %w", m.ID, err)
	}
	if m.DeliveredAt, err = store.ParseNullTime(delivered); err != nil {
		return Message{}, fmt.Errorf("message %d: delivered_at: %w", m.ID, err)
	}
	return m, nil
}

func urgency(urgent bool) string {
	if urgent {
		return "urgent"
	}
	return "normal"
}

// NewSince counts the messages with id > afterID by urgency and returns the
// highest id seen (afterID when there are none): how the daemon counts mail
// that other processes sent.
func (mb *Mailbox) NewSince(ctx context.Context, afterID int64) (normal, urgent int, maxID int64, err error) {
	maxID = afterID
	err = mb.db.ReadSQL().QueryRowContext(ctx, `SELECT
			COUNT(CASE WHEN urgency = 'normal' THEN 1 END), COUNT(CASE WHEN urgency = 'urgent' THEN 1 END), COALESCE(MAX(id), ?)
		FROM messages WHERE id > ?`, afterID, afterID).Scan(&normal, &urgent, &maxID)
	if err != nil {
		return 0, 0, afterID, mb.wrap("new since", err)
	}
	return normal, urgent, maxID, nil
}

// RecipientsSince lists, once each, the recipients of the messages with id >
// afterID, and the newest id (afterID when there are none): what the router
// needs to wake idle agents that got mail.
func (mb *Mailbox) RecipientsSince(ctx context.Context, afterID int64) ([]string, int64, error) {
	rows, err := mb.db.ReadSQL().QueryContext(ctx, `SELECT recipient, MAX(id) FROM messages WHERE id > ? GROUP BY recipient`, afterID)
	if err != nil {
		return nil, afterID, mb.wrap("recipients since", err)
	}
	defer rows.Close()
	var out []string
	maxID := afterID
	for rows.Next() {
		var to string
		var id int64
		if err := rows.Scan(&to, &id); err != nil {
			return nil, afterID, mb.wrap("recipients since", err)
		}
		out = append(out, to)
		maxID = max(maxID, id)
	}
	if err := rows.Err(); err != nil {
		return nil, afterID, mb.wrap("recipients since", err)
	}
	return out, maxID, nil
}

// ReleaseUnstartedClaims drops the claims of sessions that have no sessions
// row: the daemon died between building the prompt and starting the
// session, so no session saw that mail. A session whose start the journal
// had not yet written is counted as unstarted too, which shows its mail again
// rather than never. (Mail delivered at claim time by a swarmd from before
// acknowledgements, acked_by NULL, is made pending again as that version did.)
// Call it at daemon start, before any agent runs. It returns how many
// messages it released.
//
// agents scopes it to those recipients (nil: every recipient, for a store
// no other daemon shares, whose sessions may be starting right now).
func (mb *Mailbox) ReleaseUnstartedClaims(ctx context.Context, agents []string) (int, error) {
	scope, args := store.AndIn("recipient", agents)
	return mb.db.ExecCount(ctx, "release unstarted claims", releaseUnstartedSQL+scope, args...)
}

// releaseUnstartedSQL reads the claims not acknowledged
// (messages_claimed_unacked), not every message ever claimed.
const releaseUnstartedSQL = `UPDATE messages
		SET delivered_at = IIF(acked_by IS NULL, NULL, delivered_at), claimed_session = NULL
		WHERE claimed_session IS NOT NULL AND acked_by IS NULL
		  AND NOT EXISTS (SELECT 1 FROM sessions WHERE session_id = messages.claimed_session)`
