package control

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestEmptyAgentNameIsRefused: a request about an agent with no name is
// refused before it is sent, as an unknown agent: its path would name the
// list of agents, and the daemon would answer with an HTTP error.
func TestEmptyAgentNameIsRefused(t *testing.T) {
	c := NewClient(filepath.Join(t.TempDir(), "no.sock"))
	ctx := context.Background()
	_, errAgent := c.Agent(ctx, "")
	_, errPause := c.Pause(ctx, "", PauseRequest{})
	_, errResume := c.Resume(ctx, "")
	for verb, err := range map[string]error{"agent": errAgent, "stop": c.Stop(ctx, ""), "start": c.Start(ctx, ""),
		"pause": errPause, "resume": errResume} {
		if !errors.Is(err, ErrUnknownAgent) || !strings.Contains(err.Error(), "the agent's name is empty") {
			t.Errorf("%s of an agent with no name: %v, want ErrUnknownAgent saying the name is empty", verb, err)
		}
	}
}
