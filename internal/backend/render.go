package backend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Bounds of what the Renderer shows of one item.
const (
	renderWidth     = 240  // runes of a line of tool output, of a command, of an error
	renderTextWidth = 2000 // runes of a line of the assistant's text
	renderTextLines = 60   // lines of one assistant message or result text
	renderOutLines  = 8    // lines of one tool's output or one error
	renderMaxIDs    = 4096 // Codex item ids remembered per session
	renderTextHeads = 3    // lines shown of a run of non-JSON lines
)

// Renderer turns a session log (swarmd's header and footer lines around what
// the backend printed) into text for people: the assistant's text, each tool
// call with its command or input summary and a bounded output, errors, and
// the result with its tokens and cost. It reads the stream-json of Claude
// Code, Codex and Gemini CLI through the parsers' own line types, and feeds
// every line to the format's parser too, so that the tokens and cost it shows
// are the ones swarmd records. Lines that are not JSON (a CLI's warnings, a
// JavaScript stack trace) are shown bounded: the first line of a run, then
// how many more there were.
//
// It is an io.Writer that renders each line as soon as it is complete, so a
// log being followed renders as it grows; Close renders what is left. A
// Renderer is not safe for concurrent use.
type Renderer struct {
	w     io.Writer
	err   error // the first write error; Write returns it from then on
	split *LineSplitter

	// Per session attempt: reset at every start header.
	format    logFormat
	parser    Reporter
	started   map[string]bool // Codex tool items shown when they started
	lastText  string          // the last assistant text shown: a result repeating it is not shown again
	assistant strings.Builder // Gemini's assistant deltas, shown when the message ends

	// A run of non-JSON lines shows the first renderTextHeads lines that
	// are not indented (a stack trace's first line, not its frames) and
	// counts the others.
	textShown, textHidden int
}

// NewRenderer returns a Renderer writing to w.
func NewRenderer(w io.Writer) *Renderer {
	r := &Renderer{w: w, started: make(map[string]bool)}
	r.split = NewLineSplitter(0, r.line)
	return r
}

// Write renders every complete line of p. It fails only when w does.
func (r *Renderer) Write(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	_, _ = r.split.Write(p)
	return len(p), r.err
}

// Close renders a last line without a newline and ends the open runs (the
// count of a run of text lines, a Gemini message). It does not close w.
func (r *Renderer) Close() error {
	if r.err != nil {
		return r.err
	}
	r.split.Flush()
	r.endText()
	r.endAssistant()
	return r.err
}

type logFormat uint8

const (
	formatUnknown logFormat = iota
	formatClaude
	formatCodex
	formatGemini
)

// sessionMark starts swarmd's header and footer lines of a session log.
const sessionMark = "=== swarmd session "

func (r *Renderer) line(b []byte) {
	if bytes.HasPrefix(b, []byte(sessionMark)) {
		r.endText()
		r.endAssistant()
		if bytes.Contains(b, []byte(" started ")) {
			r.reset()
		}
		r.emit(clean(cut(string(b), renderWidth)))
		return
	}
	t := bytes.TrimSpace(b)
	if len(t) == 0 || t[0] != '{' || !r.json(t) {
		r.text(b)
	}
}

// reset forgets the previous attempt: the next one may be another backend's.
func (r *Renderer) reset() {
	r.format, r.parser, r.lastText = formatUnknown, nil, ""
	clear(r.started)
}

// json renders a line that looks like JSON; false if it is not one.
func (r *Renderer) json(line []byte) bool {
	if r.format == formatUnknown {
		r.format = detectFormat(line)
		switch r.format {
		case formatClaude:
			r.parser = newClaudeParser(nil)
		case formatCodex:
			r.parser = newCodexParser(nil)
		case formatGemini:
			r.parser = newGeminiParser(nil)
		}
	}
	if r.parser != nil {
		r.parser.Line(line)
	}
	switch r.format {
	case formatClaude:
		return r.claude(line)
	case formatCodex:
		return r.codex(line)
	case formatGemini:
		return r.gemini(line)
	}
	return r.unknownJSON(line)
}

