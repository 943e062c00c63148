package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/store"
)

// mailMain is `swarmd mail …`: a short-lived process an agent runs inside its
// session. It opens swarm.db and nothing else of the daemon's machinery.
type mailMain struct {
	s          streams
	configPath string
	jsonOut    bool
	storeWait  time.Duration
}

func newMailCommand(s streams) *cobra.Command {
	m := &mailMain{s: s}
	cmd := &cobra.Command{
		Use:   "mail",
		Short: "Send and read mail between agents",
		Long: `Send and read swarm mail. Inside a backend session SWARM_AGENT_ID and SWARM_DB_PATH make these
commands act as that agent with no flags (with a shared store the session has no SWARM_DB_PATH: they
run through the daemon's control socket); outside one the sender is "operator" and the database is
found through --config.`,
	}
	cmd.PersistentFlags().StringVarP(&m.configPath, "config", "c", "swarmd.yaml", "config file (used when SWARM_DB_PATH is not set)")
	cmd.PersistentFlags().BoolVar(&m.jsonOut, "json", false, "print JSON for scripts")
	cmd.PersistentFlags().DurationVar(&m.storeWait, "store-wait", defaultStoreWait, "how long to keep retrying a write the store refuses as busy or unreachable before giving up, saying nothing was recorded (one try may wait up to 10s for SQLite's lock)")

	var to, subject string
	var all, urgent bool
	send := &cobra.Command{
		Use:   "send (--to NAME | --all) [--urgent] [--subject S] [BODY | -]",
		Short: "Send a message (BODY '-' or absent reads standard input)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (to == "") == !all {
				return usagef("mail send: give exactly one of --to NAME or --all")
			}
			return m.send(cmd.Context(), to, all, urgent, subject, args)
		},
	}
	send.Flags().StringVar(&to, "to", "", "recipient agent")
	send.Flags().BoolVar(&all, "all", false, "send to every other agent")
	send.Flags().BoolVar(&urgent, "urgent", false, "interrupt the recipient's running session")
	send.Flags().StringVar(&subject, "subject", "", "subject line")

	var inboxAll bool
	inbox := &cobra.Command{
		Use:   "inbox",
		Short: "List your pending mail (marks nothing)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return m.inbox(cmd.Context(), inboxAll) },
	}
	inbox.Flags().BoolVar(&inboxAll, "all", false, "include delivered mail")

	read := &cobra.Command{
		Use:   "read ID",
		Short: "Show one message",
		Args:  cobra.ExactArgs(1),
		RunE:  func(cmd *cobra.Command, args []string) error { return m.read(cmd.Context(), args[0]) },
	}

	var replyUrgent bool
	reply := &cobra.Command{
		Use:   "reply ID [BODY | -]",
		Short: "Answer a message in its thread",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return m.reply(cmd.Context(), args[0], replyUrgent, args[1:])
		},
	}
	reply.Flags().BoolVar(&replyUrgent, "urgent", false, "interrupt the recipient's running session")

	cmd.AddCommand(send, inbox, read, reply)
	return cmd
}

// identity is who acts (whoCalls); inSession reports that the process tree
// proves a session.
func (m *mailMain) identity() (who string, inSession bool, err error) {
	c, err := whoCalls(m.s.getenv, "mail")
	return c.name, c.inSession, err
}

// open finds swarm.db: SWARM_DB_PATH inside a session, else the config.
// The mailbox is closed before the database by done.
func (m *mailMain) open(ctx context.Context) (mb *mailbox.Mailbox, done func(), err error) {
	db, err := openSwarmDB(ctx, m.s, m.configPath, "mail")
	if err != nil {
		return nil, nil, err
	}
	if mb, err = mailbox.New(ctx, db.DB, db.mail); err != nil {
		db.Close()
		return nil, nil, err
	}
	return mb, func() { mb.Close(); db.Close() }, nil
}

// body takes BODY from args, or standard input for "-" or no argument.
func (m *mailMain) body(args []string) (string, error) {
	if len(args) == 1 && args[0] != "-" {
		return args[0], nil
	}
	// Read one byte past any sane limit so an oversize body is refused by the
	// mailbox with its clear error instead of being silently cut here.
	b, err := io.ReadAll(io.LimitReader(m.s.in, 64<<20))
	if err != nil {
		return "", fmt.Errorf("mail: read body from stdin: %w", err)
	}
	return string(b), nil
}

func (m *mailMain) send(ctx context.Context, to string, all, urgent bool, subject string, args []string) error {
	body, err := m.body(args)
	if err != nil {
		return err
	}
	db, done, err := m.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	from, _, err := m.identity()
	if err != nil {
		return err
	}
	d := mailbox.Draft{From: from, To: to, Subject: subject, Body: body, Urgent: urgent}
	var sent []mailbox.Message
	err = waitStore(ctx, db.Store(), m.storeWait, "mail send", func(ctx context.Context) error {
		var err error
		if all {
			sent, err = db.Broadcast(ctx, d)
		} else {
			var msg mailbox.Message
			msg, err = db.Send(ctx, d)
			sent = []mailbox.Message{msg}
		}
		return err
	})
	if err != nil {
		return mailErr("send", err)
	}
	if m.jsonOut {
		return m.writeJSON(toJSONList(sent))
	}
	for _, s := range sent {
		fmt.Fprintf(m.s.out, "sent #%d to %s\n", s.ID, s.To)
	}
	return nil
}

