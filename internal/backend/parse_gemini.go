package backend

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// geminiParser reads Gemini CLI's `--output-format stream-json` output:
// init, message (user and assistant, the latter in deltas), tool_use,
// tool_result, error and result lines.
type geminiParser struct {
	rep      report
	success  bool
	errText  string
	lastErr  string          // the last error line: the cause when the result has no error object
	text     strings.Builder // assistant text since the last tool call
	textFull bool            // text holds MaxResultText bytes already
}

var _ Reporter = (*geminiParser)(nil)

func newGeminiParser(now func() time.Time) *geminiParser {
	return &geminiParser{rep: newReport(now)}
}

type geminiLine struct {
	Type       string          `json:"type"`
	Model      string          `json:"model"`   // init
	Role       string          `json:"role"`    // message
	Content    string          `json:"content"` // message
	ToolName   string          `json:"tool_name"`
	ToolID     string          `json:"tool_id"`
	Parameters json.RawMessage `json:"parameters"` // tool_use
	Message    string          `json:"message"`    // error
	Status     string          `json:"status"`     // result: "success" or "error"
	Error      *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
	Stats *struct {
		InputTokens  int64 `json:"input_tokens"` // cached ones included
		OutputTokens int64 `json:"output_tokens"`
		Cached       int64 `json:"cached"`
		Models       map[string]struct {
			TotalTokens int64 `json:"total_tokens"`
		} `json:"models"`
	} `json:"stats"`
}

func (p *geminiParser) Line(line []byte) {
	if t := bytes.TrimSpace(line); len(t) == 0 || t[0] != '{' {
		p.retryLine(line) // Gemini CLI's retry messages are plain lines
	}
	if !jsonObject(line) {
		return // see claudeParser.Line
	}
	var l geminiLine
	if !decodeLine(line, &l) {
		p.rep.tampered(line, `"type":"tool_use"`)
		return
	}
	switch l.Type {
	case "init":
		if l.Model != "auto" { // the CLI picks per request
			p.rep.setModel(l.Model)
		}
	case "message":
		if l.Role != "assistant" {
			return
		}
		p.rep.output()
		if !p.textFull {
			p.text.WriteString(l.Content)
			p.textFull = p.text.Len() >= MaxResultText
		}
	case "tool_use":
		p.rep.toolStart(l.ToolID, l.ToolName, inputSummary(l.Parameters), true)
		p.text.Reset() // the result is what the model says after its last tool call
		p.textFull = false
	case "tool_result":
		p.rep.toolEnd(l.ToolID, l.Status == "error", true)
	case "error":
		p.apiError(l.Message)
		p.rep.turnLimit = p.rep.turnLimit || strings.Contains(l.Message, geminiTurnLimit)
		if l.Message != "" {
			p.lastErr = l.Message
		}
	case "result":
		p.rep.resultAt = p.rep.now()
		p.rep.text = excerpt(p.text.String())
		if s := l.Stats; s != nil {
			cached := min(s.Cached, s.InputTokens)
			p.rep.usage = Usage{InputTokens: s.InputTokens - cached, OutputTokens: s.OutputTokens, CacheReadTokens: cached}
			// The model that used the most tokens is the session's.
			var most int64
			for m, u := range s.Models {
				if u.TotalTokens > most || u.TotalTokens == most && m < p.rep.model {
					most = u.TotalTokens
					p.rep.setModel(m)
				}
			}
		}
		p.success = l.Status == "success"
		p.errText = ""
		if !p.success && l.Error != nil {
			p.errText = l.Error.Message
			p.apiError(l.Error.Message)
			p.rep.turnLimit = p.rep.turnLimit || strings.Contains(l.Error.Message, "max session turns")
		}
	}
}

// apiError classifies the text of an API error, which Gemini CLI passes on
// as the API's JSON: {"error":{"code":429,...,"status":"RESOURCE_EXHAUSTED"}}.
// A quota error it gave up on says "Suggested retry after 20s." instead
// (its RetryInfo, in words).
func (p *geminiParser) apiError(msg string) {
	switch {
	case strings.Contains(msg, `"code":429`) || strings.Contains(msg, "RESOURCE_EXHAUSTED") ||
		strings.Contains(msg, "Suggested retry after"):
		var until time.Time
		if d, ok := retryHint(msg); ok {
			until = p.rep.now().Add(d)
		}
		p.rep.rateLimited(until)
	default:
		p.rep.providerError(serverTrouble(msg))
	}
}

// retryLine reads Gemini CLI's own retries, which it reports only as text
// (on stderr), while the session goes on: "Attempt 3 failed with status
// 500. Retrying with backoff... _ApiError: {...}". A server error or a
// rate limit shows then, not only when the CLI gives up.
func (p *geminiParser) retryLine(line []byte) {
	const failed = " failed with status "
	if !bytes.HasPrefix(line, []byte("Attempt ")) {
		return // before the copy: most lines are not
	}
	s := string(line)
	i := strings.Index(s, failed)
	if i < 0 {
		return
	}
	rest := s[i+len(failed):]
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	code, err := strconv.Atoi(rest[:n])
	switch {
	case err != nil:
	case code == http.StatusTooManyRequests:
		var until time.Time
		if d, ok := retryHint(s); ok {
			until = p.rep.now().Add(d)
		}
		p.rep.rateLimited(until)
	case code >= 500:
		p.rep.providerError("API error " + httpStatus(code))
	}
}

func (p *geminiParser) Fatal() string { return p.rep.fatal }

// Exit reads what Gemini CLI says only in its exit code: on an API error it
// exits with the HTTP status mod 256 (401 -> 145, 403 -> 147, 429 -> 173),
// and with 41 when its authentication is not set up.
func (p *geminiParser) Exit(code int) {
	switch code {
	case 145:
		p.rep.setFatal("authentication failed: the API answered 401 Unauthorized (exit 145; invalid API key?)")
	case 147:
		p.rep.setFatal("authentication failed: the API answered 403 Forbidden (exit 147)")
	case 41:
		p.rep.setFatal("authentication is not configured (exit 41)")
	case 173:
		p.rep.rateLimited(time.Time{})
	case 244, 246, 247, 248: // 500, 502, 503, 504
		p.rep.providerError("API error " + httpStatus(code+256))
	}
}

// Verdict: a failed result without an error object (an empty model
// response) is explained by the error line before it, as is an exit without
// any result.
func (p *geminiParser) Verdict() (bool, string) {
	if !p.success && p.errText == "" {
		return false, p.lastErr
	}
	return p.success, p.errText
}

func (p *geminiParser) Report(r *Result) { p.rep.fill(r) }

func (p *geminiParser) OnTool(fn func(ToolCall)) { p.rep.onTool = fn }

func (p *geminiParser) Turns() (int, bool) { return p.rep.turns, p.rep.settled() }

func (p *geminiParser) OnToolStart(fn func(ToolCall)) { p.rep.onStart = fn }

func (p *geminiParser) Progress() Progress { return p.rep.progress() }

// geminiTurnLimit is the error Gemini CLI prints when it stops at its own
// model.maxSessionTurns setting.
const geminiTurnLimit = "Maximum session turns exceeded"
