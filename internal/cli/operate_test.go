package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/control"
)

// TestStatusShowsIdleAgentsIdle: an agent that waits for mail or a task
// (the machine holds it in BuildingPrompt, starting no session) is shown
// idle in the STATE column; one really building a prompt is not.
func TestStatusShowsIdleAgentsIdle(t *testing.T) {
	var b strings.Builder
	rows := []StatusRow{
		{AgentStatus: control.AgentStatus{Name: "bob", State: "BuildingPrompt", Health: "idle", Branch: "swarm/bob/work"}},
		{AgentStatus: control.AgentStatus{Name: "carol", State: "BuildingPrompt", Branch: "swarm/carol/work"}},
	}
	if err := writeStatus(&b, rows, time.Now()); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("status:\n%s", b.String())
	}
	if f := strings.Fields(lines[1]); f[0] != "bob" || f[1] != "idle" || strings.Contains(lines[1], "BuildingPrompt") {
		t.Errorf("idle bob shows as %q", lines[1])
	}
	if f := strings.Fields(lines[2]); f[0] != "carol" || f[1] != "BuildingPrompt" {
		t.Errorf("carol, building a prompt, shows as %q", lines[2])
	}
}

// TestCostSaysUnpriced: tokens with no cost are unpriced (no price for
// the model), not free; no use at all is "-".
func TestCostSaysUnpriced(t *testing.T) {
	for _, c := range []struct {
		usd    float64
		tokens int64
		want   string
	}{{0, 0, "-"}, {0, 1200, "unpriced"}, {0.25, 1200, "$0.2500"}, {12.5, 0, "$12.50"}} {
		if got := fmtCost(c.usd, c.tokens); got != c.want {
			t.Errorf("fmtCost(%v, %d) = %q, want %q", c.usd, c.tokens, got, c.want)
		}
	}
}
