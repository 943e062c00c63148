package backend

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// report is what the agent CLIs' parsers learn beyond the verdict, kept the
// same way for every format. It is owned by one parser, so by one goroutine.
type report struct {
	now func() time.Time

	usage     Usage
	toolCalls int
	tools     []ToolCall
	open      map[string]int      // tool call id -> index in tools, until the call ends
	seen      map[string]struct{} // tool call ids started, so a repeated start counts once
	text      string
	resultAt  time.Time
	fatal     string
	limited   bool
	retryAt   time.Time
}

func newReport(now func() time.Time) report {
	if now == nil {
		now = time.Now
	}
	return report{now: now, open: make(map[string]int), seen: make(map[string]struct{})}
}

// toolStart records a tool call; a call with an id already seen is the same
// call reported again.
func (r *report) toolStart(id, name string) {
	if id != "" {
		if _, dup := r.seen[id]; dup {
			return
		}
		r.seen[id] = struct{}{}
	}
	r.toolCalls++
	if len(r.tools) >= MaxToolCalls {
		return
	}
	if id != "" {
		r.open[id] = len(r.tools)
	}
	r.tools = append(r.tools, ToolCall{Name: name, Start: r.now()})
}

func (r *report) toolEnd(id string) {
	if i, ok := r.open[id]; ok {
		r.tools[i].End = r.now()
		delete(r.open, id)
	}
}

// setFatal keeps the first cause: later errors are usually its echoes.
func (r *report) setFatal(cause string) {
	if r.fatal == "" {
		r.fatal = cause
	}
}

// rateLimited records a refusal for a rate limit; until is the reset time
// when the backend said it (zero otherwise). The latest reset wins: the
// agent must not come back before any of them.
func (r *report) rateLimited(until time.Time) {
	r.limited = true
	if until.After(r.retryAt) {
		r.retryAt = until
	}
}

func (r *report) fill(res *Result) {
	res.Usage = r.usage
	res.ToolCalls = r.toolCalls
	if len(r.tools) > 0 {
		res.Tools = append([]ToolCall(nil), r.tools...)
	}
	res.Text = r.text
	res.ResultAt = r.resultAt
	res.Fatal = r.fatal
	res.RateLimited = r.limited
	res.RetryAfter = r.retryAt
}

// excerpt cuts s to at most MaxResultText bytes at a rune boundary.
func excerpt(s string) string {
	if len(s) <= MaxResultText {
		return s
	}
	cut := MaxResultText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// decodeLine decodes a line of JSON output into v. It reports false for a
// line that is not a JSON object (a CLI's warnings share the pipe). A field
// of an unexpected type is left zero and the rest is still decoded: a CLI
// may change one field's shape without that hiding the others.
func decodeLine(line []byte, v any) bool {
	line = bytes.TrimSpace(line)
	if len(line) < 2 || line[0] != '{' {
		return false
	}
	err := json.Unmarshal(line, v)
	var te *json.UnmarshalTypeError
	return err == nil || errors.As(err, &te)
}

// unixTime reads a reset timestamp given in seconds or milliseconds since
// the epoch.
func unixTime(v float64) time.Time {
	switch {
	case v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) || v > 1e15:
		return time.Time{}
	case v > 1e11: // milliseconds: 1e11 seconds is the year 5138
		return time.UnixMilli(int64(v))
	}
	return time.Unix(int64(v), 0)
}

// retryHint finds how long an error message says to wait: "try again in
// 1.898s", "Please retry in 30.5s", a Gemini RetryInfo "retryDelay": "30s",
// "retry after 20 seconds".
func retryHint(msg string) (time.Duration, bool) {
	lower := strings.ToLower(msg)
	for _, needle := range []string{"try again in ", "retry in ", "retry after ", `"retrydelay":"`, `"retrydelay": "`} {
		i := strings.Index(lower, needle)
		if i < 0 {
			continue
		}
		if d, ok := parseWait(lower[i+len(needle):]); ok {
			return d, true
		}
	}
	return 0, false
}

// parseWait parses a duration at the start of s: "1.5s", "20ms", "6m0s",
// "30 seconds", "2 minutes".
func parseWait(s string) (time.Duration, bool) {
	end := 0
	for end < len(s) && (s[end] == '.' || s[end] >= '0' && s[end] <= '9' || s[end] >= 'a' && s[end] <= 'z' || s[end] == 'µ') {
		end++
	}
	tok := strings.TrimRight(s[:end], ".") // the end of a sentence
	if d, err := time.ParseDuration(tok); err == nil && d > 0 {
		return d, true
	}
	// "30 seconds": a number, a space, a unit word.
	num, err := strconv.ParseFloat(tok, 64)
	if err != nil || num <= 0 || num > 1e9 || len(tok) != end || end >= len(s) || s[end] != ' ' {
		return 0, false
	}
	unit := s[end+1:]
	for _, u := range []struct {
		word string
		d    time.Duration
	}{{"ms", time.Millisecond}, {"millisecond", time.Millisecond}, {"sec", time.Second}, {"s ", time.Second},
		{"min", time.Minute}, {"hour", time.Hour}, {"h ", time.Hour}} {
		if strings.HasPrefix(unit, u.word) {
			return time.Duration(num * float64(u.d)), true
		}
	}
	return 0, false
}