func (m *mailMain) inbox(ctx context.Context, all bool) error {
	db, done, err := m.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	who, _, err := m.identity()
	if err != nil {
		return err
	}
	ms, err := db.Inbox(ctx, who, all)
	if err != nil {
		return mailErr("inbox", err)
	}
	if m.jsonOut {
		return m.writeJSON(toJSONList(ms))
	}
	if len(ms) == 0 {
		fmt.Fprintln(m.s.out, "no mail")
		return nil
	}
	tw := tabwriter.NewWriter(m.s.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tFROM\tURGENT\tSENT\tSUBJECT")
	for _, msg := range ms {
		urg := ""
		if msg.Urgent {
			urg = "yes"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", msg.ID, msg.From, urg, msg.CreatedAt.Local().Format(time.DateTime), printable(subjectOf(msg), false))
	}
	return tw.Flush()
}

func (m *mailMain) read(ctx context.Context, arg string) error {
	id, err := parseID(arg)
	if err != nil {
		return err
	}
	db, done, err := m.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	who, inSession, err := m.identity()
	if err != nil {
		return err
	}
	if inSession {
		// An agent reads its own mail and mail it sent, nobody else's.
		msg, err := db.Get(ctx, id)
		if err != nil {
			return mailErr("read", err)
		}
		if msg.To != who && msg.From != who {
			return usagef("mail read: message #%d is %s's mail, not %s's", id, msg.To, who)
		}
	}
	// Reading one's own message acknowledges it: no prompt shows it again.
	var msg mailbox.Message
	err = waitStore(ctx, db.Store(), m.storeWait, "mail read", func(ctx context.Context) error {
		var err error
		msg, err = db.Read(ctx, who, id)
		return err
	})
	if err != nil {
		return mailErr("read", err)
	}
	if m.jsonOut {
		return m.writeJSON(toJSON(msg))
	}
	fmt.Fprintf(m.s.out, "#%d from %s to %s, thread #%d, %s\n", msg.ID, msg.From, msg.To, msg.ThreadID, msg.CreatedAt.Local().Format(time.DateTime))
	fmt.Fprintf(m.s.out, "Subject: %s\n\n%s\n", printable(subjectOf(msg), false), printable(strings.TrimRight(msg.Body, "\n"), true))
	return nil
}

func (m *mailMain) reply(ctx context.Context, arg string, urgent bool, rest []string) error {
	id, err := parseID(arg)
	if err != nil {
		return err
	}
	body, err := m.body(rest)
	if err != nil {
		return err
	}
	db, done, err := m.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	who, _, err := m.identity()
	if err != nil {
		return err
	}
	msg, err := db.Reply(ctx, who, id, body, urgent)
	if err != nil {
		return mailErr("reply", err)
	}
	if m.jsonOut {
		return m.writeJSON(toJSON(msg))
	}
	fmt.Fprintf(m.s.out, "sent #%d to %s (thread #%d)\n", msg.ID, msg.To, msg.ThreadID)
	return nil
}

// jsonMessage is the stable JSON shape of a message for scripts.
type jsonMessage struct {
	ID          int64      `json:"id"`
	ThreadID    int64      `json:"thread_id"`
	ReplyTo     int64      `json:"reply_to,omitempty"`
	From        string     `json:"from"`
	To          string     `json:"to"`
	Subject     string     `json:"subject"`
	Body        string     `json:"body"`
	Urgent      bool       `json:"urgent"`
	CreatedAt   time.Time  `json:"created_at"`
	DeliveredAt *time.Time `json:"delivered_at,omitempty"`
}

func toJSON(m mailbox.Message) jsonMessage {
	return jsonMessage{ID: m.ID, ThreadID: m.ThreadID, ReplyTo: m.ReplyTo, From: m.From, To: m.To, Subject: m.Subject,
		Body: m.Body, Urgent: m.Urgent, CreatedAt: m.CreatedAt, DeliveredAt: m.DeliveredAt}
}

func toJSONList(ms []mailbox.Message) []jsonMessage {
	out := make([]jsonMessage, len(ms))
	for i, m := range ms {
		out[i] = toJSON(m)
	}
	return out
}

func (m *mailMain) writeJSON(v any) error { return printJSON(m.s.out, v) }

func parseID(s string) (int64, error) {
	id, err := strconv.ParseInt(strings.TrimPrefix(s, "#"), 10, 64)
	if err != nil || id <= 0 {
		return 0, usagef("mail: message id %q: want a positive number such as 12", s)
	}
	return id, nil
}

// mailErr makes the caller's mistakes (unknown recipient, oversize body,
// unknown id) usage errors, exit 2; anything else is a runtime failure.
func mailErr(op string, err error) error {
	var ve *store.ValidationError
	if errors.As(err, &ve) || errors.Is(err, mailbox.ErrNotFound) {
		return usagef("mail %s: %w", op, err)
	}
	return fmt.Errorf("mail %s: %w", op, err)
}

func subjectOf(m mailbox.Message) string {
	if m.Subject == "" {
		return "(no subject)"
	}
	return m.Subject
}

// printable makes text another agent wrote safe for a terminal: escape
// sequences (ESC, CSI and the other C0/C1 controls) are dropped, so mail
// cannot move the cursor, retitle the window or hide text. Line breaks and
// tabs survive only where multiline is set; elsewhere they become spaces.
func printable(s string, multiline bool) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			if multiline {
				return r
			}
			return ' '
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			return -1
		}
		return r
	}, s)
}
