// Package control is the daemon's control socket, <state_dir>/swarmd.sock:
// HTTP and JSON over a unix socket with mode 0600, so that only the user
// running swarmd can steer it. The operator commands (status, stop, start,
// events -f) are its clients.
package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// AgentStatus is one row of `swarmd status`.
type AgentStatus struct {
	Name              string    `json:"name"`
	State             string    `json:"state"`
	Seq               uint32    `json:"seq"`
	SessionID         string    `json:"session_id,omitempty"`
	SessionStarted    time.Time `json:"session_started,omitzero"`
	LastOutput        time.Time `json:"last_output,omitzero"`
	ConsecutiveErrors uint32    `json:"consecutive_errors"`
	TotalErrors       uint32    `json:"total_errors"`
	Branch            string    `json:"branch"`
	Reason            string    `json:"reason,omitempty"`
	Since             time.Time `json:"since"`
	// Health is seed 004's visual classification: "stalled" for a Running
	// session silent for stall_after, "spawning-timeout" for Spawning over
	// 60 s, "" otherwise.
	Health string `json:"health,omitempty"`
	// DaemonFault is why the whole daemon cannot do its job (its database
	// was deleted, the disk is full, ...), the same on every row; "" when
	// healthy.
	DaemonFault string `json:"daemon_fault,omitempty"`
	// Paused: swarmd pause holds the agent (by whom, why, since when);
	// Frozen: its running session's processes are stopped (--now).
	Paused      bool   `json:"paused,omitempty"`
	PausedBy    string `json:"paused_by,omitempty"`
	PauseReason string `json:"pause_reason,omitempty"`
	// Waiting says why the agent is held before its next session (its
	// provider, a free slot); "" when it is not.
	Waiting     string    `json:"waiting,omitempty"`
	PausedSince time.Time `json:"paused_since,omitzero"`
	Frozen      bool      `json:"frozen,omitempty"`
}

// PauseRequest is `swarmd pause AGENT`.
type PauseRequest struct {
	Now    bool   `json:"now,omitempty"` // freeze the running session
	Reason string `json:"reason,omitempty"`
}

// PauseResult says what a pause did.
type PauseResult struct {
	Agent     string `json:"agent"`
	State     string `json:"state"`
	Already   bool   `json:"already,omitempty"` // it was paused before
	SessionID string `json:"session_id,omitempty"`
	Frozen    bool   `json:"frozen,omitempty"`    // the session's processes are stopped
	Processes int    `json:"processes,omitempty"` // how many were stopped
}

// ResumeResult says what a resume did.
type ResumeResult struct {
	Agent  string `json:"agent"`
	State  string `json:"state"`
	Thawed bool   `json:"thawed,omitempty"` // a frozen session goes on
}

// Event is one line of the lifecycle event log.
type Event struct {
	ID        int64     `json:"id"`
	At        time.Time `json:"at"`
	Agent     string    `json:"agent"`
	From      string    `json:"from"`
	Event     string    `json:"event"`
	To        string    `json:"to"`
	Effect    string    `json:"effect,omitempty"`
	Actor     string    `json:"actor"`
	Reason    string    `json:"reason,omitempty"`
	SessionID string    `json:"session_id,omitempty"`
	// Seq is the session's seq where the reader wants it (the dashboards);
	// the socket's event feed leaves it out.
	Seq uint32 `json:"seq,omitempty"`
	// TaskID is set on a task's transition: From and To are task states,
	// Event its TransitionReason ("" when none applies), Effect "task".
	TaskID int64 `json:"task_id,omitempty"`
	// AbortReason is, on a task's transition, the abnormal agent end that
	// caused it (seed 004's abort reasons: timeout, oom, ...).
	AbortReason string `json:"abort_reason,omitempty"`
}

// API is what the daemon exposes on the socket.
type API interface {
	Agents() []AgentStatus
	Agent(name string) (AgentStatus, error)
	// StopAgent and StartAgent get the request's context: PeerPID tells
	// who asked.
	StopAgent(ctx context.Context, name string) error
	StartAgent(ctx context.Context, name string) error
	// PauseAgent holds an agent: no session starts until ResumeAgent, and
	// with Now the running one is frozen. ResumeAgent of an agent that is
	// not paused is ErrConflict.
	PauseAgent(ctx context.Context, name string, req PauseRequest) (PauseResult, error)
	ResumeAgent(ctx context.Context, name string) (ResumeResult, error)
	Events(ctx context.Context, agent string, afterID int64, limit int) ([]Event, error)
}