// detectFormat tells the three formats apart by their line types; a result
// line is Claude's if it has is_error and Gemini's if it has a status.
func detectFormat(line []byte) logFormat {
	var p struct {
		Type    string          `json:"type"`
		IsError json.RawMessage `json:"is_error"`
		Status  string          `json:"status"`
	}
	if !decodeLine(line, &p) {
		return formatUnknown
	}
	if strings.HasPrefix(p.Type, "thread.") || strings.HasPrefix(p.Type, "turn.") || strings.HasPrefix(p.Type, "item.") {
		return formatCodex
	}
	switch p.Type {
	case "system", "assistant", "user", "rate_limit_event", "stream_event":
		return formatClaude
	case "init", "message", "tool_use", "tool_result":
		return formatGemini
	case "result":
		if len(p.IsError) > 0 {
			return formatClaude
		}
		if p.Status != "" {
			return formatGemini
		}
	}
	return formatUnknown
}

// unknownJSON shows an error line of a format not known yet (Codex and
// Gemini both print {"type":"error","message":...}); other JSON is shown as
// text, so that a CLI's new format is not hidden.
func (r *Renderer) unknownJSON(line []byte) bool {
	var l geminiLine
	if !decodeLine(line, &l) {
		return false
	}
	r.endText()
	r.endAssistant()
	if l.Type == "error" && l.Message != "" {
		r.errorText(l.Message)
		return true
	}
	return false
}

// text shows a line that is not JSON, untrimmed, if it starts an entry of a
// run of them, and counts it otherwise.
func (r *Renderer) text(line []byte) {
	r.endAssistant()
	if len(bytes.TrimSpace(line)) == 0 {
		if r.textShown > 0 {
			r.textHidden++
		}
		return // blank lines do not start a run
	}
	if r.textShown >= renderTextHeads || r.textShown > 0 && continues(line) {
		r.textHidden++
		return
	}
	r.hiddenText()
	r.textShown++
	r.emit("  " + clean(cut(string(bytes.TrimSpace(line)), renderWidth)))
}

// continues reports a line that continues the one before: indented (a
// stack frame) or closing a bracket.
func continues(line []byte) bool {
	switch line[0] {
	case ' ', '\t', '}', ']', ')':
		return true
	}
	return false
}

// hiddenText says how many lines of the run were not shown since the last one that was.
func (r *Renderer) hiddenText() {
	if r.textHidden > 0 {
		r.emit("  … (" + plural(r.textHidden, "more line") + ")")
		r.textHidden = 0
	}
}

func (r *Renderer) endText() {
	r.hiddenText()
	r.textShown = 0
}

// assistantText shows text the model wrote.
func (r *Renderer) assistantText(s string) {
	s = strings.TrimSpace(s)
	if s == "" {
		return
	}
	r.lastText = s
	r.block("", s, renderTextLines, renderTextWidth)
}

func (r *Renderer) endAssistant() {
	if r.assistant.Len() > 0 {
		s := r.assistant.String()
		r.assistant.Reset()
		r.assistantText(s)
	}
}

// toolCall shows a call: its tool and its command or main argument.
func (r *Renderer) toolCall(name, summary string) {
	line := "→ " + name
	if summary != "" {
		first, rest, more := strings.Cut(strings.TrimSpace(summary), "\n")
		line += ": " + first
		if more {
			line += " (+" + plural(strings.Count(rest, "\n")+1, "line") + ")"
		}
	}
	r.emit(clean(cut(line, renderWidth)))
}

// toolOutput shows a tool's output, bounded; failed marks an error result.
func (r *Renderer) toolOutput(out string, failed bool) {
	if failed {
		first, rest, _ := strings.Cut(strings.TrimSpace(out), "\n")
		if first == "" {
			first = "failed"
		}
		r.emit("  ✗ " + clean(cut(first, renderWidth)))
		out = rest
	}
	r.block("  │ ", out, renderOutLines, renderWidth)
}

// errorText shows an error: its first lines, bounded.
func (r *Renderer) errorText(msg string) {
	first, rest, _ := strings.Cut(strings.TrimSpace(msg), "\n")
	r.emit("✗ " + clean(cut(first, renderWidth)))
	r.block("  ", rest, renderOutLines, renderWidth)
}

