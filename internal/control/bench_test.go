package control

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

type bigAPI struct {
	fakeAPI
	agents []AgentStatus
}

func (b *bigAPI) Agents() []AgentStatus { return b.agents }

// BenchmarkStatus200: one `swarmd status` round trip over the socket with
// 200 agents (request, JSON encode and decode).
func BenchmarkStatus200(b *testing.B) {
	api := &bigAPI{}
	now := time.Now()
	for i := 0; i < 200; i++ {
		api.agents = append(api.agents, AgentStatus{Name: fmt.Sprintf("agent-%d", i), State: "Running", Seq: 12,
			SessionID: fmt.Sprintf("agent-%d-12-0123456789ab", i), SessionStarted: now, LastOutput: now,
			Branch: fmt.Sprintf("swarm/agent-/work%d", i), Since: now})
	}
	path := filepath.Join(b.TempDir(), "swarmd.sock")
	s, err := Listen(path, api, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	c := NewClient(path)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		as, err := c.Agents(ctx)
		if err != nil || len(as) != 200 {
			b.Fatal(err)
		}
	}
}
