package main

import (
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/agent"
)

func TestHealth(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	stall := 5 * time.Minute
	cases := []struct {
		state      agent.StateKind
		lastOutput time.Time
		since      time.Time
		want       string
	}{
		{agent.Running, now.Add(-4 * time.Minute), now.Add(-time.Hour), ""},
		{agent.Running, now.Add(-5 * time.Minute), now.Add(-time.Hour), "stalled"},
		{agent.Interrupting, now.Add(-time.Hour), now.Add(-time.Hour), ""},
		{agent.Spawning, time.Time{}, now.Add(-59 * time.Second), ""},
		{agent.Spawning, time.Time{}, now.Add(-60 * time.Second), "spawning-timeout"},
		{agent.CoolingDown, time.Time{}, now.Add(-time.Hour), ""},
	}
	for _, c := range cases {
		if got := health(c.state, c.lastOutput, c.since, now, stall); got != c.want {
			t.Errorf("health(%v, output %v ago, since %v ago) = %q, want %q", c.state, now.Sub(c.lastOutput), now.Sub(c.since), got, c.want)
		}
	}
}
