package runner

import "testing"

func TestAgentOfSession(t *testing.T) {
	for _, name := range []string{"alice", "a-1", "x-2-3"} {
		id := newSessionID(name, 7)
		if got, ok := AgentOfSession(id); !ok || got != name {
			t.Errorf("AgentOfSession(%q) = %q, %v; want %q", id, got, ok, name)
		}
	}
	for _, id := range []string{"", "hook-0123abcd-agent_start-1", "alice-7", "alice-x-0123456789ab", "-7-0123456789ab", "alice-7-0123456789zz"} {
		if got, ok := AgentOfSession(id); ok {
			t.Errorf("AgentOfSession(%q) = %q, want not a session", id, got)
		}
	}
}
