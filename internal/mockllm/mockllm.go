// Package mockllm is a scripted LLM API server for tests that drive the real
// coding-agent CLIs (Claude Code, Codex, Gemini CLI) on 127.0.0.1. It speaks
// three wire formats, each with SSE streaming:
//
//   - Anthropic Messages: POST /v1/messages
//   - OpenAI Responses: POST /v1/responses (Codex, wire_api = "responses")
//   - Gemini: POST /v1beta/models/{model}:streamGenerateContent?alt=sse, and
//     :generateContent for Gemini CLI's JSON side calls (model routing)
//
// A Script is a list of Turns: replies (text, or a shell tool call) and, before
// a reply, the failures its first attempts get (an error status with headers,
// a dropped connection), each possibly delayed. The turn a request gets is
// chosen from the request itself: its position is the number of model turns
// already in the history it carries, and the failures of that position are
// counted per position, so a client that retries a request gets the next
// failure or the reply of the same position, never a later turn. Several
// conversations (agents, sessions) can have scripts of their own, chosen by
// a string their requests contain. Every request is recorded, so a test can
// assert what the CLI sent.
package mockllm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// Format is a wire format.
type Format string

// Wire formats.
const (
	Anthropic Format = "anthropic"
	OpenAI    Format = "openai-responses"
	Gemini    Format = "gemini"
)

// Usage is the token usage a reply reports.
type Usage struct {
	Input, Output, CacheRead, CacheWrite int
}

// defaultUsage is reported by a reply whose Usage is zero, so that a test can
// tell that tokens were recorded.
func defaultUsage() Usage { return Usage{Input: 120, Output: 30, CacheRead: 7, CacheWrite: 5} }

// Turn is one scripted answer. Exactly one of Text, Shell, Status and Drop
// makes sense per turn; a turn with Status or Drop is a failure, answered to
// one attempt at its position, and the others are replies that advance the
// conversation.
type Turn struct {
	// Text is a final assistant message.
	Text string
	// Shell is a command for the format's shell tool (Claude "Bash", Codex
	// "exec_command" or "shell", Gemini "run_shell_command").
	Shell string
	// Status, when non-zero, answers with this HTTP status, Header and Body
	// (a format-specific error body when Body is empty).
	Status int
	Header http.Header
	Body   string
	// Drop closes the connection without an answer.
	Drop bool
	// Delay waits this long before answering (or until the client goes).
	Delay time.Duration
	// Usage is reported by a reply; zero means 120 input, 30 output, 7
	// cache-read and 5 cache-write tokens.
	Usage Usage
}

func (t Turn) failure() bool { return t.Status != 0 || t.Drop }

// Text returns a reply turn with a final message.
func Text(s string) Turn { return Turn{Text: s} }

// Shell returns a reply turn that runs cmd through the shell tool.
func Shell(cmd string) Turn { return Turn{Shell: cmd} }

// Status returns a failure turn answering with status and header pairs
// ("retry-after", "2", ...).
func Status(code int, header ...string) Turn {
	h := http.Header{}
	for i := 0; i+1 < len(header); i += 2 {
		h.Set(header[i], header[i+1])
	}
	return Turn{Status: code, Header: h}
}

// Drop returns a failure turn that closes the connection.
func Drop() Turn { return Turn{Drop: true} }

// Request is one recorded request.
type Request struct {
	// Time is when the request was answered: for a scripted one, when its
	// script turn was chosen.
	Time   time.Time
	Format Format // "" for a path the server does not know
	Method string
	Path   string // with the query
	Header http.Header
	Body   []byte
	// Side is true for a request answered outside the script (Gemini CLI's
	// routing call, token counts).
	Side bool
	// Script is the match of the script that answered ("" for the default).
	Script string
	// Position is the number of model turns in the request's history; Turn
	// the index of the script turn answered (-1 for side calls and requests
	// past the script's end).
	Position, Turn int
}

// Server is a running mock. It is safe for concurrent use.
type Server struct {
	srv *httptest.Server

	mu      sync.Mutex
	scripts []*script // by match, then the default
	reqs    []Request
	notify  chan struct{} // closed and replaced on every request
}

type script struct {
	match    string
	turns    []Turn
	attempts map[int]int // failures answered per position
}

