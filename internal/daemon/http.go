package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"
)

// httpServer serves /metrics, /healthz, /readyz and the web dashboard (/ and
// /api/) on the `listen` address.
type httpServer struct {
	srv    *http.Server
	ln     net.Listener
	log    *zap.Logger
	served chan struct{} // closed when Serve has returned
}

// readiness reports why the daemon is not ready, or "" when it is.
type readiness func() string

// startHTTP serves on addr; /readyz says ready (or why not) and, on the
// lines after, what about itself (info, nil: nothing).
func startHTTP(addr string, metrics http.Handler, ready readiness, info func() string, web http.Handler, log *zap.Logger) (*httpServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s (config key listen): %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		more := ""
		if info != nil {
			more = info()
		}
		if why := ready(); why != "" {
			http.Error(w, strings.TrimSpace(why+"\n"+more), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
		if more != "" {
			fmt.Fprintln(w, more)
		}
	})
	if web != nil {
		mux.Handle("/", web)
	}
	h := &httpServer{
		srv:    &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		ln:     ln,
		log:    log,
		served: make(chan struct{}),
	}
	go func() {
		defer close(h.served)
		if err := h.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", zap.Error(err))
		}
	}()
	log.Info("serving metrics", zap.String("addr", ln.Addr().String()))
	return h, nil
}

// Addr is the bound address (useful with port 0).
func (h *httpServer) Addr() string { return h.ln.Addr().String() }

// Close stops the server (in-flight requests get two seconds) and returns
// once its Serve goroutine has.
func (h *httpServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := h.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, h.srv.Close()) // streams that outlived the timeout
	}
	<-h.served
	return err
}
