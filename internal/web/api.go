package web

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/swarmd/swarmd/internal/view"
)

// Bounds of list requests.
const (
	defaultLimit = 100
	maxLimit     = 1000
	// defaultLogTail is where a log starts when the request names none:
	// the last 64 KiB, enough to see what the session is doing.
	defaultLogTail = 64 << 10
)

func (s *Server) apiRoutes(mux *http.ServeMux) {
	svc := s.opts.Service
	mux.HandleFunc("GET /api/snapshot", s.snapshot(func(sn view.Snapshot) any { return sn }))
	mux.HandleFunc("GET /api/agents", s.snapshot(func(sn view.Snapshot) any { return sn.Agents }))
	mux.HandleFunc("GET /api/tasks", s.snapshot(func(sn view.Snapshot) any { return sn.Tasks }))
	mux.HandleFunc("GET /api/merge", s.snapshot(func(sn view.Snapshot) any { return sn.Merge }))
	mux.HandleFunc("GET /api/tasks/{id}", func(w http.ResponseWriter, r *http.Request) {
		tv, err := svc.TaskView(r.Context(), r.PathValue("id"))
		if err != nil {
			view.WriteError(w, err)
			return
		}
		view.WriteJSON(w, http.StatusOK, tv)
	})
	mux.HandleFunc("GET /api/agents/{name}", func(w http.ResponseWriter, r *http.Request) {
		sn, err := svc.Hub.Snapshot(r.Context())
		if err != nil {
			view.WriteError(w, err)
			return
		}
		for _, a := range sn.Agents {
			if a.Name == r.PathValue("name") {
				view.WriteJSON(w, http.StatusOK, a)
				return
			}
		}
		view.WriteError(w, fmt.Errorf("%w: no agent %q", view.ErrNotFound, r.PathValue("name")))
	})
	mux.HandleFunc("GET /api/sessions", s.sessions)
	mux.HandleFunc("GET /api/events", s.events)
	mux.HandleFunc("GET /api/agents/{name}/log", s.log)
	mux.HandleFunc("POST /api/auth", func(w http.ResponseWriter, r *http.Request) {
		if s.authorize(w, r) {
			w.WriteHeader(http.StatusNoContent)
		}
	})
	mux.HandleFunc("POST /api/agents/{name}/{verb}", func(w http.ResponseWriter, r *http.Request) {
		if !s.authorize(w, r) {
			return
		}
		if err := svc.Act(r.Context(), r.PathValue("name"), r.PathValue("verb"), r.URL.Query().Get("now") == "1"); err != nil {
			view.WriteError(w, err)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
	mux.HandleFunc("POST /api/mail", func(w http.ResponseWriter, r *http.Request) {
		var m view.MailRequest
		if !s.authorize(w, r) || !decode(w, r, &m) {
			return
		}
		ids, err := svc.Actions.Mail(r.Context(), m)
		if err != nil {
			view.WriteError(w, err)
			return
		}
		view.WriteJSON(w, http.StatusCreated, map[string][]int64{"ids": ids})
	})
	mux.HandleFunc("POST /api/tasks", func(w http.ResponseWriter, r *http.Request) {
		var t view.TaskRequest
		if !s.authorize(w, r) || !decode(w, r, &t) {
			return
		}
		out, err := svc.Actions.AddTask(r.Context(), t)
		if err != nil {
			view.WriteError(w, err)
			return
		}
		view.WriteJSON(w, http.StatusCreated, out)
	})
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		view.WriteError(w, fmt.Errorf("%w: no API %s %s (docs/web.md lists them)", view.ErrNotFound, r.Method, r.URL.Path))
	})
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := view.DecodeRequest(r, v); err != nil {
		view.WriteError(w, err)
		return false
	}
	return true
}

// snapshot serves part of the snapshot, with Features.Writes telling
// whether a token is configured.
func (s *Server) snapshot(part func(view.Snapshot) any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sn, err := s.opts.Service.Hub.Snapshot(r.Context())
		if err != nil {
			view.WriteError(w, err)
			return
		}
		sn.Features.Writes = s.opts.Token() != ""
		view.WriteJSON(w, http.StatusOK, part(sn))
	}
}

