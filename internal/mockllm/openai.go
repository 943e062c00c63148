package mockllm

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// openaiWire is the OpenAI Responses API as Codex uses it (wire_api =
// "responses").
type openaiWire struct{}

// responseItem is the part of an input item the mock looks at.
type responseItem struct {
	Type string `json:"type"`
	Role string `json:"role"`
}

// modelItem reports whether an input item was produced by the model.
func (it responseItem) modelItem() bool {
	switch it.Type {
	case "message":
		return it.Role == "assistant"
	case "function_call", "custom_tool_call", "local_shell_call", "reasoning", "web_search_call":
		return true
	}
	return it.Type == "" && it.Role == "assistant"
}

func (openaiWire) position(body []byte) (int, bool) {
	var req struct {
		Input json.RawMessage `json:"input"`
	}
	if json.Unmarshal(body, &req) != nil || len(req.Input) == 0 {
		return 0, false
	}
	var items []responseItem
	if json.Unmarshal(req.Input, &items) != nil {
		return 0, true // a plain string input: no history
	}
	// One model turn may output several items in a row (reasoning, a
	// message, calls): count runs of them.
	n, in := 0, false
	for _, it := range items {
		m := it.modelItem()
		if m && !in {
			n++
		}
		in = m
	}
	return n, true
}

func (openaiWire) side(*http.Request, []byte) http.HandlerFunc { return nil }

func (openaiWire) errorBody(status int) string {
	typ, code := "server_error", "server_error"
	switch status {
	case http.StatusUnauthorized:
		typ, code = "invalid_request_error", "invalid_api_key"
	case http.StatusTooManyRequests:
		typ, code = "rate_limit_exceeded", "rate_limit_exceeded"
	case http.StatusBadRequest:
		typ, code = "invalid_request_error", "invalid_request"
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": "mockllm: " + strconv.Itoa(status) + " " + http.StatusText(status), "type": typ, "code": code}})
	return string(b)
}

func (openaiWire) reply(w http.ResponseWriter, _ *http.Request, body []byte, t Turn, seq int) {
	var req struct {
		Model string `json:"model"`
		Tools []struct {
			Type string `json:"type"`
			Name string `json:"name"`
		} `json:"tools"`
	}
	_ = json.Unmarshal(body, &req)
	u := t.usage()
	id := "resp_mock_" + strconv.Itoa(seq)
	var item map[string]any
	if t.Shell != "" {
		// The shell tool Codex offers decides the call's shape.
		name, args := "exec_command", map[string]any{"cmd": t.Shell}
		for _, tl := range req.Tools {
			if tl.Name == "exec_command" {
				name, args = "exec_command", map[string]any{"cmd": t.Shell}
				break
			}
			if tl.Name == "shell" {
				name, args = "shell", map[string]any{"command": []string{"bash", "-lc", t.Shell}}
			}
		}
		a, _ := json.Marshal(args)
		item = map[string]any{"type": "function_call", "id": "fc_mock_" + strconv.Itoa(seq), "status": "completed",
			"name": name, "arguments": string(a), "call_id": "call_mock_" + strconv.Itoa(seq)}
	} else {
		item = map[string]any{"type": "message", "id": "msg_mock_" + strconv.Itoa(seq), "status": "completed",
			"role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": t.Text, "annotations": []any{}}}}
	}
	e := newSSE(w)
	e.event("response.created", map[string]any{"type": "response.created",
		"response": map[string]any{"id": id, "object": "response", "status": "in_progress", "model": req.Model}})
	e.event("response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": 0, "item": item})
	if t.Text != "" {
		e.event("response.output_text.delta", map[string]any{"type": "response.output_text.delta",
			"item_id": item["id"], "output_index": 0, "content_index": 0, "delta": t.Text})
	}
	e.event("response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": 0, "item": item})
	e.event("response.completed", map[string]any{"type": "response.completed", "response": map[string]any{
		"id": id, "object": "response", "status": "completed", "model": req.Model, "output": []any{item},
		"usage": map[string]any{
			"input_tokens":          u.Input + u.CacheRead,
			"input_tokens_details":  map[string]any{"cached_tokens": u.CacheRead},
			"output_tokens":         u.Output,
			"output_tokens_details": map[string]any{"reasoning_tokens": 0},
			"total_tokens":          u.Input + u.CacheRead + u.Output,
		}}})
}
