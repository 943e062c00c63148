package control

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
)

// ErrNoDaemon means nothing listens on the socket.
var ErrNoDaemon = errors.New("no swarmd is running")

// Client talks to a daemon's control socket.
type Client struct {
	path string
	http *http.Client
}

// NewClient returns a client for the socket at path. It does not connect.
func NewClient(path string) *Client {
	return &Client{path: path, http: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}}
}

func (c *Client) do(ctx context.Context, method, p string, q url.Values, out any) error {
	return c.doBody(ctx, method, p, q, nil, out)
}

// doBody is do with a JSON request body (nil: none).
func (c *Client) doBody(ctx context.Context, method, p string, q url.Values, in, out any) error {
	u := "http://swarmd" + p
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return c.dialError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var eb errorBody
		_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&eb)
		if eb.Error == "" {
			eb.Error = resp.Status
		}
		switch resp.StatusCode {
		case http.StatusNotFound:
			return remoteError{eb.Error, ErrUnknownAgent}
		case http.StatusConflict:
			return remoteError{eb.Error, ErrConflict}
		}
		return errors.New(eb.Error)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func (c *Client) dialError(err error) error {
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%w (no control socket at %s)", ErrNoDaemon, c.path)
	}
	return fmt.Errorf("control socket %s: %w", c.path, err)
}

// Agents lists every agent.
func (c *Client) Agents(ctx context.Context) ([]AgentStatus, error) {
	var out []AgentStatus
	return out, c.do(ctx, http.MethodGet, "/v1/agents", nil, &out)
}

// Agent returns one agent.
func (c *Client) Agent(ctx context.Context, name string) (AgentStatus, error) {
	var out AgentStatus
	return out, c.do(ctx, http.MethodGet, "/v1/agents/"+url.PathEscape(name), nil, &out)
}

// Stop sends OperatorStop to one agent.
func (c *Client) Stop(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodPost, "/v1/agents/"+url.PathEscape(name)+"/stop", nil, nil)
}

// Start starts a stopped agent again (counters reset).
func (c *Client) Start(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodPost, "/v1/agents/"+url.PathEscape(name)+"/start", nil, nil)
}

// Pause holds an agent (see API.PauseAgent).
func (c *Client) Pause(ctx context.Context, name string, req PauseRequest) (PauseResult, error) {
	var out PauseResult
	return out, c.doBody(ctx, http.MethodPost, "/v1/agents/"+url.PathEscape(name)+"/pause", nil, req, &out)
}

// Resume lifts an agent's pause.
func (c *Client) Resume(ctx context.Context, name string) (ResumeResult, error) {
	var out ResumeResult
	return out, c.do(ctx, http.MethodPost, "/v1/agents/"+url.PathEscape(name)+"/resume", nil, &out)
}

// Events calls fn for each event after afterID (for agent, if set). With
// follow it keeps streaming until ctx ends.
func (c *Client) Events(ctx context.Context, agent string, afterID int64, follow bool, fn func(Event) error) error {
	q := url.Values{"after": {strconv.FormatInt(afterID, 10)}}
	if agent != "" {
		q.Set("agent", agent)
	}
	if follow {
		q.Set("follow", "1")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://swarmd/v1/events?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return c.dialError(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return fmt.Errorf("events: %w", err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("events: %w", err)
	}
	return nil
}

// remoteError is the daemon's message, matching the sentinel of its status.
type remoteError struct {
	msg      string
	sentinel error
}

func (e remoteError) Error() string { return e.msg }
func (e remoteError) Unwrap() error { return e.sentinel }
