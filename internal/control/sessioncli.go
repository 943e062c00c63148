package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// SessionCLIRequest is a `swarmd mail …` or `swarmd task …` command line
// that a session hands to its daemon to run: with a shared store the
// session holds no database credentials, the daemon does.
type SessionCLIRequest struct {
	Args  []string `json:"args"`            // after the binary's name: "mail", "send", ...
	Stdin string   `json:"stdin,omitempty"` // what the command reads from standard input
	// AgentID is the caller's SWARM_AGENT_ID: a claim the daemon checks
	// against who the caller is, never one it acts on.
	AgentID string `json:"agent_id,omitempty"`
}

// SessionCLIResult is what the command printed and its exit code.
type SessionCLIResult struct {
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	Code   int    `json:"code"`
}

// SessionCLI is an API that runs a session's mail and task commands. An API
// that implements it gets POST /v1/session-cli.
type SessionCLI interface {
	// SessionCLI runs req for the session that made the request (known by
	// its peer pid, never by what the request says); ErrForbidden for
	// anyone else or a command it does not run.
	SessionCLI(ctx context.Context, req SessionCLIRequest) (SessionCLIResult, error)
}

// MaxSessionCLIStdin bounds a forwarded command's standard input: far above
// any mail or task body the store accepts, far below what would strain the
// daemon.
const MaxSessionCLIStdin = 8 << 20

// maxSessionCLIBody bounds the request body: the stdin, JSON-escaped (at
// worst six bytes a byte), and the arguments.
const maxSessionCLIBody = 6*MaxSessionCLIStdin + 1<<20

// sessionCLITimeout bounds the wait for a forwarded command's answer: the
// command runs against the store, which may be a busy server.
const sessionCLITimeout = 2 * time.Minute

// routesSessionCLI serves POST /v1/session-cli. reading, if not nil,
// bounds how many requests read their body at once (a held socket's: one):
// a body is up to maxSessionCLIBody in memory while it is read.
func routesSessionCLI(mux *http.ServeMux, api SessionCLI, reading chan struct{}) {
	mux.Handle("POST /v1/session-cli", sessionCLIHandler(api, reading))
}

func sessionCLIHandler(api SessionCLI, reading chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		req, ok := readSessionCLI(w, r, reading)
		if !ok {
			return
		}
		res, err := api.SessionCLI(r.Context(), req)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
	}
}

// readSessionCLI reads and checks a session-cli request's body, answering
// the request itself when it is bad.
func readSessionCLI(w http.ResponseWriter, r *http.Request, reading chan struct{}) (SessionCLIRequest, bool) {
	var req SessionCLIRequest
	if reading != nil {
		select {
		case reading <- struct{}{}:
			defer func() { <-reading }()
		case <-r.Context().Done():
			return req, false
		}
	}
	body := http.MaxBytesReader(w, r.Body, maxSessionCLIBody)
	if err := json.NewDecoder(body).Decode(&req); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeJSON(w, http.StatusRequestEntityTooLarge, errorBody{Error: fmt.Sprintf("session-cli: request body over %d bytes", maxSessionCLIBody)})
			return req, false
		}
		writeJSON(w, http.StatusBadRequest, errorBody{Error: "session-cli: bad request body: " + err.Error()})
		return req, false
	}
	if len(req.Stdin) > MaxSessionCLIStdin {
		writeJSON(w, http.StatusRequestEntityTooLarge, errorBody{Error: stdinTooBig(len(req.Stdin)).Error()})
		return req, false
	}
	if len(req.Args) == 0 {
		writeJSON(w, http.StatusBadRequest, errorBody{Error: "session-cli: no command (want mail or task and its arguments)"})
		return req, false
	}
	return req, true
}

func stdinTooBig(n int) error {
	return fmt.Errorf("session-cli: standard input is %d bytes, over the %d MiB a session command may pass", n, MaxSessionCLIStdin>>20)
}

// SessionCLI asks the daemon to run a session's mail or task command (see
// the SessionCLI interface). A daemon that does not serve it is an error
// that says so.
func (c *Client) SessionCLI(ctx context.Context, req SessionCLIRequest) (SessionCLIResult, error) {
	var out SessionCLIResult
	if len(req.Stdin) > MaxSessionCLIStdin {
		return out, stdinTooBig(len(req.Stdin))
	}
	b, err := json.Marshal(req)
	if err != nil {
		return out, fmt.Errorf("session-cli: %w", err)
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://swarmd/v1/session-cli", bytes.NewReader(b))
	if err != nil {
		return out, fmt.Errorf("session-cli: %w", err)
	}
	resp, err := c.send(hr, max(c.timeout(), sessionCLITimeout))
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
		return out, fmt.Errorf("session-cli: the daemon on %s does not run session commands (is it an older swarmd?)", c.path)
	}
	if resp.StatusCode >= 300 {
		var eb errorBody
		_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&eb)
		if eb.Error == "" {
			eb.Error = "session-cli: " + resp.Status
		}
		if resp.StatusCode == http.StatusForbidden {
			return out, remoteError{eb.Error, ErrForbidden}
		}
		return out, errors.New(eb.Error)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return out, fmt.Errorf("session-cli: read the answer: %w", err)
	}
	return out, nil
}
