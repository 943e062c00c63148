package cli

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/swarmd/swarmd/internal/proc"
	"github.com/swarmd/swarmd/internal/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// swarm is a swarm.db made in a temp dir as the daemon makes it, and the
// environment a command finds it through (SWARM_DB_PATH, SWARM_AGENTS).
type swarm struct{ path string }

func newSwarm(t *testing.T) *swarm {
	t.Helper()
	path := filepath.Join(t.TempDir(), "swarm.db")
	db, err := store.Open(context.Background(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return &swarm{path: path}
}

// as is the options of a command run by who: "operator", or an agent that
// says so in SWARM_AGENT_ID (from session SWARM_SESSION_ID). stdin is its
// standard input; out collects its standard output.
func (s *swarm) as(who, stdin string) (o *dbOptions, out *bytes.Buffer) {
	env := map[string]string{"SWARM_DB_PATH": s.path, "SWARM_AGENTS": "alice,bob"}
	if who != "operator" {
		env["SWARM_AGENT_ID"], env["SWARM_SESSION_ID"] = who, who+"-1"
	}
	out = &bytes.Buffer{}
	return &dbOptions{
		IO:        Streams{In: strings.NewReader(stdin), Out: out, Err: &bytes.Buffer{}, Getenv: func(k string) string { return env[k] }},
		StoreWait: 5 * time.Second,
	}, out
}

// wantUsage checks that err is a usage error (exit 2) of exactly one line,
// want.
func wantUsage(t *testing.T, err error, want string) {
	t.Helper()
	var ue UsageError
	switch {
	case err == nil:
		t.Errorf("no error, want %q", want)
	case !errors.As(err, &ue):
		t.Errorf("error %q is not a usage error (exit 2)", err)
	case err.Error() != want:
		t.Errorf("error %q, want %q", err, want)
	case strings.Contains(err.Error(), "\n"):
		t.Errorf("error %q is not one line", err)
	}
}

func TestOpenSwarmDBRefusesAMissingFile(t *testing.T) {
	s := &swarm{path: filepath.Join(t.TempDir(), "gone", "swarm.db")}
	o, _ := s.as("alice", "")
	_, err := o.open(context.Background(), "mail")
	if !errors.Is(err, store.ErrNoDatabase) {
		t.Fatalf("open %s: %v, want ErrNoDatabase", s.path, err)
	}
	if !strings.HasPrefix(err.Error(), "mail: ") || !strings.Contains(err.Error(), "tell the operator") {
		t.Errorf("error %q: want it to name the command and say who to tell", err)
	}
}

func TestReadStdinKeepsOneBytePastTheLimit(t *testing.T) {
	got, err := readStdin(strings.NewReader("abcdef"), 3, "mail")
	if err != nil {
		t.Fatal(err)
	}
	if got != "abcd" {
		t.Errorf("readStdin = %q, want %q: one byte past the limit, for its owner to refuse", got, "abcd")
	}
}

// inSession is s.as(who, stdin) run inside a session of agent who: the
// process-tree marker swarmd gives a session's processes proves it.
func (s *swarm) inSession(who, stdin string) (o *dbOptions, out *bytes.Buffer) {
	o, out = s.as(who, stdin)
	id := who + "-1-0123456789ab" // runner's session id form
	env := map[string]string{"SWARM_DB_PATH": s.path, "SWARM_AGENTS": "alice,bob", "SWARM_AGENT_ID": who,
		"SWARM_SESSION_ID": id, proc.MarkerEnv: "swarmd\x1ftest\x1f" + id}
	o.IO.Getenv = func(k string) string { return env[k] }
	return o, out
}

// A command the daemon runs for a session registers no completion: cobra
// keeps them in a map of the whole process that nothing empties, and the
// daemon builds the commands anew for each session's command. A command
// run from a shell has them.
func TestSessionCommandsRegisterNoCompletions(t *testing.T) {
	db, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "swarm.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, tc := range []struct {
		name string
		io   Streams
		want bool
	}{
		{"from a shell", Streams{}, true},
		{"for a session", Streams{Store: db}, false},
	} {
		task := NewTaskCommand(tc.io)
		list, _, err := task.Find([]string{"list"})
		if err != nil {
			t.Fatal(err)
		}
		for _, flag := range []string{"state", "agent"} {
			if _, got := list.GetFlagCompletionFunc(flag); got != tc.want {
				t.Errorf("%s: task list --%s completion registered %v, want %v", tc.name, flag, got, tc.want)
			}
		}
		if _, got := NewInitCommand(tc.io).GetFlagCompletionFunc("backend"); got != tc.want {
			t.Errorf("%s: init --backend completion registered %v, want %v", tc.name, got, tc.want)
		}
	}
}
