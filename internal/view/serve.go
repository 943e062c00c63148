package view

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/swarmd/swarmd/internal/logs"
)

// Actions are the changes a dashboard may ask for. The daemon implements
// them; who may ask is the server's business (the control socket: the
// caller's process, the web: the bearer token).
type Actions interface {
	Stop(ctx context.Context, agent string) error
	Start(ctx context.Context, agent string) error
	// Pause holds the agent: no new session; with now its running session
	// is frozen too. ErrUnsupported where pause does not exist.
	Pause(ctx context.Context, agent string, now bool) error
	Resume(ctx context.Context, agent string) error
	Mail(ctx context.Context, m MailRequest) ([]int64, error)
	AddTask(ctx context.Context, t TaskRequest) (Task, error)
}

// Verbs of Service.Act.
var Verbs = []string{"stop", "start", "pause", "resume"}

// Service is what both servers (the control socket, the web) serve: the
// read model, the logs, the actions. Their framing differs (NDJSON, Server-
// Sent Events); what they say does not.
type Service struct {
	// Base, when it ends, ends every stream and follow (the daemon is
	// stopping: an http.Server's Shutdown waits for them). Nil: never.
	Base    context.Context
	Hub     *Hub
	Logs    *LogFollower
	Actions Actions
	// Sessions lists recorded sessions, newest first (agent "" for all).
	Sessions func(ctx context.Context, agent string, limit int) ([]Session, error)
	// Task reads one task's view (ErrNotFound: no such task).
	Task func(ctx context.Context, id int64) (TaskView, error)
	// Renderer, if set, returns the writer that renders agent's log for
	// people (the stream-json of Claude Code, Codex, Gemini CLI), or nil
	// to pass it as written.
	Renderer func(agent string, w io.Writer) io.WriteCloser
}

// Stream sends a subscription to emit: the snapshot (its Features.Writes
// set to writes), the catch-up events, then every update until ctx ends
// (nil) or the subscription does (ErrLagged, ErrClosed).
func (s *Service) Stream(ctx context.Context, after int64, tail int, writes bool, emit func(Update) error) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	sub, err := s.Hub.Subscribe(ctx, after, tail)
	if err != nil {
		return err
	}
	defer sub.Close()
	snap := sub.Snapshot
	snap.Features.Writes = writes
	if err := emit(Update{Kind: KindSnapshot, Snapshot: &snap}); err != nil {
		return err
	}
	if err := sub.Backlog(ctx, func(e Event) error { return emit(Update{Kind: KindEvent, Event: &e}) }); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case u, ok := <-sub.C:
			if !ok {
				return sub.Err()
			}
			if err := emit(u); err != nil {
				return err
			}
		}
	}
}

// Log follows an agent's log, rendered unless raw, sending each piece to
// emit: a LogChunk with Session at each session's start, then its text.
func (s *Service) Log(ctx context.Context, req LogRequest, raw bool, emit func(LogChunk) error) error {
	if s.Logs == nil {
		return ErrUnsupported
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.Logs.Follow(ctx, req, func(seq uint32) (io.WriteCloser, error) {
		if err := emit(LogChunk{Session: seq}); err != nil {
			return nil, err
		}
		var w io.WriteCloser = nopCloser{chunkWriter(emit)}
		if !raw && s.Renderer != nil {
			if r := s.Renderer(req.Agent, chunkWriter(emit)); r != nil {
				w = r
			}
		}
		return w, nil
	})
}

// TaskView is task id's view, its id given as in a request path ("7" or
// "#7").
func (s *Service) TaskView(ctx context.Context, id string) (TaskView, error) {
	n, err := strconv.ParseInt(strings.TrimPrefix(id, "#"), 10, 64)
	if err != nil || n <= 0 {
		return TaskView{}, fmt.Errorf("%w: task id %q is not a positive number", ErrInvalid, id)
	}
	if s.Task == nil {
		return TaskView{}, ErrUnsupported
	}
	return s.Task(ctx, n)
}

// bound is ctx ended also by Base.
func (s *Service) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	if s.Base == nil {
		return ctx, cancel
	}
	stop := context.AfterFunc(s.Base, cancel)
	return ctx, func() { stop(); cancel() }
}

// Act runs one of Verbs on agent; now applies to pause (freeze the
// running session).
func (s *Service) Act(ctx context.Context, agent, verb string, now bool) error {
	switch verb {
	case "stop":
		return s.Actions.Stop(ctx, agent)
	case "start":
		return s.Actions.Start(ctx, agent)
	case "pause":
		return s.Actions.Pause(ctx, agent, now)
	case "resume":
		return s.Actions.Resume(ctx, agent)
	}
	return fmt.Errorf("%w: unknown action %q (want stop, start, pause or resume)", ErrNotFound, verb)
}

// chunkWriter sends each write as a LogChunk of text.
type chunkWriter func(LogChunk) error

func (c chunkWriter) Write(p []byte) (int, error) {
	if err := c(LogChunk{Text: string(p)}); err != nil {
		return 0, err
	}
	return len(p), nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// StatusOf maps an error of the read model or of Actions to an HTTP status.
func StatusOf(err error) int {
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrNoLog), errors.Is(err, logs.ErrNoSession):
		return http.StatusNotFound
	case errors.Is(err, ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, ErrDenied):
		return http.StatusForbidden
	case errors.Is(err, ErrConflict):
		return http.StatusConflict
	case errors.Is(err, ErrUnsupported):
		return http.StatusNotImplemented
	case errors.Is(err, ErrClosed):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// sentinelOf is StatusOf's inverse, for clients.
func sentinelOf(code int) error {
	switch code {
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusBadRequest:
		return ErrInvalid
	case http.StatusForbidden, http.StatusUnauthorized:
		return ErrDenied
	case http.StatusConflict:
		return ErrConflict
	case http.StatusNotImplemented:
		return ErrUnsupported
	case http.StatusServiceUnavailable:
		return ErrClosed
	}
	return nil
}

// ErrorBody is the JSON of an error response.
type ErrorBody struct {
	Error string `json:"error"`
}

// WriteJSON writes v as the response.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // served as JSON with nosniff: "<" need not hide
	_ = enc.Encode(v)
}

// WriteError writes err with its status.
func WriteError(w http.ResponseWriter, err error) {
	WriteJSON(w, StatusOf(err), ErrorBody{Error: err.Error()})
}

// MaxRequestBytes bounds a write request's body: a mail body or a task
// are at most 64 KiB, and JSON escaping may double them.
const MaxRequestBytes = 256 << 10

// DecodeRequest reads a JSON body into v: one object, no unknown fields.
func DecodeRequest(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, MaxRequestBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: request body: %s", ErrInvalid, strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

// ParseLogRequest reads a log request's query: seq, tail (bytes), follow.
func ParseLogRequest(agent string, r *http.Request) (LogRequest, error) {
	q := r.URL.Query()
	req := LogRequest{Agent: agent, Follow: q.Get("follow") == "1" || q.Get("follow") == "true"}
	if v := q.Get("seq"); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return req, fmt.Errorf("%w: seq %q is not a session number", ErrInvalid, v)
		}
		req.Seq = uint32(n)
	}
	if v := q.Get("tail"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return req, fmt.Errorf("%w: tail %q is not a byte count", ErrInvalid, v)
		}
		req.Tail = n
	}
	return req, nil
}
