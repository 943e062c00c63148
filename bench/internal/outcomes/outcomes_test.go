package outcomes

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/swarmd/swarmd/internal/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestOutcomesExactUnderKills is the load test at a size CI affords: 20
// agents, 150 tasks, mail with urgent messages interrupting sessions, two
// SIGKILLs of the daemon and a restart after each. Every promise of exact outcomes
// must hold (see check); make bench runs it at 200 agents and 2,000 tasks.
func TestOutcomesExactUnderKills(t *testing.T) {
	if testing.Short() {
		t.Skip("a load test of a real swarmd")
	}
	rep := run(t, Options{Agents: 20, Tasks: 150, MailRate: 20, Urgent: 0.1, Kills: 2})
	if rep.Kills != 2 || rep.Messages == 0 || rep.Sessions < rep.Tasks {
		t.Errorf("the run did not do what it should: %v", rep)
	}
}

// TestOutcomesExactAcrossPostgresRestarts: the same promises on the
// PostgreSQL store while the server crashes (pg_ctl stop -m immediate:
// every connection cut) and comes back 3 s later, twice, with the daemon
// running: every agent resumes by itself, every task is done once, every
// message acknowledged once, and no agent has an error counted or stops.
func TestOutcomesExactAcrossPostgresRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("a load test of a real swarmd")
	}
	// fsync and synchronous commit on: the crashes must lose nothing the
	// server acknowledged, or a lost commit would pass for swarmd's.
	srv := pgtest.RequireDurable(t)
	if err := srv.CreateDB("outcomes"); err != nil {
		t.Fatal(err)
	}
	rep := run(t, Options{Agents: 10, Tasks: 60, MailRate: 10, Urgent: 0.1, Store: srv.URL("outcomes"),
		StoreRestarts: 2, RestartStore: func() error { return srv.Restart("immediate", 3*time.Second) }})
	if rep.StoreRestarts != 2 || rep.Messages == 0 || rep.Sessions < rep.Tasks {
		t.Errorf("the run did not do what it should: %v", rep)
	}
}

// run builds swarmd, runs the load test with o (the binary, a 4-minute
// timeout, the test's directories and log filled in), and reports every
// broken promise as an error.
func run(t *testing.T, o Options) Report {
	t.Helper()
	o.Bin = filepath.Join(t.TempDir(), "swarmd")
	if out, err := exec.Command("go", "build", "-o", o.Bin, "../../../cmd/swarmd").CombinedOutput(); err != nil {
		t.Fatalf("build swarmd: %v\n%s", err, out)
	}
	o.Timeout, o.Parent, o.Log = 4*time.Minute, t.TempDir(), testWriter{t}
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep)
	for _, v := range rep.Violations {
		t.Error(v)
	}
	return rep
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }
