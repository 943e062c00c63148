package cli

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/proc"
)

// TestMailSendInboxRead: the operator's message reaches alice's inbox
// (bob's stays empty); reading it shows it whole and delivers it, so that
// the pending inbox is empty again.
func TestMailSendInboxRead(t *testing.T) {
	ctx := context.Background()
	s := newSwarm(t)
	o, out := s.as("operator", "")
	if err := mailSendRun(ctx, &mailSendOptions{dbOptions: o, To: "alice", Subject: "the parser", Body: "look at\nline 12"}); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "sent #1 to alice\n"; got != want {
		t.Errorf("mail send printed %q, want %q", got, want)
	}

	o, out = s.as("bob", "")
	if err := mailInboxRun(ctx, &mailInboxOptions{dbOptions: o}); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "no mail\n"; got != want {
		t.Errorf("bob's inbox %q, want %q", got, want)
	}

	o, out = s.as("alice", "")
	if err := mailInboxRun(ctx, &mailInboxOptions{dbOptions: o}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !slices.Equal(strings.Fields(lines[0]), []string{"ID", "FROM", "URGENT", "SENT", "SUBJECT"}) {
		t.Fatalf("alice's inbox:\n%s", out)
	}
	if f := strings.Fields(lines[1]); f[0] != "1" || f[1] != "operator" || !strings.HasSuffix(lines[1], "the parser") {
		t.Errorf("alice's inbox row %q, want #1 from operator, subject last", lines[1])
	}

	o, out = s.as("alice", "")
	if err := mailReadRun(ctx, &mailReadOptions{dbOptions: o, ID: "#1"}); err != nil {
		t.Fatal(err)
	}
	head, rest, _ := strings.Cut(out.String(), "\n")
	if !strings.HasPrefix(head, "#1 from operator to alice, thread #1, ") || rest != "Subject: the parser\n\nlook at\nline 12\n" {
		t.Errorf("mail read printed:\n%s", out)
	}

	o, out = s.as("alice", "")
	if err := mailInboxRun(ctx, &mailInboxOptions{dbOptions: o}); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "no mail\n"; got != want {
		t.Errorf("alice's inbox after reading %q, want %q", got, want)
	}
	o, out = s.as("alice", "")
	o.JSON = true
	if err := mailInboxRun(ctx, &mailInboxOptions{dbOptions: o, All: true}); err != nil {
		t.Fatal(err)
	}
	var all []MessageJSON
	if err := json.Unmarshal(out.Bytes(), &all); err != nil {
		t.Fatalf("inbox --all --json: %v\n%s", err, out)
	}
	if len(all) != 1 || all[0].DeliveredAt == nil {
		t.Errorf("inbox --all: %+v, want message 1, delivered", all)
	}
}

// TestMailReplyAndBroadcast: a reply from standard input goes to the
// sender in the message's thread; --all reaches every other agent.
func TestMailReplyAndBroadcast(t *testing.T) {
	ctx := context.Background()
	s := newSwarm(t)
	o, _ := s.as("operator", "")
	if err := mailSendRun(ctx, &mailSendOptions{dbOptions: o, To: "alice", Body: "status?"}); err != nil {
		t.Fatal(err)
	}
	o, out := s.as("alice", "almost done\n")
	if err := mailReplyRun(ctx, &mailReplyOptions{dbOptions: o, ID: "1", Body: "-"}); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "sent #2 to operator (thread #1)\n"; got != want {
		t.Errorf("mail reply printed %q, want %q", got, want)
	}
	o, out = s.as("operator", "")
	o.JSON = true
	if err := mailReadRun(ctx, &mailReadOptions{dbOptions: o, ID: "2"}); err != nil {
		t.Fatal(err)
	}
	var m MessageJSON
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatalf("mail read --json: %v\n%s", err, out)
	}
	if m.Body != "almost done\n" || m.ReplyTo != 1 || m.ThreadID != 1 || m.From != "alice" {
		t.Errorf("the reply: %+v", m)
	}

	// Inside its session, bob may not read alice's mail, whatever it claims.
	o, _ = s.inSession("bob", "")
	wantUsage(t, mailReadRun(ctx, &mailReadOptions{dbOptions: o, ID: "2"}), "mail read: message #2 is operator's mail, not bob's")
	o, _ = s.inSession("bob", "")
	o.IO.Getenv = func(k string) string {
		if k == "SWARM_AGENT_ID" {
			return "alice"
		}
		return map[string]string{"SWARM_DB_PATH": s.path, proc.MarkerEnv: "swarmd\x1ftest\x1fbob-1-0123456789ab"}[k]
	}
	wantUsage(t, mailReadRun(ctx, &mailReadOptions{dbOptions: o, ID: "2"}),
		"mail: SWARM_AGENT_ID is alice, but this session is bob's")

	o, out = s.as("alice", "")
	if err := mailSendRun(ctx, &mailSendOptions{dbOptions: o, All: true, Body: "rebased main"}); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "sent #3 to bob\n"; got != want {
		t.Errorf("mail send --all printed %q, want %q", got, want)
	}
}

