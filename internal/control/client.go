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
	"strings"
	"syscall"
	"time"
)

// ErrNoDaemon means nothing listens on the socket.
var ErrNoDaemon = errors.New("no swarmd is running")

// ErrNoAnswer means the daemon took the connection but did not begin to
// answer in time: it is wedged, or far too busy.
var ErrNoAnswer = errors.New("swarmd did not answer")

// DefaultTimeout bounds the wait for the daemon's answer to begin. The
// daemon answers from memory in milliseconds; a request still unanswered
// after this is an error, not a hang.
const DefaultTimeout = 5 * time.Second

// startTimeout is Start's bound: the daemon answers once the agent's old
// runner has finished its cleanup, which it waits up to a minute for.
const startTimeout = 90 * time.Second

// Client talks to a daemon's control socket.
type Client struct {
	path string
	http *http.Client
	// Timeout bounds the wait for each answer to begin (Start waits
	// longer); zero means DefaultTimeout. A stream of events, once begun,
	// is not bounded.
	Timeout time.Duration
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
	wait := c.timeout()
	if strings.HasSuffix(p, "/start") {
		wait = max(wait, startTimeout)
	}
	resp, err := c.send(req, wait)
	if err != nil {
		return err
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

func (c *Client) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return DefaultTimeout
}

// send sends req and waits up to wait for the answer to begin. The body of
// the answer is bound to req's context alone (a stream may last).
func (c *Client) send(req *http.Request, wait time.Duration) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(req.Context())
	timer := time.AfterFunc(wait, func() { cancel(ErrNoAnswer) })
	resp, err := c.http.Do(req.WithContext(ctx))
	fired := !timer.Stop()
	if err != nil {
		cancel(nil)
		if fired && errors.Is(context.Cause(ctx), ErrNoAnswer) {
			return nil, fmt.Errorf("%w within %s on %s (is it wedged? its log, or a stack dump from kill -QUIT, tells)", ErrNoAnswer, wait, c.path)
		}
		return nil, c.dialError(err)
	}
	resp.Body = cancelOnClose{resp.Body, cancel}
	return resp, nil
}

// cancelOnClose releases the request's context with its answer's body.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelCauseFunc
}

func (b cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel(nil)
	return err
}

func (c *Client) dialError(err error) error {
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%w (no control socket at %s)", ErrNoDaemon, c.path)
	}
	return fmt.Errorf("control socket %s: %w", c.path, err)
}

// Daemon is what the daemon says about itself.
func (c *Client) Daemon(ctx context.Context) (DaemonInfo, error) {
	var out DaemonInfo
	err := c.do(ctx, http.MethodGet, "/v1/daemon", nil, &out)
	return out, err
}

// Agents lists every agent.
func (c *Client) Agents(ctx context.Context) ([]AgentStatus, error) {
	var out []AgentStatus
	return out, c.do(ctx, http.MethodGet, "/v1/agents", nil, &out)
}

// agentPath is the API's path of agent name's resource, then verb ("" or
// "/stop", ...). An empty name is refused here: its path would name the
// list of agents, which answers with an HTTP error, not about the agent.
func agentPath(name, verb string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("%w: the agent's name is empty", ErrUnknownAgent)
	}
	return "/v1/agents/" + url.PathEscape(name) + verb, nil
}

// Agent returns one agent.
func (c *Client) Agent(ctx context.Context, name string) (AgentStatus, error) {
	var out AgentStatus
	p, err := agentPath(name, "")
	if err != nil {
		return out, err
	}
	return out, c.do(ctx, http.MethodGet, p, nil, &out)
}

// Stop sends OperatorStop to one agent.
func (c *Client) Stop(ctx context.Context, name string) error {
	p, err := agentPath(name, "/stop")
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodPost, p, nil, nil)
}

// Start starts a stopped agent again (counters reset).
func (c *Client) Start(ctx context.Context, name string) error {
	p, err := agentPath(name, "/start")
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodPost, p, nil, nil)
}

// Pause holds an agent (see API.PauseAgent).
func (c *Client) Pause(ctx context.Context, name string, req PauseRequest) (PauseResult, error) {
	var out PauseResult
	p, err := agentPath(name, "/pause")
	if err != nil {
		return out, err
	}
	return out, c.doBody(ctx, http.MethodPost, p, nil, req, &out)
}

// Resume lifts an agent's pause.
func (c *Client) Resume(ctx context.Context, name string) (ResumeResult, error) {
	var out ResumeResult
	p, err := agentPath(name, "/resume")
	if err != nil {
		return out, err
	}
	return out, c.do(ctx, http.MethodPost, p, nil, &out)
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
	resp, err := c.send(req, c.timeout())
	if err != nil {
		return err
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
