package backend

import (
	"encoding/json"
	"strings"
	"time"
)

// codexParser reads `codex exec --json` output: thread.started,
// turn.started, item.started/updated/completed, turn.completed with usage,
// turn.failed, and error events (including the "Reconnecting... n/5"
// messages of its own retries).
type codexParser struct {
	rep       report
	completed bool // a turn.completed was seen
	failed    bool // a turn.failed was seen
	errText   string
}

var _ Reporter = (*codexParser)(nil)

func newCodexParser(now func() time.Time) *codexParser {
	return &codexParser{rep: newReport(now)}
}

type codexLine struct {
	Type    string     `json:"type"`
	Message string     `json:"message"` // error
	Item    *codexItem `json:"item"`
	Usage   *struct {
		InputTokens           int64 `json:"input_tokens"` // cached ones included
		CachedInputTokens     int64 `json:"cached_input_tokens"`
		CacheWriteInputTokens int64 `json:"cache_write_input_tokens"`
		OutputTokens          int64 `json:"output_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"` // turn.failed
}

type codexItem struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	Text      string          `json:"text"`    // agent_message
	Server    string          `json:"server"`  // mcp_tool_call
	Tool      string          `json:"tool"`    // mcp_tool_call
	Command   string          `json:"command"` // command_execution
	ExitCode  *int            `json:"exit_code"`
	Status    string          `json:"status"`    // "in_progress", "completed", "failed"
	Changes   []codexChange   `json:"changes"`   // file_change
	Query     string          `json:"query"`     // web_search
	Arguments json.RawMessage `json:"arguments"` // mcp_tool_call
}

type codexChange struct {
	Path string `json:"path"`
	Kind string `json:"kind"` // add, delete, update
}

// codexInput summarises a tool item's input: the command, the changed
// files, the MCP call's main argument, the search.
func codexInput(it *codexItem) string {
	switch it.Type {
	case "command_execution":
		return it.Command
	case "file_change":
		paths := make([]string, 0, len(it.Changes))
		for _, c := range it.Changes {
			paths = append(paths, c.Kind+" "+c.Path)
		}
		return strings.Join(paths, ", ")
	case "mcp_tool_call":
		return inputSummary(it.Arguments)
	case "web_search":
		return it.Query
	}
	return ""
}

// failed reports whether a completed tool item failed.
func (it *codexItem) failed() bool {
	return it.Status == "failed" || it.ExitCode != nil && *it.ExitCode != 0
}

// codexTool reports whether an item type is a tool call.
func codexTool(typ string) bool {
	switch typ {
	case "command_execution", "file_change", "mcp_tool_call", "web_search", "collab_tool_call":
		return true
	}
	return false
}

func (p *codexParser) Line(line []byte) {
	if !jsonObject(line) {
		return // see claudeParser.Line
	}
	var l codexLine
	if !decodeLine(line, &l) {
		p.rep.tampered(line, `"type":"item.started"`, `"type":"item.completed"`)
		return
	}
	switch l.Type {
	case "item.started", "item.completed":
		it := l.Item
		if it == nil {
			return
		}
		switch {
		case codexTool(it.Type):
			name := it.Type
			if it.Type == "mcp_tool_call" && it.Tool != "" {
				name = "mcp:" + it.Server + "/" + it.Tool
			}
			// Some items (file changes) are only ever reported completed.
			p.rep.toolStart(it.ID, name, codexInput(it), true)
			if l.Type == "item.completed" {
				p.rep.toolEnd(it.ID, it.failed(), true)
			}
		case it.Type == "agent_message" || it.Type == "reasoning":
			p.rep.output()
		}
		if it.Type == "agent_message" && l.Type == "item.completed" {
			p.rep.text = excerpt(it.Text)
		}
	case "turn.completed":
		p.completed = true
		p.rep.resultAt = p.rep.now()
		if u := l.Usage; u != nil {
			cached := min(u.CachedInputTokens, u.InputTokens)
			// A turn adds what it used, never takes away (negative
			// counts: see report.usageSoFar).
			p.rep.usage.InputTokens += max(u.InputTokens-cached, 0)
			p.rep.usage.CacheReadTokens += max(cached, 0)
			p.rep.usage.CacheWriteTokens += max(u.CacheWriteInputTokens, 0)
			p.rep.usage.OutputTokens += max(u.OutputTokens, 0)
		}
	case "turn.failed":
		p.failed = true
		p.rep.resultAt = p.rep.now()
		if l.Error != nil {
			p.errText = l.Error.Message
			p.apiError(l.Error.Message)
		}
	case "error":
		p.apiError(l.Message)
		if !p.failed {
			p.errText = l.Message
		}
	}
}

// apiError classifies an error message of Codex: it prints the HTTP status
// of a request it retries or gave up on ("unexpected status 401
// Unauthorized: ...", "last status: 429 Too Many Requests").
func (p *codexParser) apiError(msg string) {
	switch {
	case strings.Contains(msg, "401 Unauthorized"):
		p.rep.setFatal("authentication failed: the API answered 401 Unauthorized (invalid API key or login?)")
	case strings.Contains(msg, "429 Too Many Requests") || containsFold(msg, "rate limit") || containsFold(msg, "usage limit"):
		var until time.Time
		if d, ok := retryHint(msg); ok {
			until = p.rep.now().Add(d)
		}
		p.rep.rateLimited(until)
	default:
		// "Reconnecting... 1/5 (stream disconnected ...)", "unexpected
		// status 500 Internal Server Error", "We're currently experiencing
		// high demand".
		p.rep.providerError(serverTrouble(msg))
	}
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), sub)
}

func (p *codexParser) Fatal() string { return p.rep.fatal }

func (p *codexParser) Exit(int) {}

// Verdict: success is a completed turn and no failed one.
func (p *codexParser) Verdict() (bool, string) {
	if p.completed && !p.failed {
		return true, ""
	}
	return false, p.errText
}

func (p *codexParser) Report(r *Result) { p.rep.fill(r) }

func (p *codexParser) OnTool(fn func(ToolCall)) { p.rep.onTool = fn }

func (p *codexParser) Turns() (int, bool) { return p.rep.turns, p.rep.settled() }

func (p *codexParser) OnToolStart(fn func(ToolCall)) { p.rep.onStart = fn }

func (p *codexParser) Progress() Progress { return p.rep.progress() }
