package cli

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
	"github.com/swarmd/swarmd/internal/view"
)

// The mail commands (`swarmd mail …`) are short-lived processes an agent
// runs inside its session. They open swarm.db and nothing else of the
// daemon's machinery.

// NewMailCommand is `swarmd mail`.
func NewMailCommand(s Streams) *cobra.Command {
	o := &dbOptions{IO: s}
	cmd := &cobra.Command{
		Use:   "mail",
		Short: "Send and read mail between agents",
		Long: `Send and read swarm mail. Inside a backend session SWARM_AGENT_ID and SWARM_DB_PATH make these
commands act as that agent with no flags (with a shared store the session has no SWARM_DB_PATH: they
run through the daemon's control socket); outside one the sender is "operator" and the database is
found through --config.`,
	}
	o.addFlags(cmd, "print JSON for scripts")
	cmd.AddCommand(newMailSendCmd(o, nil), newMailInboxCmd(o, nil), newMailReadCmd(o, nil), newMailReplyCmd(o, nil))
	return cmd
}

// mailSendOptions are `swarmd mail send`'s.
type mailSendOptions struct {
	*dbOptions
	To      string // or All
	All     bool
	Urgent  bool
	Subject string
	Body    string // "-": standard input
}

// newMailSendCmd is `swarmd mail send`; runF (nil: mailSendRun) runs it.
func newMailSendCmd(o *dbOptions, runF func(context.Context, *mailSendOptions) error) *cobra.Command {
	opts := &mailSendOptions{dbOptions: o}
	cmd := &cobra.Command{
		Use:   "send (--to NAME | --all) [--urgent] [--subject S] [BODY | -]",
		Short: "Send a message (BODY '-' or absent reads standard input)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Body = bodyArg(args, 0)
			return orRun(runF, mailSendRun)(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.To, "to", "", "recipient agent")
	cmd.Flags().BoolVar(&opts.All, "all", false, "send to every other agent")
	cmd.Flags().BoolVar(&opts.Urgent, "urgent", false, "interrupt the recipient's running session")
	cmd.Flags().StringVar(&opts.Subject, "subject", "", "subject line")
	return cmd
}

func mailSendRun(ctx context.Context, opts *mailSendOptions) error {
	if (opts.To == "") == !opts.All {
		return usagef("mail send: give exactly one of --to NAME or --all")
	}
	body, err := mailBody(opts.dbOptions, opts.Body)
	if err != nil {
		return err
	}
	db, done, err := openMailbox(ctx, opts.dbOptions)
	if err != nil {
		return err
	}
	defer done()
	from, err := opts.whoCalls("mail")
	if err != nil {
		return err
	}
	// At, once for every attempt: an attempt whose commit's answer was
	// lost is found by the next, not sent twice.
	d := mailbox.Draft{From: from.name, To: opts.To, Subject: opts.Subject, Body: body, Urgent: opts.Urgent, At: time.Now()}
	var sent []mailbox.Message
	err = waitStore(ctx, db.Store(), opts.StoreWait, "mail send", func(ctx context.Context) error {
		var err error
		if opts.All {
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
	if opts.JSON {
		return opts.printJSON(toJSONList(sent))
	}
	for _, s := range sent {
		fmt.Fprintf(opts.IO.Out, "sent #%d to %s\n", s.ID, s.To)
		calmed(opts.IO.Err, s)
	}
	return nil
}

// calmed says so when urgent mail was stored as normal mail.
func calmed(w io.Writer, m mailbox.Message) {
	if m.Calmed {
		fmt.Fprintf(w, "swarmd: #%d is not urgent: %s had urgent mail from %s a short while ago (at most one every %v); it reads this at its next session\n",
			m.ID, m.To, m.From, mailbox.DefaultUrgentEvery)
	}
}

// mailInboxOptions are `swarmd mail inbox`'s.
type mailInboxOptions struct {
	*dbOptions
	All bool // delivered mail too
}

// newMailInboxCmd is `swarmd mail inbox`; runF (nil: mailInboxRun) runs it.
func newMailInboxCmd(o *dbOptions, runF func(context.Context, *mailInboxOptions) error) *cobra.Command {
	opts := &mailInboxOptions{dbOptions: o}
	cmd := &cobra.Command{
		Use:   "inbox",
		Short: "List your pending mail (marks nothing)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return orRun(runF, mailInboxRun)(cmd.Context(), opts) },
	}
	cmd.Flags().BoolVar(&opts.All, "all", false, "include delivered mail")
	return cmd
}

func mailInboxRun(ctx context.Context, opts *mailInboxOptions) error {
	db, done, err := openMailbox(ctx, opts.dbOptions)
	if err != nil {
		return err
	}
	defer done()
	who, err := opts.whoCalls("mail")
	if err != nil {
		return err
	}
	ms, err := db.Inbox(ctx, who.name, opts.All)
	if err != nil {
		return mailErr("inbox", err)
	}
	if opts.JSON {
		return opts.printJSON(toJSONList(ms))
	}
	out := opts.IO.Out
	if len(ms) == 0 {
		fmt.Fprintln(out, "no mail")
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
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

// mailReadOptions are `swarmd mail read`'s.
type mailReadOptions struct {
	*dbOptions
	ID string // as given: 12 or #12
}

// newMailReadCmd is `swarmd mail read`; runF (nil: mailReadRun) runs it.
func newMailReadCmd(o *dbOptions, runF func(context.Context, *mailReadOptions) error) *cobra.Command {
	opts := &mailReadOptions{dbOptions: o}
	return &cobra.Command{
		Use:   "read ID",
		Short: "Show one message",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			return orRun(runF, mailReadRun)(cmd.Context(), opts)
		},
	}
}

func mailReadRun(ctx context.Context, opts *mailReadOptions) error {
	id, err := parseID(opts.ID)
	if err != nil {
		return err
	}
	db, done, err := openMailbox(ctx, opts.dbOptions)
	if err != nil {
		return err
	}
	defer done()
	who, err := opts.whoCalls("mail")
	if err != nil {
		return err
	}
	if who.inSession {
		// An agent reads its own mail and mail it sent, nobody else's.
		msg, err := db.Get(ctx, id)
		if err != nil {
			return mailErr("read", err)
		}
		if msg.To != who.name && msg.From != who.name {
			return usagef("mail read: message #%d is %s's mail, not %s's", id, msg.To, who.name)
		}
	}
	// Reading one's own message acknowledges it: no prompt shows it again.
	var msg mailbox.Message
	err = waitStore(ctx, db.Store(), opts.StoreWait, "mail read", func(ctx context.Context) error {
		var err error
		msg, err = db.Read(ctx, who.name, id)
		return err
	})
	if err != nil {
		return mailErr("read", err)
	}
	if opts.JSON {
		return opts.printJSON(toJSON(msg))
	}
	out := opts.IO.Out
	fmt.Fprintf(out, "#%d from %s to %s, thread #%d, %s\n", msg.ID, msg.From, msg.To, msg.ThreadID, msg.CreatedAt.Local().Format(time.DateTime))
	fmt.Fprintf(out, "Subject: %s\n\n%s\n", printable(subjectOf(msg), false), printable(strings.TrimRight(msg.Body, "\n"), true))
	return nil
}

// mailReplyOptions are `swarmd mail reply`'s.
type mailReplyOptions struct {
	*dbOptions
	ID     string // the message answered, as given
	Body   string // "-": standard input
	Urgent bool
}

// newMailReplyCmd is `swarmd mail reply`; runF (nil: mailReplyRun) runs it.
func newMailReplyCmd(o *dbOptions, runF func(context.Context, *mailReplyOptions) error) *cobra.Command {
	opts := &mailReplyOptions{dbOptions: o}
	cmd := &cobra.Command{
		Use:   "reply ID [BODY | -]",
		Short: "Answer a message in its thread",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID, opts.Body = args[0], bodyArg(args, 1)
			return orRun(runF, mailReplyRun)(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.Urgent, "urgent", false, "interrupt the recipient's running session")
	return cmd
}

func mailReplyRun(ctx context.Context, opts *mailReplyOptions) error {
	id, err := parseID(opts.ID)
	if err != nil {
		return err
	}
	body, err := mailBody(opts.dbOptions, opts.Body)
	if err != nil {
		return err
	}
	db, done, err := openMailbox(ctx, opts.dbOptions)
	if err != nil {
		return err
	}
	defer done()
	who, err := opts.whoCalls("mail")
	if err != nil {
		return err
	}
	msg, err := db.Reply(ctx, who.name, id, body, opts.Urgent)
	if err != nil {
		return mailErr("reply", err)
	}
	if opts.JSON {
		return opts.printJSON(toJSON(msg))
	}
	fmt.Fprintf(opts.IO.Out, "sent #%d to %s (thread #%d)\n", msg.ID, msg.To, msg.ThreadID)
	calmed(opts.IO.Err, msg)
	return nil
}

// openMailbox finds swarm.db: SWARM_DB_PATH inside a session, else the
// config. done closes the mailbox, then the database.
func openMailbox(ctx context.Context, o *dbOptions) (mb *mailbox.Mailbox, done func(), err error) {
	db, err := o.open(ctx, "mail")
	if err != nil {
		return nil, nil, err
	}
	if mb, err = mailbox.New(ctx, db.DB, db.mail); err != nil {
		db.Close()
		return nil, nil, err
	}
	return mb, func() { mb.Close(); db.Close() }, nil
}

// maxStdinBody bounds a message body read from standard input: far past
// any sane mailbox limit, so that the mailbox refuses an oversize body
// with its clear error instead of it being cut here.
const maxStdinBody = 64<<20 - 1

// mailBody is body, or standard input for "-".
func mailBody(o *dbOptions, body string) (string, error) {
	if body != "-" {
		return body, nil
	}
	return readStdin(o.IO.In, maxStdinBody, "mail")
}

// MessageJSON is the stable JSON shape of a message for scripts.
type MessageJSON struct {
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

func toJSON(m mailbox.Message) MessageJSON {
	return MessageJSON{ID: m.ID, ThreadID: m.ThreadID, ReplyTo: m.ReplyTo, From: m.From, To: m.To, Subject: m.Subject,
		Body: m.Body, Urgent: m.Urgent, CreatedAt: m.CreatedAt, DeliveredAt: m.DeliveredAt}
}

func toJSONList(ms []mailbox.Message) []MessageJSON {
	out := make([]MessageJSON, len(ms))
	for i, m := range ms {
		out[i] = toJSON(m)
	}
	return out
}

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
		case view.TerminalControl(r):
			return -1
		}
		return r
	}, s)
}