// Errors an API returns that map to HTTP statuses.
var (
	ErrUnknownAgent = errors.New("unknown agent")
	ErrConflict     = errors.New("conflict")
	// ErrForbidden: the caller may not do this (an agent acting on another).
	ErrForbidden = errors.New("forbidden")
)

type peerKey struct{}

// PeerPID is the pid of the process at the other end of the request's
// connection, from the kernel (SO_PEERCRED), not from anything it sent.
func PeerPID(ctx context.Context) (int, bool) {
	pid, ok := ctx.Value(peerKey{}).(int)
	return pid, ok && pid > 0
}

// withPeer records the connecting process's pid in the connection's context.
func withPeer(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	pid := peerPID(uc)
	if pid <= 0 {
		return ctx
	}
	return context.WithValue(ctx, peerKey{}, pid)
}

// peerPID is the pid of the process at the other end of c, from the kernel
// (SO_PEERCRED, as of its connect); 0 when unknown.
func peerPID(c *net.UnixConn) int {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	var cred *unix.Ucred
	_ = raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err != nil || cred == nil {
		return 0
	}
	return int(cred.Pid)
}

type holderKey struct{}

// Holder is who a socket made with Attach was given to, for a request that
// came through it: the daemon knows such a caller by the socket it
// connected to, not by anything in its environment or its request.
func Holder(ctx context.Context) (string, bool) {
	h, ok := ctx.Value(holderKey{}).(string)
	return h, ok
}

// connContext is the context of one connection: its holder, if it came
// through a socket made for one (held.go), and the connecting process's
// pid.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if hc, ok := c.(*heldConn); ok {
		ctx = context.WithValue(ctx, holderKey{}, hc.holder)
		c = hc.UnixConn
	}
	return withPeer(ctx, c)
}

// Server serves API on a unix socket.
type Server struct {
	path string
	api  API
	ln   net.Listener
	srv  *http.Server
	log  *zap.Logger
	done chan struct{}
	once sync.Once

	mu     sync.Mutex
	held   map[*Held]struct{} // the sockets Attach made, closed with the server
	closed bool
}

// followPoll is how often a followed event stream looks for new events.
const followPoll = 200 * time.Millisecond

// Listen creates the socket (replacing a stale one: the state-dir lock
// guarantees no other daemon uses it) and serves api until Close.
func Listen(path string, api API, log *zap.Logger) (*Server, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("control: remove stale socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control: listen %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control: chmod socket: %w", err)
	}
	s := &Server{path: path, api: api, ln: ln, log: log, done: make(chan struct{}), held: map[*Held]struct{}{}}
	s.srv = &http.Server{Handler: s.routes(api), ReadHeaderTimeout: 10 * time.Second, ConnContext: connContext}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("control socket", zap.Error(err))
		}
	}()
	return s, nil
}

// Close stops serving (ending followed streams) and removes the socket,
// and the sockets Attach made.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		held := make([]*Held, 0, len(s.held))
		for h := range s.held {
			held = append(held, h)
		}
		s.mu.Unlock()
		for _, h := range held {
			h.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err = s.srv.Shutdown(ctx)
		if err != nil {
			err = s.srv.Close()
		}
		<-s.done
		_ = os.Remove(s.path)
	})
	return err
}

// Viewer is an API that also serves the dashboards' read model (swarmd
// top), under ViewPrefix.
type Viewer interface {
	ViewHandler() http.Handler
}

// MaxPauseReason is the longest reason a pause takes, in bytes: it is one
// line of status, the event log and the dashboards.
const MaxPauseReason = 1024

// DaemonInfo is what the daemon says about itself.
type DaemonInfo struct {
	// Name is the daemon's name in the swarm's list (swarmd daemons):
	// HOST:STATE_DIR.
	Name string `json:"name,omitempty"`
	// Isolation says which parts of config key isolation are in force
	// and why the others are not.
	Isolation string `json:"isolation"`
	// Store says how busy the store's write connection was over about
	// the last minute: whether the store bounds the daemon.
	Store string `json:"store,omitempty"`
}

