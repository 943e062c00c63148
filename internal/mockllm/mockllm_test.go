package mockllm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newServer(t *testing.T, turns ...Turn) *Server {
	t.Helper()
	s := New(turns...)
	t.Cleanup(s.Close)
	return s
}

// post sends a JSON body and returns the response; the caller closes it.
func post(t *testing.T, ctx context.Context, url, body string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return http.DefaultClient.Do(req)
}

type event struct {
	name string
	data map[string]any
}

// call posts and reads the answer: SSE events, or one JSON body as a
// single event named "json".
func call(t *testing.T, url, body string) (int, http.Header, []event) {
	t.Helper()
	resp, err := post(t, context.Background(), url, body)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var v map[string]any
		b, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(b, &v); err != nil && resp.StatusCode == 200 {
			t.Fatalf("body %q: %v", b, err)
		}
		return resp.StatusCode, resp.Header, []event{{name: "json", data: v}}
	}
	var evs []event
	var name string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var v map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &v); err != nil {
				t.Fatalf("event data %q: %v", line, err)
			}
			evs = append(evs, event{name: name, data: v})
			name = ""
		}
	}
	return resp.StatusCode, resp.Header, evs
}

func find(evs []event, name string) map[string]any {
	for _, e := range evs {
		if e.name == name {
			return e.data
		}
	}
	return nil
}

// get walks nested maps and slices: get(v, "message", "usage", "input_tokens").
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

const (
	anthropicFirst  = `{"model":"m","stream":true,"messages":[{"role":"user","content":"do it"}]}`
	anthropicSecond = `{"model":"m","stream":true,"messages":[{"role":"user","content":"do it"},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_mock_0","name":"Bash","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_mock_0","content":"ok"}]}]}`
)

func TestAnthropicConversation(t *testing.T) {
	s := newServer(t, Shell("git commit -m 'x'"), Text("Done."))
	code, _, evs := call(t, s.URL()+"/v1/messages?beta=true", anthropicFirst)
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	var names []string
	for _, e := range evs {
		names = append(names, e.name)
	}
	want := "message_start content_block_start content_block_delta content_block_stop message_delta message_stop"
	if strings.Join(names, " ") != want {
		t.Fatalf("events %v", names)
	}
	if got := get(find(evs, "content_block_start"), "content_block", "name"); got != "Bash" {
		t.Fatalf("tool %v", got)
	}
	var input map[string]any
	_ = json.Unmarshal([]byte(get(find(evs, "content_block_delta"), "delta", "partial_json").(string)), &input)
	if input["command"] != "git commit -m 'x'" {
		t.Fatalf("tool input %v", input)
	}
	if get(find(evs, "message_delta"), "delta", "stop_reason") != "tool_use" ||
		get(find(evs, "message_delta"), "usage", "output_tokens") != float64(defaultUsage().Output) {
		t.Fatalf("message_delta %v", find(evs, "message_delta"))
	}

	_, _, evs = call(t, s.URL()+"/v1/messages", anthropicSecond)
	if get(find(evs, "content_block_delta"), "delta", "text") != "Done." {
		t.Fatalf("second answer %v", evs)
	}
	// Non-streaming requests get the same turn as one JSON message.
	code, _, evs = call(t, s.URL()+"/v1/messages", strings.Replace(anthropicSecond, `"stream":true`, `"stream":false`, 1))
	if code != 200 || get(evs[0].data, "content", 0, "text") != "Done." {
		t.Fatalf("non-streaming: %d %v", code, evs[0].data)
	}
	reqs := s.Requests()
	if len(reqs) != 3 || reqs[0].Position != 0 || reqs[1].Position != 1 || reqs[1].Turn != 1 || reqs[0].Format != Anthropic {
		t.Fatalf("requests %+v", reqs)
	}
	if !reqs[0].BodyContains("do it") || reqs[0].BodyContains("Done.") {
		t.Fatal("BodyContains")
	}
}

