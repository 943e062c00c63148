package backend

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// The Renderer reads each format through its parser's line type, with the
// few fields only a reader needs added.

type claudeView struct {
	claudeLine
	Model      string  `json:"model"` // system/init
	Cwd        string  `json:"cwd"`
	Attempt    int     `json:"attempt"` // system/api_retry
	MaxRetries int     `json:"max_retries"`
	DurationMS float64 `json:"duration_ms"` // result
	NumTurns   int     `json:"num_turns"`
}

type claudeBlockView struct {
	claudeBlock
	Text    string          `json:"text"`
	Content json.RawMessage `json:"content"` // tool_result: a string or text blocks
}

func (r *Renderer) claude(line []byte) bool {
	var l claudeView
	if !decodeLine(line, &l) {
		return false
	}
	r.endText()
	switch l.Type {
	case "system":
		r.claudeSystem(&l)
	case "assistant", "user":
		if l.Message != nil {
			r.claudeContent(l.Type == "assistant", l.Message.Content)
		}
	case "rate_limit_event":
		if rl := l.RateLimitInfo; rl != nil && rl.Status == "rejected" {
			msg := "rate limited"
			if t := unixTime(rl.ResetsAt); !t.IsZero() {
				msg += " until " + t.UTC().Format(time.RFC3339)
			}
			r.errorText(msg)
		}
	case "result":
		r.claudeResult(&l)
	}
	return true
}

func (r *Renderer) claudeSystem(l *claudeView) {
	switch l.Subtype {
	case "init":
		line := "● claude"
		if l.Model != "" {
			line += " " + l.Model
		}
		if l.Cwd != "" {
			line += " in " + l.Cwd
		}
		r.emit(clean(cut(line, renderWidth)))
	case "api_retry":
		msg := "API error"
		if l.ErrorStatus != 0 {
			msg += " " + strconv.Itoa(l.ErrorStatus)
		}
		if l.Error != "" {
			msg += " " + l.Error
		}
		if l.Attempt > 0 {
			msg += ", retry " + strconv.Itoa(l.Attempt)
			if l.MaxRetries > 0 {
				msg += "/" + strconv.Itoa(l.MaxRetries)
			}
			if s := millis(l.RetryDelayMS); s != "" {
				msg += " in " + s
			}
		}
		r.errorText(msg)
	}
}

// claudeContent shows a message's blocks: the assistant's text and tool
// calls, and the tool results that come back in user messages. A user's
// plain-string content is the prompt, which is not shown.
func (r *Renderer) claudeContent(assistant bool, content json.RawMessage) {
	var blocks []claudeBlockView
	if json.Unmarshal(content, &blocks) != nil {
		var s string
		if assistant && json.Unmarshal(content, &s) == nil {
			r.assistantText(s)
		}
		return
	}
	for _, b := range blocks {
		switch b.Type {
		case "text":
			if assistant {
				r.assistantText(b.Text)
			}
		case "tool_use", "server_tool_use", "mcp_tool_use":
			r.toolCall(b.Name, inputSummary(b.Input))
		case "tool_result":
			r.toolOutput(claudeResultText(b.Content), b.IsError)
		}
	}
}

// claudeResultText is a tool result's content: a string, or text blocks.
func claudeResultText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []claudeBlockView
	if json.Unmarshal(raw, &blocks) != nil {
		return ""
	}
	var b strings.Builder
	for _, bl := range blocks {
		if bl.Type == "text" {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(bl.Text)
		}
	}
	return b.String()
}

func (r *Renderer) claudeResult(l *claudeView) {
	isErr, known := claudeBool(l.IsError)
	if !known {
		return
	}
	head := "✓ success"
	if isErr {
		head = "✗ error"
		if l.Subtype != "" && l.Subtype != "success" {
			head = "✗ " + l.Subtype
		}
	}
	var details []string
	if l.NumTurns > 0 {
		details = append(details, plural(l.NumTurns, "turn"))
	}
	if s := millis(l.DurationMS); s != "" {
		details = append(details, s)
	}
	if len(details) > 0 {
		head += " (" + strings.Join(details, ", ") + ")"
	}
	text := strings.TrimSpace(l.Result)
	switch {
	case isErr && text != "":
		first, rest, _ := strings.Cut(text, "\n")
		r.emit(head + ": " + clean(cut(first, renderWidth)))
		r.block("  ", rest, renderOutLines, renderWidth)
	case text != "" && text != r.lastText:
		r.emit(head)
		r.block("", text, renderTextLines, renderTextWidth)
	default:
		r.emit(head)
	}
	r.usage()
}