// TestMailRefusesBadInput: each mistake is a usage error (exit 2) of one
// line that says what was wrong, and nothing is sent.
func TestMailRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	s := newSwarm(t)
	o, _ := s.as("operator", "")
	wantUsage(t, mailSendRun(ctx, &mailSendOptions{dbOptions: o, Body: "hi"}),
		"mail send: give exactly one of --to NAME or --all")
	wantUsage(t, mailSendRun(ctx, &mailSendOptions{dbOptions: o, To: "alice", All: true, Body: "hi"}),
		"mail send: give exactly one of --to NAME or --all")
	wantUsage(t, mailReadRun(ctx, &mailReadOptions{dbOptions: o, ID: "twelve"}),
		`mail: message id "twelve": want a positive number such as 12`)
	wantUsage(t, mailReplyRun(ctx, &mailReplyOptions{dbOptions: o, ID: "-3", Body: "x"}),
		`mail: message id "-3": want a positive number such as 12`)

	err := mailSendRun(ctx, &mailSendOptions{dbOptions: o, To: "zed", Body: "hi"})
	if err == nil || !strings.HasPrefix(err.Error(), "mail send: ") || !strings.Contains(err.Error(), `"zed"`) {
		t.Errorf("mail to an unknown agent: %v, want a mail send error naming zed", err)
	}
	wantUsage(t, err, err.Error())
	err = mailReadRun(ctx, &mailReadOptions{dbOptions: o, ID: "99"})
	if err == nil || !strings.HasPrefix(err.Error(), "mail read: ") || !strings.Contains(err.Error(), "99") {
		t.Errorf("reading an unknown message: %v, want a mail read error naming 99", err)
	}
	wantUsage(t, err, err.Error())

	o, out := s.as("alice", "")
	if err := mailInboxRun(ctx, &mailInboxOptions{dbOptions: o, All: true}); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "no mail\n"; got != want {
		t.Errorf("after the refused sends, alice's inbox %q, want %q", got, want)
	}
}

// TestMailCommandsFillTheirOptions: BODY absent or "-" means standard
// input; a BODY given is the body.
func TestMailCommandsFillTheirOptions(t *testing.T) {
	s := newSwarm(t)
	for _, c := range []struct {
		args []string
		want mailSendOptions
	}{
		{[]string{"--to", "bob"}, mailSendOptions{To: "bob", Body: "-"}},
		{[]string{"--all", "--urgent", "--subject", "s", "-"}, mailSendOptions{All: true, Urgent: true, Subject: "s", Body: "-"}},
		{[]string{"--to", "bob", ""}, mailSendOptions{To: "bob", Body: ""}},
	} {
		o, _ := s.as("operator", "")
		var got *mailSendOptions
		cmd := newMailSendCmd(o, func(_ context.Context, opts *mailSendOptions) error { got = opts; return nil })
		cmd.SetArgs(c.args)
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		if got.To != c.want.To || got.All != c.want.All || got.Urgent != c.want.Urgent || got.Subject != c.want.Subject || got.Body != c.want.Body {
			t.Errorf("mail send %q: options %+v, want %+v", c.args, *got, c.want)
		}
	}
	o, _ := s.as("operator", "")
	var reply *mailReplyOptions
	cmd := newMailReplyCmd(o, func(_ context.Context, opts *mailReplyOptions) error { reply = opts; return nil })
	cmd.SetArgs([]string{"#4", "--urgent"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if reply.ID != "#4" || reply.Body != "-" || !reply.Urgent {
		t.Errorf("mail reply options %+v", *reply)
	}
}