// TestRetriesDoNotDesync: failures are answered one per attempt at their
// position, and a repeated request never skips ahead.
func TestRetriesDoNotDesync(t *testing.T) {
	s := newServer(t, Status(500), Status(429, "retry-after", "7"), Text("first"), Status(503), Text("second"))
	url := s.URL() + "/v1/messages"
	for i, want := range []int{500, 429, 200, 200} { // the last: a retry after a success
		code, h, evs := call(t, url, anthropicFirst)
		if code != want {
			t.Fatalf("attempt %d: status %d, want %d", i, code, want)
		}
		switch code {
		case 429:
			if h.Get("Retry-After") != "7" || get(evs[0].data, "error", "type") != "rate_limit_error" {
				t.Fatalf("429: header %v body %v", h, evs[0].data)
			}
		case 200:
			if get(find(evs, "content_block_delta"), "delta", "text") != "first" {
				t.Fatalf("attempt %d: %v", i, evs)
			}
		}
	}
	code, _, _ := call(t, url, anthropicSecond)
	if code != 503 {
		t.Fatalf("position 1 first attempt: %d", code)
	}
	if _, _, evs := call(t, url, anthropicSecond); get(find(evs, "content_block_delta"), "delta", "text") != "second" {
		t.Fatalf("position 1 retry: %v", evs)
	}
	third := strings.TrimSuffix(anthropicSecond, "]}") +
		`,{"role":"assistant","content":"second"},{"role":"user","content":"more"}]}`
	_, _, evs := call(t, url, third)
	if got := get(find(evs, "content_block_delta"), "delta", "text"); got != "mockllm: script exhausted" {
		t.Fatalf("past the script: %v", got)
	}
	if r := s.Requests(); r[len(r)-1].Turn != -1 || r[len(r)-1].Position != 2 {
		t.Fatalf("past the script recorded as %+v", r[len(r)-1])
	}
}

func TestDropAndDelay(t *testing.T) {
	s := newServer(t, Drop(), Turn{Text: "late", Delay: 300 * time.Millisecond})
	url := s.URL() + "/v1/messages"
	if resp, err := post(t, context.Background(), url, anthropicFirst); err == nil {
		resp.Body.Close()
		t.Fatalf("dropped connection answered %d", resp.StatusCode)
	}
	start := time.Now()
	_, _, evs := call(t, url, anthropicFirst)
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("delayed answer after %v", d)
	}
	if get(find(evs, "content_block_delta"), "delta", "text") != "late" {
		t.Fatalf("delayed answer %v", evs)
	}

	// A client that gives up during a delay frees the handler at once.
	s2 := newServer(t, Turn{Text: "never", Delay: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		resp, err := post(t, ctx, s2.URL()+"/v1/messages", anthropicFirst)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	if _, err := s2.WaitRequest(context.Background(), func(Request) bool { return true }); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("client error %v", err)
	}
}

