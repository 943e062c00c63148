package backend

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"slices"
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
	open      map[string]openCall // tool call id -> the call, until it ends
	seen      map[string]struct{} // tool call ids started, so a repeated start counts once
	unnamed   []openCall          // calls without an id: they can never be seen to end
	calls     int                 // tool calls started, for openCall.n
	onTool    func(ToolCall)
	onStart   func(ToolCall)
	closed    bool // Report ran: every call was handed to onTool
	text      string
	resultAt  time.Time
	fatal     string
	limited   bool
	retryAt   time.Time
	provErr   string // the first provider error (5xx, overload, network)
	model     string

	// live is the usage of the model responses seen so far, for a CLI that
	// reports each response's usage as it streams (Claude Code) and the
	// session's total only in its result: a session cancelled before its
	// result still has a usage. byMsg is each response's latest usage.
	live  Usage
	byMsg map[string]Usage

	// Turns: a turn is one model response, which begins with the first
	// model output (text, reasoning, a tool call) after the prompt or after
	// a tool result.
	turns     int
	turnOpen  bool // model output seen since the last tool result
	turnTools bool // the current turn started tool calls
	turnLimit bool // the CLI said it stopped at its own turn limit
}

// openCall is a call that has started and not ended; idx is its index in
// tools, -1 past MaxToolCalls.
type openCall struct {
	call ToolCall
	idx  int
	n    int
}

func newReport(now func() time.Time) report {
	if now == nil {
		now = time.Now
	}
	return report{now: now, open: make(map[string]openCall), seen: make(map[string]struct{})}
}

// output notes model output: the first after a tool result starts a turn.
func (r *report) output() {
	if !r.turnOpen {
		r.turns++
		r.turnOpen, r.turnTools = true, false
	}
}

// toolStart records a tool call, with a summary of its input (cut to
// MaxToolInput); a call with an id already seen is the same call reported
// again. turn is false for a call that is not the session's own model's (a
// subagent's): it counts as a call but plays no part in the turns.
func (r *report) toolStart(id, name, input string, turn bool) {
	if id != "" {
		if _, dup := r.seen[id]; dup {
			// Counted once, but told (the tools policy's check) each time:
			// code in the session can write the stream, and starts forged
			// ahead under the ids the CLI would use next hid a refused
			// call from the check.
			if r.onStart != nil {
				r.onStart(ToolCall{ID: id, Name: name, Input: toolInput(input)})
			}
			return
		}
		r.seen[id] = struct{}{}
	}
	if turn {
		r.output()
		r.turnTools = true
	}
	r.toolCalls++
	r.calls++
	c := ToolCall{ID: id, Name: name, Input: toolInput(input), Start: r.now()}
	if r.onStart != nil {
		r.onStart(c)
	}
	idx := -1
	if len(r.tools) < MaxToolCalls {
		idx = len(r.tools)
		r.tools = append(r.tools, c)
	}
	o := openCall{call: c, idx: idx, n: r.calls}
	if id == "" {
		if r.onTool != nil {
			r.unnamed = append(r.unnamed, o)
		}
		return
	}
	r.open[id] = o
}

// toolEnd ends a call: a tool result goes back to the model, so the turn
// that called it is over.
func (r *report) toolEnd(id string, failed, turn bool) {
	o, ok := r.open[id]
	if !ok {
		return
	}
	delete(r.open, id)
	if turn {
		r.turnOpen = false
	}
	o.call.End, o.call.Failed = r.now(), failed
	if o.idx >= 0 {
		r.tools[o.idx] = o.call
	}
	if r.onTool != nil && !r.closed {
		r.onTool(o.call)
	}
}

// settled reports whether the current turn called tools and all of them
// have ended: the CLI is about to ask the model for the next turn.
func (r *report) settled() bool {
	return r.turns > 0 && !r.turnOpen && r.turnTools && len(r.open) == 0
}

// closeCalls hands the calls that never ended to onTool, in the order they
// started, once.
func (r *report) closeCalls() {
	if r.closed {
		return
	}
	r.closed = true
	if r.onTool == nil {
		return
	}
	left := r.unnamed
	for _, o := range r.open {
		left = append(left, o)
	}
	slices.SortFunc(left, func(a, b openCall) int { return a.n - b.n })
	for _, o := range left {
		r.onTool(o.call)
	}
}

