package metrics

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/backend"
	"github.com/swarmd/swarmd/internal/runner"
)

// cycleTransitions is one session's worth of transitions, urgent interrupt
// included, so the benchmark covers every branch of OnTransition.
func cycleTransitions(name string) []runner.Transition {
	urgent := tr(name, agent.Running, agent.EvUrgentMessage(), agent.Interrupting, agent.CancelSession, 1, 0, 0)
	urgent.UrgentCommitted = t0.Add(-time.Millisecond)
	return []runner.Transition{
		tr(name, agent.CoolingDown, agent.EvBackoffElapsed(), agent.BuildingPrompt, agent.NoEffect, 1, 0, 0),
		tr(name, agent.BuildingPrompt, agent.EvPromptReady("p"), agent.Spawning, agent.StorePrompt, 1, 0, 0),
		tr(name, agent.Spawning, agent.EvSessionStarted(1), agent.Running, agent.NoEffect, 1, 0, 0),
		urgent,
		tr(name, agent.Interrupting, agent.EvGraceExceeded(), agent.SessionComplete, agent.ForceStopSession, 2, 0, 0),
		tr(name, agent.SessionComplete, agent.EvWorktreeReady(), agent.CoolingDown, agent.NoEffect, 2, 1, 1),
	}
}

func BenchmarkOnTransition(b *testing.B) {
	m := New(BuildInfo{})
	for i := range 200 {
		m.AddAgent(runner.Snapshot{Agent: fmt.Sprintf("agent-%03d", i)})
	}
	ts := cycleTransitions("agent-100")
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		m.OnTransition(ts[i%len(ts)])
		i++
	}
}

// BenchmarkOnTransitionParallel is every runner goroutine reporting at once,
// each for its own agent.
func BenchmarkOnTransitionParallel(b *testing.B) {
	m := New(BuildInfo{})
	names := make(chan string, 1024)
	for i := range cap(names) {
		name := fmt.Sprintf("agent-%03d", i)
		m.AddAgent(runner.Snapshot{Agent: name})
		names <- name
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ts := cycleTransitions(<-names)
		i := 0
		for pb.Next() {
			m.OnTransition(ts[i%len(ts)])
			i++
		}
	})
}

// BenchmarkScrape200 scrapes, over HTTP, a daemon with 200 agents that have
// each run sessions, been interrupted and used tokens.
func BenchmarkScrape200(b *testing.B) {
	m := New(BuildInfo{Version: "v1.0.0", Commit: "0123456789ab", GoVersion: "go1.26.8"})
	pending := map[string]int{}
	for i := range 200 {
		name := fmt.Sprintf("agent-%03d", i)
		m.AddAgent(runner.Snapshot{Agent: name})
		for _, t := range cycleTransitions(name) {
			m.OnTransition(t)
		}
		m.OnSessionEnd(runner.SessionRecord{Agent: name, Result: backend.Result{Started: t0, Ended: t0.Add(10 * time.Minute)}})
		m.AddTokens(name, "input", 1e6)
		m.AddTokens(name, "output", 1e4)
		m.AddCost(name, "claude", 1.5)
		m.AddToolCalls(name, 42)
		pending[name] = i % 3
	}
	m.SetPending(pending)
	m.MailSent(true, 5)
	m.HookRun("session_end", "ok")
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()

	for _, gz := range []bool{false, true} {
		b.Run(fmt.Sprintf("gzip=%v", gz), func(b *testing.B) {
			// Compression is handled by hand so that the bytes counted are
			// the bytes on the wire.
			client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
			defer client.CloseIdleConnections()
			var n int64
			for b.Loop() {
				req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
				if err != nil {
					b.Fatal(err)
				}
				req.Header.Set("Accept", "text/plain; version=0.0.4")
				if gz {
					req.Header.Set("Accept-Encoding", "gzip")
				}
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				n, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatalf("scrape: status %d, %v", resp.StatusCode, err)
				}
			}
			b.ReportMetric(float64(n), "bytes/scrape")
		})
	}
}
