package backend

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// claudeParser reads Claude Code's `--output-format stream-json --verbose`
// output: one JSON object per line, of types system (init, api_retry, ...),
// assistant, user, result, rate_limit_event and others it ignores.
type claudeParser struct {
	rep     report
	success bool   // the last result record had is_error false
	errText string // the error text of a failed result
}

var _ Reporter = (*claudeParser)(nil)

func newClaudeParser(now func() time.Time) *claudeParser {
	return &claudeParser{rep: newReport(now)}
}

// claudeLine holds the fields of every line type the parser reads.
type claudeLine struct {
	Type    string `json:"type"`
	Subtype string `json:"subtype"`
	Model   string `json:"model"` // system/init

	// system/api_retry
	RetryDelayMS float64 `json:"retry_delay_ms"`
	ErrorStatus  int     `json:"error_status"`
	// api_retry and assistant: "authentication_failed", "rate_limit", ...
	Error string `json:"error"`

	// assistant and user; a subagent's lines name the tool call that runs it
	ParentToolUseID string `json:"parent_tool_use_id"`
	Message         *struct {
		ID      string          `json:"id"`
		Model   string          `json:"model"`
		Usage   *claudeUsage    `json:"usage"`
		Content json.RawMessage `json:"content"` // a string in a user's prompt
	} `json:"message"`
	APIError       string           `json:"api_error"` // "connection_failed"
	TerminalReason string           `json:"terminal_reason"`
	APIErrorStatus int              `json:"api_error_status"`
	RateLimitInfo  *claudeRateLimit `json:"rate_limit_info"`

	// result
	IsError      json.RawMessage `json:"is_error"` // a result record only if true or false
	Result       string          `json:"result"`
	TotalCostUSD float64         `json:"total_cost_usd"`
	Usage        *claudeUsage    `json:"usage"`
}

type claudeRateLimit struct {
	Status   string  `json:"status"` // "allowed", "allowed_warning", "rejected"
	ResetsAt float64 `json:"resetsAt"`
}

type claudeUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
}

func (u *claudeUsage) usage() Usage {
	return Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CacheReadTokens: u.CacheReadInputTokens, CacheWriteTokens: u.CacheCreationInputTokens}
}

type claudeBlock struct {
	Type      string          `json:"type"`
	ID        string          `json:"id"`          // tool_use
	Name      string          `json:"name"`        // tool_use
	Input     json.RawMessage `json:"input"`       // tool_use
	ToolUseID string          `json:"tool_use_id"` // tool_result
	IsError   bool            `json:"is_error"`    // tool_result
}