// Informer is an API that says what it is (GET /v1/daemon).
type Informer interface {
	Info() DaemonInfo
}

// ViewPrefix is where a Viewer's handler is mounted.
const ViewPrefix = "/v1/view/"

// routes is the socket's whole route table, one handler each, kept in one
// place to read the API at a glance.
func (s *Server) routes(api API) http.Handler {
	mux := http.NewServeMux()
	if v, ok := api.(Viewer); ok {
		mux.Handle(ViewPrefix, v.ViewHandler())
	}
	routesAgents(mux, api)
	if b, ok := api.(BudgetAPI); ok {
		routesBudget(mux, b)
	}
	if sc, ok := api.(SessionCLI); ok {
		routesSessionCLI(mux, sc, nil)
	}
	s.routesEvents(mux, api)
	return mux
}

// routesAgents are the daemon's and its agents' states, and the agents'
// controls (each checks the caller's authority).
func routesAgents(mux *http.ServeMux, api API) {
	if in, ok := api.(Informer); ok {
		mux.HandleFunc("GET /v1/daemon", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, in.Info())
		})
	}
	mux.HandleFunc("GET /v1/agents", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, api.Agents())
	})
	mux.HandleFunc("GET /v1/agents/{name}", func(w http.ResponseWriter, r *http.Request) {
		a, err := api.Agent(r.PathValue("name"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, a)
	})
	mux.HandleFunc("POST /v1/agents/{name}/stop", func(w http.ResponseWriter, r *http.Request) {
		if err := api.StopAgent(r.Context(), r.PathValue("name")); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
	mux.HandleFunc("POST /v1/agents/{name}/start", func(w http.ResponseWriter, r *http.Request) {
		if err := api.StartAgent(r.Context(), r.PathValue("name")); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
	mux.HandleFunc("POST /v1/agents/{name}/pause", func(w http.ResponseWriter, r *http.Request) {
		var req PauseRequest
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil && !errors.Is(err, io.EOF) {
			var big *http.MaxBytesError
			if errors.As(err, &big) {
				writeJSON(w, http.StatusBadRequest, errorBody{Error: fmt.Sprintf("pause: the request is over %d bytes: a reason is at most %d", big.Limit, MaxPauseReason)})
				return
			}
			writeJSON(w, http.StatusBadRequest, errorBody{Error: "pause: bad request body: " + err.Error()})
			return
		}
		if len(req.Reason) > MaxPauseReason {
			writeJSON(w, http.StatusBadRequest, errorBody{Error: fmt.Sprintf("pause: the reason is %d bytes, over the %d-byte limit", len(req.Reason), MaxPauseReason)})
			return
		}
		res, err := api.PauseAgent(r.Context(), r.PathValue("name"), req)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
	})
	mux.HandleFunc("POST /v1/agents/{name}/resume", func(w http.ResponseWriter, r *http.Request) {
		res, err := api.ResumeAgent(r.Context(), r.PathValue("name"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
	})
}

// routesEvents is the event log, followed or not.
func (s *Server) routesEvents(mux *http.ServeMux, api API) {
	mux.HandleFunc("GET /v1/events", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		after, _ := strconv.ParseInt(q.Get("after"), 10, 64)
		limit, _ := strconv.Atoi(q.Get("limit"))
		follow := q.Get("follow") == "1"
		agent := q.Get("agent")
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		flusher, _ := w.(http.Flusher)
		for {
			evs, err := api.Events(r.Context(), agent, after, limit)
			if err != nil {
				if r.Context().Err() == nil {
					s.log.Warn("control: events", zap.Error(err))
				}
				return
			}
			for _, e := range evs {
				if err := enc.Encode(e); err != nil {
					return
				}
				after = e.ID
			}
			if !follow {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
			select {
			case <-r.Context().Done():
				return
			case <-time.After(followPoll):
			}
		}
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

type errorBody struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrUnknownAgent):
		code = http.StatusNotFound
	case errors.Is(err, ErrForbidden):
		code = http.StatusForbidden
	case errors.Is(err, ErrConflict):
		code = http.StatusConflict
	}
	writeJSON(w, code, errorBody{Error: err.Error()})
}
