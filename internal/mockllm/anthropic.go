package mockllm

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// anthropicWire is the Anthropic Messages API as Claude Code uses it.
type anthropicWire struct{}

func (anthropicWire) position(body []byte) (int, bool) {
	var req struct {
		Messages []struct {
			Role string `json:"role"`
		} `json:"messages"`
	}
	if json.Unmarshal(body, &req) != nil || len(req.Messages) == 0 {
		return 0, false
	}
	n := 0
	for _, m := range req.Messages {
		if m.Role == "assistant" {
			n++
		}
	}
	return n, true
}

func (anthropicWire) side(r *http.Request, _ []byte) http.HandlerFunc {
	if !strings.HasSuffix(r.URL.Path, "/count_tokens") {
		return nil
	}
	return func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"input_tokens": defaultUsage().Input})
	}
}

func (anthropicWire) errorBody(status int) string {
	typ := "api_error"
	switch status {
	case http.StatusBadRequest:
		typ = "invalid_request_error"
	case http.StatusUnauthorized:
		typ = "authentication_error"
	case http.StatusForbidden:
		typ = "permission_error"
	case http.StatusNotFound:
		typ = "not_found_error"
	case http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case 529:
		typ = "overloaded_error"
	}
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]any{
		"type": typ, "message": "mockllm: " + strconv.Itoa(status) + " " + http.StatusText(status)}})
	return string(b)
}

func (anthropicWire) reply(w http.ResponseWriter, _ *http.Request, body []byte, t Turn, seq int) {
	var req struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	_ = json.Unmarshal(body, &req)
	u := t.usage()
	id := "msg_mock_" + strconv.Itoa(seq)
	var block map[string]any
	var input string
	stop := "end_turn"
	if t.Shell != "" {
		in, _ := json.Marshal(map[string]any{"command": t.Shell, "description": "Run a command"})
		input = string(in)
		block = map[string]any{"type": "tool_use", "id": "toolu_mock_" + strconv.Itoa(seq), "name": "Bash",
			"input": map[string]any{}}
		stop = "tool_use"
	} else {
		block = map[string]any{"type": "text", "text": ""}
	}
	usage := map[string]any{"input_tokens": u.Input, "output_tokens": u.Output,
		"cache_read_input_tokens": u.CacheRead, "cache_creation_input_tokens": u.CacheWrite}

	if !req.Stream {
		if t.Shell != "" {
			var in map[string]any
			_ = json.Unmarshal([]byte(input), &in)
			block["input"] = in
		} else {
			block["text"] = t.Text
		}
		writeJSON(w, map[string]any{"id": id, "type": "message", "role": "assistant", "model": req.Model,
			"content": []any{block}, "stop_reason": stop, "stop_sequence": nil, "usage": usage})
		return
	}
	e := newSSE(w)
	e.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": req.Model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": u.Input, "output_tokens": 1,
			"cache_read_input_tokens": u.CacheRead, "cache_creation_input_tokens": u.CacheWrite}}})
	e.event("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": block})
	if t.Shell != "" {
		e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "input_json_delta", "partial_json": input}})
	} else {
		e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": t.Text}})
	}
	e.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	e.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": usage})
	e.event("message_stop", map[string]any{"type": "message_stop"})
}
