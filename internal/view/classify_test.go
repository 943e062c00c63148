package view

import (
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/agent"
)

// TestClassify is seed 004's table, row by row, with the thresholds at
// their edges (stall after 5 min, spawn timeout 60 s).
func TestClassify(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	th := Thresholds{StallAfter: 5 * time.Minute}
	for _, tt := range []struct {
		name string
		c    Condition
		want Visual
	}{
		{"stopped is dead", Condition{State: agent.Stopped, Since: ago(time.Hour)}, Dead},
		{"stopped and paused is dead", Condition{State: agent.Stopped, Paused: true}, Dead},
		{"initializing spawns", Condition{State: agent.Initializing, Since: ago(time.Second)}, Spawning},
		{"building a prompt spawns", Condition{State: agent.BuildingPrompt, Since: ago(2 * time.Minute)}, Spawning},
		{"spawning under 60s", Condition{State: agent.Spawning, Since: ago(59 * time.Second)}, Spawning},
		{"spawning at 60s is dead", Condition{State: agent.Spawning, Since: ago(60 * time.Second)}, Dead},
		{"spawn timeout beats paused", Condition{State: agent.Spawning, Since: ago(time.Hour), Paused: true}, Dead},
		{"running, output just now", Condition{State: agent.Running, Since: ago(time.Hour), SessionStarted: ago(time.Hour), LastOutput: ago(time.Second)}, Running},
		{"running, output 4m59s ago", Condition{State: agent.Running, SessionStarted: ago(time.Hour), LastOutput: ago(5*time.Minute - time.Second)}, Running},
		{"running, output 5m ago stalls", Condition{State: agent.Running, SessionStarted: ago(time.Hour), LastOutput: ago(5 * time.Minute)}, Stalled},
		{"running, never printed, started 6m ago", Condition{State: agent.Running, SessionStarted: ago(6 * time.Minute)}, Stalled},
		{"running, never printed, started 1m ago", Condition{State: agent.Running, SessionStarted: ago(time.Minute)}, Running},
		{"interrupting is still running", Condition{State: agent.Interrupting, LastOutput: ago(time.Second)}, Running},
		{"paused while running", Condition{State: agent.Running, LastOutput: ago(time.Second), Paused: true}, Paused},
		{"paused between sessions", Condition{State: agent.BuildingPrompt, Paused: true}, Paused},
		{"session complete merges", Condition{State: agent.SessionComplete}, Merging},
		{"idle after DONE", Condition{State: agent.BuildingPrompt, Idle: true}, Idle},
		{"idle while the queue merges its work", Condition{State: agent.BuildingPrompt, Idle: true, Merging: true}, Merging},
		{"cooling down waits", Condition{State: agent.CoolingDown}, Idle},
		{"an unknown state", Condition{State: agent.StateKind(42)}, Unknown},
	} {
		if got := Classify(tt.c, now, th); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
	// stall_after 0 turns stall detection off, never on.
	if got := Classify(Condition{State: agent.Running, LastOutput: ago(24 * time.Hour)}, now, Thresholds{}); got != Running {
		t.Errorf("no stall_after: %s", got)
	}
	// A configured spawn timeout replaces the seed's 60 s.
	if got := Classify(Condition{State: agent.Spawning, Since: ago(90 * time.Second)}, now, Thresholds{SpawnTimeout: 2 * time.Minute}); got != Spawning {
		t.Errorf("spawn timeout 2m at 90s: %s", got)
	}
}

func TestIndicators(t *testing.T) {
	want := map[Visual]string{Spawning: "◔", Running: "●", Stalled: "◐", Merging: "⇄", Idle: "□", Dead: "○", Unknown: "◌"}
	seen := map[string]bool{}
	for _, v := range Visuals {
		if w, ok := want[v]; ok && v.Indicator() != w {
			t.Errorf("%s: %s, want %s", v, v.Indicator(), w)
		}
		if seen[v.ASCII()] || len(v.ASCII()) != 1 {
			t.Errorf("%s: ASCII indicator %q is not one distinct character", v, v.ASCII())
		}
		seen[v.ASCII()] = true
	}
	if Visual("bogus").Indicator() != "◌" {
		t.Error("an unknown visual has no indicator")
	}
}
