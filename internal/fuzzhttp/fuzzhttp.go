// Package fuzzhttp is test support for fuzzing an HTTP handler in-process:
// one request built from fuzzed parts, served to the end, a stream (server-
// sent events, a followed log) ended at its first flush.
package fuzzhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"
)

// Timeout bounds one request: a stream that never flushes ends with it.
const Timeout = 5 * time.Second

// Serve serves h one request of method, target (a path and query; "/" is
// put in front when missing) and body, with setup (nil: none) filling in
// the request's other parts. ok is false for a request line that
// net/http's parser would refuse before any handler saw it.
func Serve(h http.Handler, method, target string, body []byte, setup func(*http.Request)) (rec *httptest.ResponseRecorder, ok bool) {
	if !strings.HasPrefix(target, "/") {
		target = "/" + target
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://localhost"+target, bytes.NewReader(body))
	if err != nil {
		return nil, false
	}
	if setup != nil {
		setup(req)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(endAtFlush{rec, cancel}, req)
	return rec, true
}

// endAtFlush ends its request at the first flush: a stream has answered by
// then, and would otherwise run until its client left.
type endAtFlush struct {
	*httptest.ResponseRecorder
	cancel context.CancelFunc
}

func (w endAtFlush) Flush() {
	w.ResponseRecorder.Flush()
	w.cancel()
}

// OneLineError reports whether a JSON error answer (status 400 or more,
// Content-Type application/json) holds {"error": "..."} of one line that
// says something; other answers pass.
func OneLineError(rec *httptest.ResponseRecorder) bool {
	if rec.Code < 400 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		return true
	}
	var eb struct {
		Error string `json:"error"`
	}
	return json.Unmarshal(rec.Body.Bytes(), &eb) == nil && eb.Error != "" && !strings.Contains(eb.Error, "\n")
}