// block shows at most max lines of s, each cut to width runes, with prefix,
// then how many lines were left out.
func (r *Renderer) block(prefix, s string, max, width int) {
	s = strings.TrimRight(s, " \t\r\n")
	for n := 0; s != ""; n++ {
		if n == max {
			r.emit(prefix + "… (" + plural(strings.Count(s, "\n")+1, "more line") + ")")
			return
		}
		var line string
		line, s, _ = strings.Cut(s, "\n")
		r.emit(prefix + clean(cut(strings.TrimSuffix(line, "\r"), width)))
	}
}

// usage shows the tokens and cost the parser has counted so far, after a
// result.
func (r *Renderer) usage() {
	if r.parser == nil {
		return
	}
	var res Result
	r.parser.Report(&res)
	if u := usageText(res.Usage); u != "" {
		r.emit("  " + u)
	}
}

// usageText is "tokens: 360 in · 90 out · 21 cache read · $0.0033", "" for
// a session that reported nothing.
func usageText(u Usage) string {
	var parts []string
	for _, t := range []struct {
		n    int64
		what string
	}{{u.InputTokens, "in"}, {u.OutputTokens, "out"}, {u.CacheReadTokens, "cache read"}, {u.CacheWriteTokens, "cache write"}} {
		if t.n > 0 {
			parts = append(parts, strconv.FormatInt(t.n, 10)+" "+t.what)
		}
	}
	s := ""
	if len(parts) > 0 {
		s = "tokens: " + strings.Join(parts, " · ")
	}
	if u.CostUSD > 0 && u.CostUSD < 1e9 {
		if s != "" {
			s += " · "
		}
		s += "cost $" + strconv.FormatFloat(u.CostUSD, 'f', 4, 64)
	}
	return s
}

// emit writes one line; after a write error it writes nothing more.
func (r *Renderer) emit(line string) {
	if r.err != nil {
		return
	}
	if _, err := io.WriteString(r.w, line+"\n"); err != nil {
		r.err = fmt.Errorf("render session log: %w", err)
	}
}

// inputSummaryKeys are the arguments that say what a tool call does, in the
// order they are looked for: Bash's and run_shell_command's command, the
// file of Read, Write, Edit, read_file and write_file, a search's pattern.
var inputSummaryKeys = []string{"command", "file_path", "absolute_path", "notebook_path", "path",
	"pattern", "url", "query", "description", "prompt"}

// inputSummary is a tool call's main argument, or its arguments as compact JSON.
func inputSummary(raw json.RawMessage) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) == nil {
		for _, k := range inputSummaryKeys {
			var s string
			if json.Unmarshal(m[k], &s) == nil && s != "" {
				return s
			}
		}
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil || buf.String() == "{}" || buf.String() == "null" {
		return ""
	}
	return cut(buf.String(), renderWidth)
}

// cut keeps at most n runes of s, marking a cut with "…".
func cut(s string, n int) string {
	if len(s) <= n { // as many bytes: no more runes
		return s
	}
	i := 0
	for pos := range s {
		if i == n-1 { // s[pos:] starts the nth rune: keep it only if it is the last
			if utf8.RuneCountInString(s[pos:]) == 1 {
				return s
			}
			return s[:pos] + "…"
		}
		i++
	}
	return s
}

// clean makes text safe to print on a terminal: invalid UTF-8 and control
// characters (escape sequences in a tool's output) become U+FFFD, tabs spaces.
func clean(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.Map(func(c rune) rune {
		switch {
		case c == '\t':
			return ' '
		case c < 0x20 || c == 0x7f || c >= 0x80 && c < 0xa0:
			return utf8.RuneError
		}
		return c
	}, s)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// millis renders a duration in milliseconds as "0.3s", "12s" or "5m3s".
func millis(ms float64) string {
	if ms <= 0 || ms > 1e12 {
		return ""
	}
	d := time.Duration(ms * float64(time.Millisecond))
	if d < 10*time.Second {
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	}
	return d.Round(time.Second).String()
}