// Line is one switch over the stream's event types, in the order the CLI
// documents them.
func (p *claudeParser) Line(line []byte) {
	if !jsonObject(line) {
		return // before l, which escapes to the heap: a line of anything else allocates nothing
	}
	var l claudeLine
	if !decodeLine(line, &l) {
		p.rep.tampered(line, `"type":"tool_use"`)
		return
	}
	switch l.Type {
	case "system":
		if l.Subtype == "init" {
			p.rep.setModel(l.Model)
		}
		if l.Subtype != "api_retry" {
			return
		}
		p.apiError(l.ErrorStatus, l.Error, nil)
		// A retried request with no status lost its connection.
		if l.ErrorStatus == 0 && (l.Error == "unknown" || l.Error == "") {
			p.rep.providerError("network error (connection failed)")
		}
		// The delay before a rate-limited retry honours the API's
		// retry-after: the earliest the limit can have reset.
		if (l.ErrorStatus == http.StatusTooManyRequests || l.Error == "rate_limit") &&
			l.RetryDelayMS > 0 && l.RetryDelayMS < 1e10 {
			p.rep.rateLimited(p.rep.now().Add(time.Duration(l.RetryDelayMS * float64(time.Millisecond))))
		}
	case "assistant", "user":
		p.apiError(l.APIErrorStatus, l.Error, l.RateLimitInfo)
		if l.APIError == "connection_failed" {
			p.rep.providerError("network error (connection failed)")
		}
		if l.Message == nil {
			return
		}
		if l.Type == "assistant" && l.Message.Model != "<synthetic>" {
			p.rep.setModel(l.Message.Model)
			if u := l.Message.Usage; u != nil {
				p.rep.message(l.Message.ID, u.usage())
			}
		}
		// A subagent's turns are not the session's (--max-turns counts the
		// main loop only); its tool calls are.
		main := l.ParentToolUseID == ""
		if l.Type == "assistant" && main {
			p.rep.output()
		}
		var blocks []claudeBlock
		if json.Unmarshal(l.Message.Content, &blocks) != nil {
			return // a plain string: no tool calls
		}
		for _, b := range blocks {
			switch b.Type {
			case "tool_use", "server_tool_use", "mcp_tool_use":
				p.rep.toolStart(b.ID, b.Name, inputSummary(b.Input), main)
			case "tool_result":
				p.rep.toolEnd(b.ToolUseID, b.IsError, main)
			}
		}
	case "rate_limit_event":
		if l.RateLimitInfo != nil && l.RateLimitInfo.Status == "rejected" {
			p.rep.rateLimited(unixTime(l.RateLimitInfo.ResetsAt))
		}
	case "result":
		isErr, known := claudeBool(l.IsError)
		if !known {
			return
		}
		p.rep.resultAt = p.rep.now()
		p.rep.turnLimit = p.rep.turnLimit || l.Subtype == "error_max_turns"
		p.apiError(l.APIErrorStatus, "", nil)
		if isErr && l.TerminalReason == "api_error" && l.APIErrorStatus == 0 {
			p.rep.providerError("API error: " + oneLineInput(l.Result, 200))
		}
		if u := l.Usage; u != nil {
			// Each result reports the whole session so far.
			p.rep.usage = u.usage()
			p.rep.usage.CostUSD = l.TotalCostUSD
		}
		p.rep.text = excerpt(l.Result)
		p.success = !isErr
		p.errText = ""
		if isErr {
			p.errText = l.Result
			if p.errText == "" {
				p.errText = l.Subtype
			}
		}
	}
}

// claudeBool reads a JSON boolean; known is false for anything else (a
// decoder leaves a *bool set to false on a type error, so it is not used).
func claudeBool(raw json.RawMessage) (v, known bool) {
	switch string(raw) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// apiError classifies an API error that Claude Code reports: the status of
// a request it will retry (api_retry) or gave up on (an assistant message
// with is_api_error_message, the result).
func (p *claudeParser) apiError(status int, errType string, rl *claudeRateLimit) {
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		p.rep.setFatal("authentication failed: the API answered " + strconv.Itoa(status) + " " +
			http.StatusText(status) + " (invalid API key or login?)")
	case errType == "authentication_failed":
		p.rep.setFatal("authentication failed (invalid API key or login?)")
	case status == http.StatusTooManyRequests || errType == "rate_limit":
		var until time.Time
		if rl != nil {
			until = unixTime(rl.ResetsAt)
		}
		p.rep.rateLimited(until)
	case status >= 500:
		p.rep.providerError("API error " + httpStatus(status))
	case errType == "overloaded" || errType == "server_error":
		p.rep.providerError("API error: " + errType)
	}
}

func (p *claudeParser) Fatal() string { return p.rep.fatal }

func (p *claudeParser) Exit(int) {}

func (p *claudeParser) Verdict() (bool, string) { return p.success, p.errText }

func (p *claudeParser) Report(r *Result) { p.rep.fill(r) }

func (p *claudeParser) OnTool(fn func(ToolCall)) { p.rep.onTool = fn }

func (p *claudeParser) Turns() (int, bool) { return p.rep.turns, p.rep.settled() }

func (p *claudeParser) OnToolStart(fn func(ToolCall)) { p.rep.onStart = fn }

func (p *claudeParser) Progress() Progress { return p.rep.progress() }