func (s *Server) sessions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := intParam(q.Get("limit"), defaultLimit, maxLimit)
	if err != nil {
		view.WriteError(w, err)
		return
	}
	ss, err := s.opts.Service.Sessions(r.Context(), q.Get("agent"), limit)
	if err != nil {
		view.WriteError(w, err)
		return
	}
	if ss == nil {
		ss = []view.Session{}
	}
	view.WriteJSON(w, http.StatusOK, ss)
}

// events is the event log: a JSON page, or (Accept: text/event-stream) the
// live stream, resumed after Last-Event-ID.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if wantsStream(r) {
		s.stream(w, r)
		return
	}
	after, err := int64Param(q.Get("after"), 0)
	if err != nil {
		view.WriteError(w, err)
		return
	}
	limit, err := intParam(q.Get("limit"), defaultLimit, maxLimit)
	if err != nil {
		view.WriteError(w, err)
		return
	}
	evs, err := s.opts.Service.Hub.Events(r.Context(), after, limit)
	if err != nil {
		view.WriteError(w, err)
		return
	}
	if evs == nil {
		evs = []view.Event{}
	}
	view.WriteJSON(w, http.StatusOK, evs)
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	after := view.NoResume
	resume := r.Header.Get("Last-Event-ID")
	if resume == "" {
		resume = r.URL.Query().Get("after")
	}
	if resume != "" {
		n, err := strconv.ParseInt(resume, 10, 64)
		if err != nil || n < 0 {
			view.WriteError(w, fmt.Errorf("%w: Last-Event-ID %q is not an event id", view.ErrInvalid, resume))
			return
		}
		after = n
	}
	tail, err := intParam(r.URL.Query().Get("tail"), 0, view.MaxTail)
	if err != nil {
		view.WriteError(w, err)
		return
	}
	ctx := r.Context()
	es := newEventStream(ctx, w)
	defer es.close()
	err = s.opts.Service.Stream(ctx, after, tail, s.opts.Token() != "", es.update)
	if err != nil && !errors.Is(err, view.ErrLagged) && !errors.Is(err, view.ErrClosed) && ctx.Err() == nil {
		s.opts.Log.Debug("web: event stream ended", errField(err))
	}
}

// log is an agent's log: the text of a session, or (follow=1 or Accept:
// text/event-stream) a stream that follows it from session to session.
func (s *Server) log(w http.ResponseWriter, r *http.Request) {
	req, err := view.ParseLogRequest(r.PathValue("name"), r)
	if err != nil {
		view.WriteError(w, err)
		return
	}
	raw := r.URL.Query().Get("raw") == "1"
	if !wantsStream(r) && !req.Follow {
		// Streamed as it is read: a session's log may be large. An error
		// before the first byte gets its status; one after ends the text.
		started := false
		err := s.opts.Service.Log(r.Context(), req, raw, func(c view.LogChunk) error {
			if c.Text == "" {
				return nil
			}
			if !started {
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				started = true
			}
			_, err := w.Write([]byte(c.Text))
			return err
		})
		switch {
		case err != nil && !started:
			view.WriteError(w, err)
		case err != nil:
			_, _ = w.Write([]byte("\n[" + err.Error() + "]\n"))
		case !started:
			w.Header().Set("Content-Type", "text/plain; charset=utf-8") // an empty log
		}
		return
	}
	req.Follow = true
	if r.URL.Query().Get("tail") == "" {
		req.Tail = defaultLogTail
	}
	ctx := r.Context()
	es := newEventStream(ctx, w)
	defer es.close()
	if err := s.opts.Service.Log(ctx, req, raw, es.logChunk); err != nil && ctx.Err() == nil {
		_ = es.send("", "error", view.ErrorBody{Error: err.Error()})
	}
}

func wantsStream(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream") || r.URL.Query().Get("stream") == "1"
}

func intParam(v string, def, maxV int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: %q is not a count", view.ErrInvalid, v)
	}
	return min(n, maxV), nil
}

func int64Param(v string, def int64) (int64, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: %q is not an event id", view.ErrInvalid, v)
	}
	return n, nil
}
