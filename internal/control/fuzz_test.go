package control

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/fuzzhttp"
)

// routeAPI answers every route of the socket and records what reached it.
type routeAPI struct {
	mu    sync.Mutex
	calls []string
	bad   []string // what reached it that the routes should have refused
}

func (a *routeAPI) record(call string) {
	a.mu.Lock()
	a.calls = append(a.calls, call)
	a.mu.Unlock()
}

func (a *routeAPI) refuse(why string) {
	a.mu.Lock()
	a.bad = append(a.bad, why)
	a.mu.Unlock()
}

func (a *routeAPI) known(name string) error {
	if name != "alice" {
		return fmt.Errorf("%w %q (agents: alice)", ErrUnknownAgent, name)
	}
	return nil
}

func (a *routeAPI) Agents() []AgentStatus { return []AgentStatus{{Name: "alice", State: "Running"}} }
func (a *routeAPI) Agent(name string) (AgentStatus, error) {
	return AgentStatus{Name: name, State: "Running"}, a.known(name)
}
func (a *routeAPI) StopAgent(_ context.Context, name string) error {
	a.record("stop " + name)
	return a.known(name)
}
func (a *routeAPI) StartAgent(_ context.Context, name string) error {
	a.record("start " + name)
	if err := a.known(name); err != nil {
		return err
	}
	return fmt.Errorf("%w: alice is Running, not Stopped", ErrConflict)
}
func (a *routeAPI) PauseAgent(_ context.Context, name string, req PauseRequest) (PauseResult, error) {
	a.record("pause " + name)
	return PauseResult{Agent: name, State: "Running", Frozen: req.Now}, a.known(name)
}
func (a *routeAPI) ResumeAgent(_ context.Context, name string) (ResumeResult, error) {
	a.record("resume " + name)
	return ResumeResult{Agent: name}, a.known(name)
}
func (a *routeAPI) Events(_ context.Context, agent string, after int64, limit int) ([]Event, error) {
	a.record("events")
	if after < 0 || limit < 0 {
		// The route passes on whatever the query parses to: the store
		// reads a negative as "from the start" and "no limit".
		return []Event{}, nil
	}
	return []Event{{ID: after + 1, Agent: agent}}, nil
}
func (a *routeAPI) Budget(context.Context) ([]BudgetStatus, error) {
	return []BudgetStatus{{Scope: "alice", LimitUSD: 10}}, nil
}
func (a *routeAPI) SetBudget(_ context.Context, req BudgetSetRequest) ([]BudgetStatus, error) {
	a.record("budget " + req.Scope)
	if req.Scope != "alice" && req.Scope != "swarm" {
		return nil, fmt.Errorf("%w %q", ErrUnknownAgent, req.Scope)
	}
	return []BudgetStatus{{Scope: req.Scope, LimitUSD: req.USD}}, nil
}
func (a *routeAPI) SessionCLI(_ context.Context, req SessionCLIRequest) (SessionCLIResult, error) {
	a.record("session-cli")
	if len(req.Args) == 0 || len(req.Stdin) > MaxSessionCLIStdin {
		a.refuse(fmt.Sprintf("session-cli with %d arguments and %d bytes of stdin", len(req.Args), len(req.Stdin)))
	}
	if len(req.Args) == 0 || (req.Args[0] != "mail" && req.Args[0] != "task") {
		return SessionCLIResult{}, fmt.Errorf("%w: session-cli runs mail and task only", ErrForbidden)
	}
	return SessionCLIResult{Stdout: "ok\n"}, nil
}

// FuzzRoutes: whatever a client of the control socket sends (a session's
// forwarded command among them, which a hostile agent writes), the routes
// answer with a status of the API's, never panic, answer an error in JSON
// as one line, and pass the API only requests they have checked.
func FuzzRoutes(f *testing.F) {
	seeds := []struct{ method, target, body string }{
		{"GET", "/v1/agents", ""},
		{"GET", "/v1/agents/alice", ""},
		{"GET", "/v1/agents/%2e%2e", ""},
		{"POST", "/v1/agents/alice/stop", ""},
		{"POST", "/v1/agents/bob/start", ""},
		{"POST", "/v1/agents/alice/pause", `{"now":true,"reason":"look"}`},
		{"POST", "/v1/agents/alice/pause", `{"now":"yes"}`},
		{"POST", "/v1/agents/alice/resume", ""},
		{"GET", "/v1/events?after=3&limit=2&agent=alice", ""},
		{"GET", "/v1/events?follow=1&after=-5", ""},
		{"GET", "/v1/budget", ""},
		{"POST", "/v1/budget", `{"scope":"alice","usd":2.5}`},
		{"POST", "/v1/budget", `{"scope":"alice","usd":1e999}`},
		{"POST", "/v1/session-cli", `{"args":["mail","send","bob"],"stdin":"hi"}`},
		{"POST", "/v1/session-cli", `{"args":[]}`},
		{"POST", "/v1/session-cli", `{"args":["daemon","stop"]}`},
		{"POST", "/v1/session-cli", `{"args":["mail"],"stdin":"\u0000"}` + "trailing"},
		{"DELETE", "/v1/agents/alice", ""},
	}
	for _, s := range seeds {
		f.Add(s.method, s.target, []byte(s.body))
	}
	api := &routeAPI{}
	h := (&Server{log: zap.NewNop()}).routes(api)
	statuses := []int{http.StatusOK, http.StatusAccepted, http.StatusBadRequest, http.StatusForbidden, http.StatusNotFound,
		http.StatusMethodNotAllowed, http.StatusConflict, http.StatusRequestEntityTooLarge,
		// http.ServeMux's to a path's clean form ("/v1//agents", "/v1/./agents").
		http.StatusMovedPermanently, http.StatusTemporaryRedirect, http.StatusPermanentRedirect}
	f.Fuzz(func(t *testing.T, method, target string, body []byte) {
		rec, ok := fuzzhttp.Serve(h, method, target, body, nil)
		if !ok {
			return
		}
		if !slices.Contains(statuses, rec.Code) {
			t.Errorf("%s %q: status %d: %s", method, target, rec.Code, rec.Body.String())
		}
		if !fuzzhttp.OneLineError(rec) {
			t.Errorf("%s %q: %d with error body %q, want one line saying what is wrong", method, target, rec.Code, rec.Body.String())
		}
		api.mu.Lock()
		bad := api.bad
		api.bad = nil
		api.mu.Unlock()
		if len(bad) > 0 {
			t.Errorf("%s %q reached the API unchecked: %v", method, target, bad)
		}
	})
}
