package view

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// SocketPrefix is where the control socket serves the read model.
const SocketPrefix = "/v1/view/"

// SocketHandler serves s on the control socket, under SocketPrefix. Streams
// are NDJSON, one Update or LogChunk a line. Every caller may write: the
// daemon's Actions decide who may do what (by the calling process).
func (s *Service) SocketHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+SocketPrefix+"snapshot", func(w http.ResponseWriter, r *http.Request) {
		snap, err := s.Hub.Snapshot(r.Context())
		if err != nil {
			WriteError(w, err)
			return
		}
		snap.Features.Writes = true
		WriteJSON(w, http.StatusOK, snap)
	})
	mux.HandleFunc("GET "+SocketPrefix+"stream", func(w http.ResponseWriter, r *http.Request) {
		after, tail, err := streamQuery(r.URL.Query())
		if err != nil {
			WriteError(w, err)
			return
		}
		enc := ndjson(w)
		_ = s.Stream(r.Context(), after, tail, true, func(u Update) error { return enc(u) })
	})
	mux.HandleFunc("GET "+SocketPrefix+"tasks/{id}", func(w http.ResponseWriter, r *http.Request) {
		tv, err := s.TaskView(r.Context(), r.PathValue("id"))
		if err != nil {
			WriteError(w, err)
			return
		}
		WriteJSON(w, http.StatusOK, tv)
	})
	mux.HandleFunc("GET "+SocketPrefix+"log/{agent}", func(w http.ResponseWriter, r *http.Request) {
		req, err := ParseLogRequest(r.PathValue("agent"), r)
		if err != nil {
			WriteError(w, err)
			return
		}
		enc := ndjson(w)
		if err := s.Log(r.Context(), req, r.URL.Query().Get("raw") == "1", func(c LogChunk) error { return enc(c) }); err != nil {
			_ = enc(LogChunk{Text: "\n[" + err.Error() + "]\n"}) // the status went with the first line
		}
	})
	mux.HandleFunc("POST "+SocketPrefix+"agents/{name}/{verb}", func(w http.ResponseWriter, r *http.Request) {
		if err := s.Act(r.Context(), r.PathValue("name"), r.PathValue("verb"), r.URL.Query().Get("now") == "1"); err != nil {
			WriteError(w, err)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
	mux.HandleFunc("POST "+SocketPrefix+"mail", func(w http.ResponseWriter, r *http.Request) {
		var m MailRequest
		if err := DecodeRequest(r, &m); err != nil {
			WriteError(w, err)
			return
		}
		ids, err := s.Actions.Mail(r.Context(), m)
		if err != nil {
			WriteError(w, err)
			return
		}
		WriteJSON(w, http.StatusCreated, map[string][]int64{"ids": ids})
	})
	return mux
}

// streamQuery reads after (a resume point) and tail.
func streamQuery(q url.Values) (after int64, tail int, err error) {
	after = NoResume
	if v := q.Get("after"); v != "" {
		if after, err = strconv.ParseInt(v, 10, 64); err != nil || after < 0 {
			return 0, 0, fmt.Errorf("%w: after %q is not an event id", ErrInvalid, v)
		}
	}
	if v := q.Get("tail"); v != "" {
		if tail, err = strconv.Atoi(v); err != nil || tail < 0 {
			return 0, 0, fmt.Errorf("%w: tail %q is not a count", ErrInvalid, v)
		}
	}
	return after, tail, nil
}

// ndjson returns an encoder that writes one JSON value a line and flushes.
func ndjson(w http.ResponseWriter) func(any) error {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	rc := http.NewResponseController(w)
	return func(v any) error {
		if err := enc.Encode(v); err != nil {
			return err
		}
		return rc.Flush()
	}
}

// Client reads the read model from a control socket. HTTP is an
// http.Client that dials the socket (control.Client.HTTP).
type Client struct {
	HTTP *http.Client
}

const socketBase = "http://swarmd"

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	resp, err := c.send(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func (c *Client) send(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, socketBase+path, rd)
	if err != nil {
		return nil, err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		var eb ErrorBody
		_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&eb)
		if eb.Error == "" {
			eb.Error = resp.Status
		}
		if s := sentinelOf(resp.StatusCode); s != nil {
			return nil, remoteError{eb.Error, s}
		}
		return nil, errors.New(eb.Error)
	}
	return resp, nil
}

// remoteError is the daemon's message, matching the sentinel of its status.
type remoteError struct {
	msg      string
	sentinel error
}

func (e remoteError) Error() string { return e.msg }
func (e remoteError) Unwrap() error { return e.sentinel }

// Snapshot is the whole picture now.
func (c *Client) Snapshot(ctx context.Context) (Snapshot, error) {
	var s Snapshot
	return s, c.do(ctx, http.MethodGet, SocketPrefix+"snapshot", nil, &s)
}

// Task is one task's view.
func (c *Client) Task(ctx context.Context, id int64) (TaskView, error) {
	var tv TaskView
	return tv, c.do(ctx, http.MethodGet, SocketPrefix+"tasks/"+strconv.FormatInt(id, 10), nil, &tv)
}

// Stream calls fn for each update of a subscription (after and tail as in
// Hub.Subscribe) until ctx ends (nil), fn fails, or the daemon ends the
// stream (io.EOF: the subscriber lagged or the daemon is stopping; resume
// after the last event seen).
func (c *Client) Stream(ctx context.Context, after int64, tail int, fn func(Update) error) error {
	q := url.Values{"tail": {strconv.Itoa(tail)}}
	if after >= 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	resp, err := c.send(ctx, http.MethodGet, SocketPrefix+"stream?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return scanLines(ctx, resp.Body, func(b []byte) error {
		var u Update
		if err := json.Unmarshal(b, &u); err != nil {
			return fmt.Errorf("view stream: %w", err)
		}
		return fn(u)
	})
}

// Log calls fn for each chunk of a followed log (see Service.Log).
func (c *Client) Log(ctx context.Context, req LogRequest, fn func(LogChunk) error) error {
	q := url.Values{}
	if req.Seq > 0 {
		q.Set("seq", strconv.FormatUint(uint64(req.Seq), 10))
	}
	if req.Tail > 0 {
		q.Set("tail", strconv.FormatInt(req.Tail, 10))
	}
	if req.Follow {
		q.Set("follow", "1")
	}
	resp, err := c.send(ctx, http.MethodGet, SocketPrefix+"log/"+url.PathEscape(req.Agent)+"?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return scanLines(ctx, resp.Body, func(b []byte) error {
		var ch LogChunk
		if err := json.Unmarshal(b, &ch); err != nil {
			return fmt.Errorf("view log: %w", err)
		}
		return fn(ch)
	})
}

// Act runs stop, start, pause or resume on agent (now: pause freezes the
// running session).
func (c *Client) Act(ctx context.Context, agent, verb string, now bool) error {
	p := SocketPrefix + "agents/" + url.PathEscape(agent) + "/" + url.PathEscape(verb)
	if now {
		p += "?now=1"
	}
	return c.do(ctx, http.MethodPost, p, nil, nil)
}

// Mail sends mail as the caller (the operator, outside a session).
func (c *Client) Mail(ctx context.Context, m MailRequest) ([]int64, error) {
	var out struct {
		IDs []int64 `json:"ids"`
	}
	return out.IDs, c.do(ctx, http.MethodPost, SocketPrefix+"mail", m, &out)
}

// scanLines calls fn for each line of r; the end of r is io.EOF, unless ctx
// ended first (nil).
func scanLines(ctx context.Context, r io.Reader, fn func([]byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		if err := fn(sc.Bytes()); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.EOF
}
