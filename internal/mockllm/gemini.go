package mockllm

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// geminiWire is the Gemini API (generativelanguage v1beta) as Gemini CLI
// uses it with an API key.
type geminiWire struct{}

type geminiRequest struct {
	Contents []struct {
		Role string `json:"role"`
	} `json:"contents"`
	GenerationConfig struct {
		ResponseMimeType   string          `json:"responseMimeType"`
		ResponseJSONSchema json.RawMessage `json:"responseJsonSchema"`
		ResponseSchema     json.RawMessage `json:"responseSchema"`
	} `json:"generationConfig"`
}

func (geminiWire) position(body []byte) (int, bool) {
	var req geminiRequest
	if json.Unmarshal(body, &req) != nil || len(req.Contents) == 0 {
		return 0, false
	}
	n := 0
	for _, c := range req.Contents {
		if c.Role == "model" {
			n++
		}
	}
	return n, true
}

// side answers token counts and the JSON calls (model routing, next-speaker
// checks) that Gemini CLI makes around the conversation: the script is for
// the conversation only.
func (geminiWire) side(r *http.Request, body []byte) http.HandlerFunc {
	if strings.HasSuffix(r.URL.Path, ":countTokens") {
		return func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, map[string]any{"totalTokens": defaultUsage().Input})
		}
	}
	var req geminiRequest
	if json.Unmarshal(body, &req) != nil || req.GenerationConfig.ResponseMimeType != "application/json" {
		return nil
	}
	schema := req.GenerationConfig.ResponseJSONSchema
	if len(schema) == 0 {
		schema = req.GenerationConfig.ResponseSchema
	}
	text, _ := json.Marshal(fromSchema(schema))
	resp := geminiResponse([]any{map[string]any{"text": string(text)}}, Usage{Input: 10, Output: 5})
	if strings.HasSuffix(r.URL.Path, ":streamGenerateContent") {
		return func(w http.ResponseWriter, _ *http.Request) { newSSE(w).event("", resp) }
	}
	return func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, resp) }
}

// fromSchema makes a value that a JSON schema accepts: the properties a
// caller needs, enums answered with the choice that lets the CLI go on.
func fromSchema(raw json.RawMessage) any {
	var s struct {
		Type       any                        `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
		Enum       []any                      `json:"enum"`
		Minimum    *float64                   `json:"minimum"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return map[string]any{}
	}
	if len(s.Enum) > 0 {
		return s.Enum[0]
	}
	typ, _ := s.Type.(string)
	switch strings.ToLower(typ) {
	case "string":
		return "mock"
	case "boolean":
		return false
	case "integer", "number":
		if s.Minimum != nil {
			return *s.Minimum
		}
		return 1 // scores and counts start at 1
	case "array":
		return []any{}
	}
	obj := make(map[string]any, len(s.Properties))
	for k, v := range s.Properties {
		switch k {
		case "next_speaker":
			obj[k] = "user" // the model is done: the turn ends
		default:
			obj[k] = fromSchema(v)
		}
	}
	return obj
}

func geminiResponse(parts []any, u Usage) map[string]any {
	return map[string]any{
		"candidates": []any{map[string]any{
			"content": map[string]any{"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}},
		"usageMetadata": map[string]any{
			"promptTokenCount": u.Input + u.CacheRead, "candidatesTokenCount": u.Output,
			"cachedContentTokenCount": u.CacheRead, "totalTokenCount": u.Input + u.CacheRead + u.Output},
		"modelVersion": "mock",
	}
}

func (geminiWire) errorBody(status int) string {
	st := "INTERNAL"
	switch status {
	case http.StatusBadRequest:
		st = "INVALID_ARGUMENT"
	case http.StatusUnauthorized:
		st = "UNAUTHENTICATED"
	case http.StatusForbidden:
		st = "PERMISSION_DENIED"
	case http.StatusTooManyRequests:
		st = "RESOURCE_EXHAUSTED"
	case http.StatusServiceUnavailable:
		st = "UNAVAILABLE"
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{
		"code": status, "message": "mockllm: " + strconv.Itoa(status) + " " + http.StatusText(status), "status": st}})
	return string(b)
}

func (geminiWire) reply(w http.ResponseWriter, r *http.Request, _ []byte, t Turn, seq int) {
	var part map[string]any
	if t.Shell != "" {
		part = map[string]any{"functionCall": map[string]any{"name": "run_shell_command",
			"args": map[string]any{"command": t.Shell, "description": "Run a command"}, "id": "call_mock_" + strconv.Itoa(seq)}}
	} else {
		part = map[string]any{"text": t.Text}
	}
	resp := geminiResponse([]any{part}, t.usage())
	if !strings.HasSuffix(r.URL.Path, ":streamGenerateContent") {
		writeJSON(w, resp)
		return
	}
	newSSE(w).event("", resp)
}