func TestOpenAIResponses(t *testing.T) {
	s := newServer(t, Shell("make test"), Text("Tests pass."))
	first := `{"model":"m","stream":true,"input":[{"type":"message","role":"developer","content":[]},` +
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"go"}]}],` +
		`"tools":[{"type":"function","name":"exec_command"},{"type":"function","name":"write_stdin"}]}`
	_, _, evs := call(t, s.URL()+"/v1/responses", first)
	item := get(find(evs, "response.output_item.done"), "item")
	if get(item, "type") != "function_call" || get(item, "name") != "exec_command" || get(item, "arguments") != `{"cmd":"make test"}` {
		t.Fatalf("item %v", item)
	}
	if get(find(evs, "response.completed"), "response", "usage", "input_tokens_details", "cached_tokens") != float64(defaultUsage().CacheRead) {
		t.Fatalf("completed %v", find(evs, "response.completed"))
	}
	// Reasoning and a call in a row are one model turn.
	second := `{"model":"m","input":[{"type":"message","role":"user","content":[]},{"type":"reasoning"},` +
		`{"type":"function_call","call_id":"c"},{"type":"function_call_output","call_id":"c","output":"ok"}]}`
	_, _, evs = call(t, s.URL()+"/v1/responses", second)
	if get(find(evs, "response.output_item.done"), "item", "content", 0, "text") != "Tests pass." {
		t.Fatalf("second: %v", evs)
	}
	// Only the older shell tool on offer: the call takes its shape.
	s2 := newServer(t, Shell("ls"))
	_, _, evs = call(t, s2.URL()+"/v1/responses", `{"input":"hi","tools":[{"type":"function","name":"shell"}]}`)
	if item := get(find(evs, "response.output_item.done"), "item"); get(item, "name") != "shell" ||
		get(item, "arguments") != `{"command":["bash","-lc","ls"]}` {
		t.Fatalf("shell item %v", item)
	}
}

func TestGemini(t *testing.T) {
	s := newServer(t, Shell("go test ./..."), Text("Green."))
	base := s.URL() + "/v1beta/models/gemini-x"
	// The routing call asks for JSON by schema: answered aside, the script
	// untouched.
	routing := `{"contents":[{"role":"user","parts":[{"text":"route"}]}],"generationConfig":{"responseMimeType":"application/json",` +
		`"responseJsonSchema":{"type":"OBJECT","properties":{"complexity_reasoning":{"type":"STRING"},` +
		`"complexity_score":{"type":"INTEGER"},"model_choice":{"type":"STRING","enum":["flash","pro"]},"next_speaker":{"type":"string","enum":["model","user"]}}}}}`
	code, _, evs := call(t, base+":generateContent", routing)
	var answer map[string]any
	if code != 200 || json.Unmarshal([]byte(get(evs[0].data, "candidates", 0, "content", "parts", 0, "text").(string)), &answer) != nil {
		t.Fatalf("routing: %d %v", code, evs[0].data)
	}
	if answer["complexity_score"] != float64(1) || answer["model_choice"] != "flash" || answer["next_speaker"] != "user" || answer["complexity_reasoning"] != "mock" {
		t.Fatalf("routing answer %v", answer)
	}
	_, _, evs = call(t, base+":streamGenerateContent?alt=sse", `{"contents":[{"role":"user","parts":[{"text":"go"}]}]}`)
	if fc := get(evs[0].data, "candidates", 0, "content", "parts", 0, "functionCall"); get(fc, "name") != "run_shell_command" ||
		get(fc, "args", "command") != "go test ./..." {
		t.Fatalf("function call %v", evs)
	}
	if get(evs[0].data, "usageMetadata", "candidatesTokenCount") != float64(defaultUsage().Output) {
		t.Fatalf("usage %v", evs[0].data)
	}
	_, _, evs = call(t, base+":streamGenerateContent?alt=sse", `{"contents":[{"role":"user","parts":[]},{"role":"model","parts":[]},{"role":"user","parts":[]}]}`)
	if get(evs[0].data, "candidates", 0, "content", "parts", 0, "text") != "Green." {
		t.Fatalf("second %v", evs)
	}
	code, _, evs = call(t, base+":countTokens", `{"contents":[]}`)
	if code != 200 || get(evs[0].data, "totalTokens") == nil {
		t.Fatalf("countTokens %d %v", code, evs)
	}
	reqs := s.Requests()
	if !reqs[0].Side || reqs[1].Side || reqs[1].Turn != 0 || reqs[2].Turn != 1 || !reqs[3].Side {
		t.Fatalf("requests %+v", reqs)
	}
	if got := len(s.Scripted()); got != 2 {
		t.Fatalf("Scripted() = %d requests", got)
	}
	code, _, evs = call(t, base+":streamGenerateContent?alt=sse", `{"contents":[]}`)
	if code != 400 {
		t.Fatalf("unparsable request: %d", code)
	}
}

// TestScripts: conversations told apart by their prompts follow scripts of
// their own.
func TestScripts(t *testing.T) {
	s := newServer(t, Text("default"))
	s.Script("agent b", Turn{Status: 500}, Text("for b"))
	s.Script(`say "hi"`, Text("quoted"))
	url := s.URL() + "/v1/messages"
	text := func(body string) any {
		_, _, evs := call(t, url, body)
		return get(find(evs, "content_block_delta"), "delta", "text")
	}
	if got := text(`{"stream":true,"messages":[{"role":"user","content":"I am agent a"}]}`); got != "default" {
		t.Fatalf("agent a got %v", got)
	}
	if code, _, _ := call(t, url, `{"stream":true,"messages":[{"role":"user","content":"I am agent b"}]}`); code != 500 {
		t.Fatalf("agent b first attempt: %d", code)
	}
	if got := text(`{"stream":true,"messages":[{"role":"user","content":"I am agent b"}]}`); got != "for b" {
		t.Fatalf("agent b got %v", got)
	}
	if got := text(`{"stream":true,"messages":[{"role":"user","content":"say \"hi\"\nplease"}]}`); got != "quoted" {
		t.Fatalf("escaped match got %v", got)
	}
	s.Script("", Text("new default"))
	if got := text(`{"stream":true,"messages":[{"role":"user","content":"x"}]}`); got != "new default" {
		t.Fatalf("replaced default got %v", got)
	}
	if r := s.Requests(); r[1].Script != "agent b" || r[0].Script != "" {
		t.Fatalf("Script recorded as %q, %q", r[0].Script, r[1].Script)
	}
}

func TestUnknownRequests(t *testing.T) {
	s := newServer(t, Text("x"))
	resp, err := http.Get(s.URL() + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("GET /v1/models: %d", resp.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	r, err := s.WaitRequest(ctx, func(r Request) bool { return r.Method == http.MethodGet })
	if err != nil || r.Format != "" || r.Path != "/v1/models" {
		t.Fatalf("recorded %+v, %v", r, err)
	}
	if _, err := s.WaitRequest(ctx, func(r Request) bool { return r.Method == http.MethodPut }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitRequest for nothing: %v", err)
	}
}