// toolInput bounds a tool call's input summary: valid UTF-8, at most
// MaxToolInput bytes.
func toolInput(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= MaxToolInput {
		return s
	}
	cut := MaxToolInput
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
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

// providerError records the first server error, overload or network error
// of the provider: later ones are usually the same trouble again.
func (r *report) providerError(cause string) {
	if r.provErr == "" && cause != "" {
		r.provErr = cause
	}
}

// setModel records the model the stream names; later names win (a CLI
// may announce a default, then the model it really used).
func (r *report) setModel(m string) {
	if m != "" && m != "<synthetic>" {
		r.model = m
	}
}

// message records the usage of one model response as it streams: the
// latest report of each response counts, field by field.
func (r *report) message(id string, u Usage) {
	if id == "" {
		return
	}
	if r.byMsg == nil {
		r.byMsg = make(map[string]Usage)
	}
	old := r.byMsg[id]
	u = Usage{InputTokens: max(u.InputTokens, old.InputTokens), OutputTokens: max(u.OutputTokens, old.OutputTokens),
		CacheReadTokens: max(u.CacheReadTokens, old.CacheReadTokens), CacheWriteTokens: max(u.CacheWriteTokens, old.CacheWriteTokens)}
	r.byMsg[id] = u
	r.live.InputTokens += u.InputTokens - old.InputTokens
	r.live.OutputTokens += u.OutputTokens - old.OutputTokens
	r.live.CacheReadTokens += u.CacheReadTokens - old.CacheReadTokens
	r.live.CacheWriteTokens += u.CacheWriteTokens - old.CacheWriteTokens
}

// usageSoFar is the usage the CLI reported for the session, and never less
// than the sum of its responses' usage, field by field; never negative.
// Code in a session can write to the CLI's stream (the CLI runs in the
// same sandbox): a record that reports less than the responses streamed,
// or a negative count (which priced into a negative cost and credited the
// budget), is not believed as far as the stream itself says otherwise.
func (r *report) usageSoFar() Usage {
	u := r.usage
	return Usage{
		InputTokens:      max(u.InputTokens, r.live.InputTokens, 0),
		OutputTokens:     max(u.OutputTokens, r.live.OutputTokens, 0),
		CacheReadTokens:  max(u.CacheReadTokens, r.live.CacheReadTokens, 0),
		CacheWriteTokens: max(u.CacheWriteTokens, r.live.CacheWriteTokens, 0),
		CostUSD:          max(u.CostUSD, 0),
	}
}

func (r *report) progress() Progress {
	return Progress{Usage: r.usageSoFar(), Model: r.model, RateLimited: r.limited, RateLimitedUntil: r.retryAt,
		ProviderError: r.provErr}
}

func (r *report) fill(res *Result) {
	r.closeCalls()
	res.Usage = r.usageSoFar()
	res.Model = r.model
	res.ProviderError = r.provErr
	res.Turns = r.turns
	res.TurnLimit = r.turnLimit
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

// httpStatus is "500 Internal Server Error", or "529" for a status Go has
// no text for.
func httpStatus(code int) string {
	if t := http.StatusText(code); t != "" {
		return strconv.Itoa(code) + " " + t
	}
	return strconv.Itoa(code)
}

// serverTrouble names the provider trouble an error message describes: a
// server error, an overload or a lost connection; "" for anything else.
func serverTrouble(msg string) string {
	lower := strings.ToLower(msg)
	for _, needle := range []string{
		"internal server error", "bad gateway", "service unavailable", "gateway timeout", "overloaded", "high demand",
		"unexpected status 5", `"code":500`, `"code":502`, `"code":503`, `"code":504`, `"status":"internal"`,
		`"status":"unavailable"`, "stream disconnected", "error sending request", "fetch failed", "econnreset",
		"econnrefused", "etimedout", "socket hang up", "connection reset", "connection refused",
	} {
		if strings.Contains(lower, needle) {
			return oneLineInput(msg, 200)
		}
	}
	return ""
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
	i := bytes.IndexByte(line, '{')
	if i < 0 {
		return false
	}
	// From the first brace: bytes before it are not the CLI's. Code in the
	// session can write into the CLI's stream without a newline, and what
	// it wrote then began the CLI's next line, which no longer parsed: a
	// refused tool call went unchecked.
	line = bytes.TrimSpace(line[i:])
	err := json.Unmarshal(line, v)
	var te *json.UnmarshalTypeError
	return err == nil || errors.As(err, &te)
}

// jsonObject reports whether line may hold a JSON object: the parsers look
// no further at any other. A session that prints lines by the million (its
// log capped, its stream not) cost the daemon an allocation and a garbage
// collection's share for each, whatever the line.
func jsonObject(line []byte) bool {
	return bytes.IndexByte(line, '{') >= 0
}

// tampered notes a line that did not parse though it names a tool call
// (marker, as the CLI quotes it): a CLI writes whole JSON lines, so one
// that does not parse was written into from inside the session, which
// could hide the call from the tools policy's check. The session ends as
// at a fatal error. A line cut at DefaultMaxLine is the splitter's doing,
// not the session's.
func (r *report) tampered(line []byte, markers ...string) {
	if len(line) >= DefaultMaxLine {
		return
	}
	for _, m := range markers {
		if bytes.Contains(line, []byte(m)) {
			r.setFatal("the CLI's output was written to from inside the session: a line naming a tool call did not parse")
			return
		}
	}
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