// New starts a server on 127.0.0.1 that answers with the default script.
func New(turns ...Turn) *Server {
	s := &Server{notify: make(chan struct{})}
	s.scripts = []*script{{turns: turns, attempts: make(map[int]int)}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// Script gives the conversations whose requests contain match (in their
// JSON body, as Request.BodyContains reads it) a script of their own, with
// its own positions and failure counts: one agent's or one session's
// conversation, told apart by its prompt. Scripts are tried in the order
// they were added; requests that match none get the default script, which
// Script("", turns...) replaces.
func (s *Server) Script(match string, turns ...Turn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := &script{match: match, turns: turns, attempts: make(map[int]int)}
	n := len(s.scripts)
	if match == "" {
		s.scripts[n-1] = sc
		return
	}
	s.scripts = append(s.scripts[:n-1:n-1], sc, s.scripts[n-1])
}

// URL is the server's base URL, http://127.0.0.1:port, without a path.
func (s *Server) URL() string { return s.srv.URL }

// Close stops the server, cutting off requests in flight (a delayed answer
// ends at once).
func (s *Server) Close() {
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// Requests returns the requests so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Scripted returns the requests so far that the script answered (side calls
// left out).
func (s *Server) Scripted() []Request {
	var out []Request
	for _, r := range s.Requests() {
		if !r.Side && r.Format != "" {
			out = append(out, r)
		}
	}
	return out
}

// WaitRequest waits until a request satisfying f has been recorded, and
// returns it.
func (s *Server) WaitRequest(ctx context.Context, f func(Request) bool) (Request, error) {
	seen := 0
	for {
		s.mu.Lock()
		reqs, ch := s.reqs[seen:], s.notify
		seen = len(s.reqs)
		s.mu.Unlock()
		for _, r := range reqs {
			if f(r) {
				return r, nil
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return Request{}, fmt.Errorf("mockllm: wait for request: %w", ctx.Err())
		}
	}
}

// BodyContains reports whether a request's body holds s, also as it is
// escaped in a JSON string (a prompt with quotes or newlines).
func (r Request) BodyContains(s string) bool {
	if bytes.Contains(r.Body, []byte(s)) {
		return true
	}
	q, _ := json.Marshal(s)
	return bytes.Contains(r.Body, q[1:len(q)-1])
}

// wire is what a format knows: how far a history got, and how to write
// replies, errors and side calls.
type wire interface {
	// position counts the model turns in a request body's history; ok is
	// false for a body that is not a request of this format.
	position(body []byte) (n int, ok bool)
	// side returns the answer to a request outside the script, or nil.
	side(r *http.Request, body []byte) http.HandlerFunc
	reply(w http.ResponseWriter, r *http.Request, body []byte, t Turn, seq int)
	errorBody(status int) string
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	format, wr := route(r)
	rec := Request{Time: time.Now(), Format: format, Method: r.Method, Path: r.URL.RequestURI(),
		Header: r.Header.Clone(), Body: body, Turn: -1}
	if wr == nil {
		s.record(rec)
		http.NotFound(w, r)
		return
	}
	if answer := wr.side(r, body); answer != nil {
		rec.Side = true
		s.record(rec)
		answer(w, r)
		return
	}
	pos, ok := wr.position(body)
	if !ok {
		s.record(rec)
		http.Error(w, "mockllm: cannot parse request", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	// A scripted request's time is when its script was chosen, so that it
	// orders with Script: one answered by a script set at T has a Time
	// after T, however late a loaded machine ran this handler.
	rec.Time = time.Now()
	sc := s.scriptLocked(rec)
	idx := sc.turn(pos)
	rec.Position, rec.Turn, rec.Script = pos, idx, sc.match
	s.recordLocked(rec)
	s.mu.Unlock()
	if idx < 0 {
		// Past the script: a plain final answer, so a CLI that asks again
		// ends instead of hanging a test.
		wr.reply(w, r, body, Text("mockllm: script exhausted"), 1000+pos)
		return
	}
	t := sc.turns[idx]
	if t.Delay > 0 {
		tm := time.NewTimer(t.Delay)
		select {
		case <-tm.C:
		case <-r.Context().Done():
			tm.Stop()
			return
		}
	}
	switch {
	case t.Drop:
		drop(w)
	case t.Status != 0:
		h := w.Header()
		for k, v := range t.Header {
			h[k] = v
		}
		b := t.Body
		if b == "" {
			b = wr.errorBody(t.Status)
		}
		if h.Get("Content-Type") == "" {
			h.Set("Content-Type", "application/json")
		}
		w.WriteHeader(t.Status)
		_, _ = io.WriteString(w, b)
	default:
		wr.reply(w, r, body, t, idx)
	}
}

func (s *Server) scriptLocked(r Request) *script {
	for _, sc := range s.scripts[:len(s.scripts)-1] {
		if r.BodyContains(sc.match) {
			return sc
		}
	}
	return s.scripts[len(s.scripts)-1]
}

// turn picks the turn for a request at pos: the failures before the pos-th
// reply in order, one per attempt, then the reply; -1 past the end.
func (sc *script) turn(pos int) int {
	replies := 0
	for i := 0; i < len(sc.turns); i++ {
		if replies == pos {
			// The run of failures before the reply of this position.
			j := i
			for j < len(sc.turns) && sc.turns[j].failure() {
				j++
			}
			n := sc.attempts[pos]
			if n < j-i {
				sc.attempts[pos] = n + 1
				return i + n
			}
			if j < len(sc.turns) {
				return j
			}
			return -1
		}
		if !sc.turns[i].failure() {
			replies++
		}
	}
	return -1
}

func (s *Server) record(r Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recordLocked(r)
}

func (s *Server) recordLocked(r Request) {
	s.reqs = append(s.reqs, r)
	close(s.notify)
	s.notify = make(chan struct{})
}

func route(r *http.Request) (Format, wire) {
	if r.Method != http.MethodPost {
		return "", nil
	}
	p := r.URL.Path
	switch {
	case strings.HasSuffix(p, "/messages/count_tokens"):
		return Anthropic, anthropicWire{}
	case strings.HasSuffix(p, "/messages"):
		return Anthropic, anthropicWire{}
	case strings.HasSuffix(p, "/responses"):
		return OpenAI, openaiWire{}
	case strings.Contains(p, "/models/") && (strings.HasSuffix(p, ":streamGenerateContent") ||
		strings.HasSuffix(p, ":generateContent") || strings.HasSuffix(p, ":countTokens")):
		return Gemini, geminiWire{}
	}
	return "", nil
}

// drop closes the connection without writing a response.
func drop(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	conn.Close()
}

// sse writes server-sent events and flushes each.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func newSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

// event writes one event; name "" omits the event line.
func (e *sse) event(name string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		panic(fmt.Sprintf("mockllm: marshal event: %v", err)) // our own literals
	}
	if name != "" {
		fmt.Fprintf(e.w, "event: %s\n", name)
	}
	fmt.Fprintf(e.w, "data: %s\n\n", b)
	if e.f != nil {
		e.f.Flush()
	}
}

func (t Turn) usage() Usage {
	if t.Usage == (Usage{}) {
		return defaultUsage()
	}
	return t.Usage
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
