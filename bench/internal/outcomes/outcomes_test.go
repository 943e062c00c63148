package outcomes

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
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
	bin := filepath.Join(t.TempDir(), "swarmd")
	if out, err := exec.Command("go", "build", "-o", bin, "../../../cmd/swarmd").CombinedOutput(); err != nil {
		t.Fatalf("build swarmd: %v\n%s", err, out)
	}
	rep, err := Run(context.Background(), Options{
		Bin: bin, Agents: 20, Tasks: 150, MailRate: 20, Urgent: 0.1, Kills: 2, Timeout: 4 * time.Minute,
		Parent: t.TempDir(), Log: testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep)
	for _, v := range rep.Violations {
		t.Error(v)
	}
	if rep.Kills != 2 || rep.Messages == 0 || rep.Sessions < rep.Tasks {
		t.Errorf("the run did not do what it should: %v", rep)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }
