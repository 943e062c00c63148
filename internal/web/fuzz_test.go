package web

import (
	"net/http"
	"testing"

	"github.com/swarmd/swarmd/internal/fuzzhttp"
)

// FuzzRequest: whatever a client sends the dashboard (method, path and
// query, Host, Authorization, Accept, body), it answers without panicking
// and without an internal error; every answer carries the security
// headers; a Host other than a loopback one is refused before any route;
// nothing reaches the daemon's actions without the token; and an error
// answered in JSON is one line that says something.
func FuzzRequest(f *testing.F) {
	seeds := []struct{ method, target, host, auth, accept, body string }{
		{"GET", "/", "localhost", "", "", ""},
		{"GET", "/api/snapshot", "127.0.0.1:9464", "", "", ""},
		{"GET", "/api/events?after=1&limit=5", "localhost", "", "", ""},
		{"GET", "/api/events", "localhost", "", "text/event-stream", ""},
		{"GET", "/api/events?stream=1&tail=-1", "[::1]:1", "", "", ""},
		{"GET", "/api/tasks/1", "localhost", "", "", ""},
		{"GET", "/api/tasks/x", "localhost", "", "", ""},
		{"GET", "/api/agents/agent-001/log?seq=4&tail=10", "localhost", "", "", ""},
		{"GET", "/api/agents/agent-001/log?follow=1", "localhost", "", "", ""},
		{"GET", "/api/sessions?limit=99999999999999999999", "localhost", "", "", ""},
		{"GET", "/assets/../../etc/passwd", "localhost", "", "", ""},
		{"POST", "/api/agents/agent-001/stop", "localhost", "Bearer " + token, "", ""},
		{"POST", "/api/agents/agent-001/pause?now=1", "localhost", "Bearer nope", "", ""},
		{"POST", "/api/mail", "localhost", "Bearer " + token, "", `{"to":"agent-001","body":"hi"}`},
		{"POST", "/api/mail", "evil.example", "Bearer " + token, "", `{"to":"agent-001","body":"hi"}`},
		{"POST", "/api/tasks", "localhost", "Bearer " + token, "", `{"title":"t","bogus":[1,2]}`},
		{"POST", "/api/tasks", "localhost", "Bearer " + token, "", `{"title":"t"}{"title":"u"}`},
		{"PUT", "/api/tasks", "localhost", "Bearer " + token, "", `{}`},
		{"DELETE", "/api/agents/agent-001", "localhost", "", "", ""},
	}
	for _, s := range seeds {
		f.Add(s.method, s.target, s.host, s.auth, s.accept, []byte(s.body))
	}
	fx := newFixture(f, token, 2)
	f.Fuzz(func(t *testing.T, method, target, host, auth, accept string, body []byte) {
		fx.acts.mu.Lock()
		before := len(fx.acts.calls)
		fx.acts.mu.Unlock()
		rec, ok := fuzzhttp.Serve(fx.h, method, target, body, func(req *http.Request) {
			req.Host = host
			req.Header.Set("Authorization", auth)
			req.Header.Set("Accept", accept)
		})
		if !ok {
			return
		}
		fx.acts.mu.Lock()
		reached := fx.acts.calls[before:]
		fx.acts.mu.Unlock()
		if rec.Code == http.StatusInternalServerError {
			t.Errorf("%s %q (Host %q): 500: %s", method, target, host, rec.Body.String())
		}
		if rec.Header().Get("Content-Security-Policy") == "" || rec.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s %q: %d without the security headers: %v", method, target, rec.Code, rec.Header())
		}
		if !loopbackHost(host) && rec.Code != http.StatusMisdirectedRequest {
			t.Errorf("%s %q with Host %q: %d, want %d", method, target, host, rec.Code, http.StatusMisdirectedRequest)
		}
		if len(reached) > 0 && (auth != "Bearer "+token || !loopbackHost(host)) {
			t.Errorf("%s %q (Host %q, Authorization %q) reached the daemon: %v", method, target, host, auth, reached)
		}
		if !fuzzhttp.OneLineError(rec) {
			t.Errorf("%s %q: %d with error body %q, want one line saying what is wrong", method, target, rec.Code, rec.Body.String())
		}
	})
}
