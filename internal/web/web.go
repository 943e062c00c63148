// Package web is the dashboard on the `listen` address: one page at /
// (assets embedded in the binary, nothing loaded from elsewhere) and the
// JSON API under /api/ it is built on, with live updates by Server-Sent
// Events. Reading is open to whoever reaches the listener; changing
// anything needs web.token as a bearer token, and without a token every
// change is refused. docs/web.md documents the API.
package web

import (
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"io/fs"
	"net"
	"net/http"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/view"
)

//go:embed assets
var assets embed.FS

// Options configure a Server.
type Options struct {
	Service *view.Service
	// Token is web.token as configured now ("": read-only); a reload may
	// change it.
	Token   func() string
	Version string
	// LoopbackOnly refuses requests whose Host header is not a loopback
	// name or address: the listener is on loopback, so any other Host is a
	// web page elsewhere pointing a name at this machine (DNS rebinding).
	LoopbackOnly bool
	Log          *zap.Logger
}

// Server is the dashboard and its API. Its streams end when the Service's
// Base does: end it before shutting the http.Server down.
type Server struct {
	opts   Options
	static http.Handler
}

// New returns a Server.
func New(opts Options) *Server {
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if opts.Token == nil {
		opts.Token = func() string { return "" }
	}
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is part of the binary
	}
	return &Server{opts: opts, static: http.FileServerFS(sub)}
}

// Handler serves / and /api/.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.page)
	mux.Handle("GET /assets/", http.StripPrefix("/assets", s.static))
	s.apiRoutes(mux)
	return s.guard(mux)
}

// page is the dashboard.
func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	http.ServeFileFS(w, r, assets, "assets/index.html")
}

// guard adds the security headers to every response and keeps requests
// for another host out.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		if s.opts.LoopbackOnly && !loopbackHost(r.Host) {
			view.WriteJSON(w, http.StatusMisdirectedRequest, view.ErrorBody{Error: "host " + strconv.Quote(r.Host) +
				" is not this machine's loopback: open the dashboard at the listen address"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHost: the Host header names localhost or a loopback address.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// authorize lets a write through when it carries the configured token.
// Without a configured token nothing may be written (403); a missing or
// wrong token is 401.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) bool {
	token := s.opts.Token()
	if token == "" {
		view.WriteJSON(w, http.StatusForbidden, view.ErrorBody{Error: "the dashboard is read-only: set web.token in swarmd.yaml to allow changes"})
		return false
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	// Compare digests: equal lengths, so the time taken says nothing
	// about the token's length or where it differs.
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(token))
	if !ok || subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="swarmd"`)
		view.WriteJSON(w, http.StatusUnauthorized, view.ErrorBody{Error: "this change needs Authorization: Bearer <web.token>"})
		return false
	}
	return true
}