type codexView struct {
	codexLine
	Item *codexItemView `json:"item"` // the parser's item, with what a reader sees of it
}

type codexItemView struct {
	codexItem
	Message          string `json:"message"` // error
	AggregatedOutput string `json:"aggregated_output"`
}

func (r *Renderer) codex(line []byte) bool {
	var l codexView
	if !decodeLine(line, &l) {
		return false
	}
	r.endText()
	switch l.Type {
	case "item.started":
		if it := l.Item; it != nil && codexTool(it.Type) {
			r.codexCall(it)
		}
	case "item.completed":
		if l.Item != nil {
			r.codexItem(l.Item)
		}
	case "turn.completed":
		r.emit("✓ turn completed")
		r.usage()
	case "turn.failed":
		head := "✗ turn failed"
		if l.Error != nil && l.Error.Message != "" {
			head += ": " + clean(cut(l.Error.Message, renderWidth))
		}
		r.emit(head)
		r.usage()
	case "error":
		r.errorText(l.Message)
	}
	return true
}

func (r *Renderer) codexItem(it *codexItemView) {
	switch {
	case it.Type == "agent_message":
		r.assistantText(it.Text)
	case it.Type == "error":
		r.errorText(it.Message)
	case codexTool(it.Type):
		if !r.started[it.ID] || it.ID == "" {
			r.codexCall(it) // reported only once done, as file changes are
		}
		delete(r.started, it.ID)
		failed := it.failed()
		out := it.AggregatedOutput
		if failed && it.ExitCode != nil {
			out = "exit " + strconv.Itoa(*it.ExitCode) + "\n" + out
		}
		r.toolOutput(out, failed)
	}
}

// codexCall shows a tool item when it starts, or when it completes if its
// start was not seen.
func (r *Renderer) codexCall(it *codexItemView) {
	if it.ID != "" {
		if len(r.started) >= renderMaxIDs {
			clear(r.started)
		}
		r.started[it.ID] = true
	}
	switch it.Type {
	case "command_execution":
		r.toolCall("shell", codexInput(&it.codexItem))
	case "file_change":
		r.toolCall("edit", codexInput(&it.codexItem))
	case "mcp_tool_call":
		r.toolCall("mcp:"+it.Server+"/"+it.Tool, codexInput(&it.codexItem))
	default:
		r.toolCall(it.Type, codexInput(&it.codexItem))
	}
}

type geminiView struct {
	geminiLine
	Model  string `json:"model"`  // init
	Output string `json:"output"` // tool_result
}

func (r *Renderer) gemini(line []byte) bool {
	var l geminiView
	if !decodeLine(line, &l) {
		return false
	}
	r.endText()
	if l.Type == "message" && l.Role == "assistant" {
		r.assistant.WriteString(l.Content) // deltas: shown when the message ends
		if r.assistant.Len() > MaxResultText*8 {
			r.endAssistant()
		}
		return true
	}
	r.endAssistant()
	switch l.Type {
	case "init":
		line := "● gemini"
		if l.Model != "" {
			line += " " + l.Model
		}
		r.emit(clean(cut(line, renderWidth)))
	case "tool_use":
		r.toolCall(l.ToolName, inputSummary(l.Parameters))
	case "tool_result":
		out, failed := l.Output, l.Status == "error"
		if failed && l.Error != nil {
			out = l.Error.Message + "\n" + out
		}
		r.toolOutput(out, failed)
	case "error":
		r.errorText(l.Message)
	case "result":
		head := "✓ success"
		if l.Status != "success" {
			head = "✗ error"
			if l.Error != nil && l.Error.Message != "" {
				head += ": " + clean(cut(l.Error.Message, renderWidth))
			}
		}
		r.emit(head)
		r.usage()
	}
	return true
}
