package main

import (
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"

	"go.uber.org/zap"
)

// pprofEnv names an address (host:port, loopback only) on which `swarmd
// run` serves Go's profiles (/debug/pprof/): for measuring the daemon under
// load, not for production. Unset, nothing listens.
const pprofEnv = "SWARMD_PPROF_ADDR"

// servePprof starts the profile server when pprofEnv is set; stop closes it.
func servePprof(log *zap.Logger) (stop func(), err error) {
	addr := os.Getenv(pprofEnv)
	if addr == "" {
		return func() {}, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, errors.New(pprofEnv + ": profiles are served on a loopback address only")
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	runtime.SetBlockProfileRate(int(1e6)) // one sample per millisecond blocked
	runtime.SetMutexProfileFraction(10)
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(l) }()
	log.Warn("serving Go profiles ("+pprofEnv+")", zap.String("addr", l.Addr().String()))
	return func() { _ = srv.Close() }, nil
}
