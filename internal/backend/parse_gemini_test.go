package backend

import (
	"strings"
	"testing"
	"time"
)

func TestGeminiParserSuccess(t *testing.T) {
	p := newGeminiParser(newFakeClock().now)
	feed(t, p, "gemini-success.jsonl")
	r, ok, detail := finish(p, 0)
	if !ok {
		t.Fatalf("Verdict = %v, %q", ok, detail)
	}
	if want := (Usage{InputTokens: 250, OutputTokens: 65, CacheReadTokens: 14}); r.Usage != want {
		t.Errorf("Usage = %+v, want %+v", r.Usage, want)
	}
	if r.ToolCalls != 1 || len(r.Tools) != 1 || r.Tools[0].Name != "run_shell_command" || r.Tools[0].End.IsZero() {
		t.Errorf("tool calls %d %+v", r.ToolCalls, r.Tools)
	}
	if r.Text != "All done: wrote three.txt." {
		t.Errorf("Text = %q", r.Text)
	}
}

func TestGeminiParserExitCodes(t *testing.T) {
	p := newGeminiParser(nil)
	feed(t, p, "gemini-401.jsonl")
	if p.Fatal() != "" {
		t.Fatal("fatal before the exit code is known")
	}
	r, ok, detail := finish(p, 145)
	if ok || !strings.Contains(detail, "401") {
		t.Fatalf("Verdict = %v, %q", ok, detail)
	}
	if !strings.Contains(r.Fatal, "401") {
		t.Fatalf("Fatal = %q", r.Fatal)
	}
	for code, fatal := range map[int]bool{147: true, 41: true, 173: false, 1: false, 0: false, -1: false} {
		p := newGeminiParser(nil)
		r, _, _ := finish(p, code)
		if (r.Fatal != "") != fatal {
			t.Errorf("exit %d: Fatal %q", code, r.Fatal)
		}
		if r.RateLimited != (code == 173) {
			t.Errorf("exit %d: RateLimited %v", code, r.RateLimited)
		}
	}
}

func TestGeminiParserRateLimitAndText(t *testing.T) {
	c := newFakeClock()
	p := newGeminiParser(c.now)
	for _, l := range []string{
		`{"type":"message","role":"assistant","content":"Let me look.","delta":true}`,
		`{"type":"tool_use","tool_name":"read_file","tool_id":"t1","parameters":{}}`,
		`{"type":"tool_result","tool_id":"t1","status":"success"}`,
		`{"type":"message","role":"assistant","content":"Done ","delta":true}`,
		`{"type":"message","role":"assistant","content":"now.","delta":true}`,
		`{"type":"result","status":"error","error":{"type":"unknown","message":"[API Error: {\"error\":{\"code\":429,\"status\":\"RESOURCE_EXHAUSTED\",\"details\":[{\"retryDelay\":\"30s\"}]}}]"}}`,
	} {
		p.Line([]byte(l))
	}
	r, ok, _ := finish(p, 173)
	if ok || !r.RateLimited || r.Fatal != "" {
		t.Fatalf("ok %v RateLimited %v Fatal %q", ok, r.RateLimited, r.Fatal)
	}
	if !r.RetryAfter.After(epoch.Add(30 * time.Second)) {
		t.Fatalf("RetryAfter = %v, want 30 s after the result", r.RetryAfter)
	}
	if r.Text != "Done now." {
		t.Fatalf("Text = %q, want the text after the last tool call", r.Text)
	}

	// A long answer is cut, not held whole.
	p = newGeminiParser(nil)
	chunk := `{"type":"message","role":"assistant","content":"` + strings.Repeat("x", 1000) + `","delta":true}`
	for range 10 {
		p.Line([]byte(chunk))
	}
	p.Line([]byte(`{"type":"result","status":"success"}`))
	if r, ok, _ := finish(p, 0); !ok || len(r.Text) != MaxResultText {
		t.Fatalf("ok %v, text of %d bytes", ok, len(r.Text))
	}
}

func FuzzGeminiParser(f *testing.F) {
	addSeeds(f, "gemini-")
	f.Fuzz(func(t *testing.T, data []byte, exit int) {
		p := newGeminiParser(newFakeClock().now)
		fuzzLines(p, data)
		checkInvariants(t, p, exit)
	})
}

func BenchmarkGeminiParser(b *testing.B) {
	benchParser(b, "gemini-success.jsonl", func() StreamParser { return newGeminiParser(nil) })
}

// A failed result without an error object keeps the CLI's message from the
// error line before it (recorded from Gemini CLI 0.61.0 answered an empty
// response).
func TestGeminiParserKeepsLastErrorLine(t *testing.T) {
	p := newGeminiParser(nil)
	feed(t, p, "gemini-empty.log")
	_, ok, detail := finish(p, 0)
	if ok || !strings.HasPrefix(detail, "The model returned an empty response") {
		t.Fatalf("Verdict = %v, %q; want the error line's message", ok, detail)
	}
	// An error object in the result wins; an exit without a result keeps
	// the last error line.
	p = newGeminiParser(nil)
	p.Line([]byte(`{"type":"error","severity":"error","message":"first"}`))
	p.Line([]byte(`{"type":"result","status":"error","error":{"type":"unknown","message":"from the result"}}`))
	if _, _, detail := finish(p, 0); detail != "from the result" {
		t.Fatalf("detail %q, want the result's error", detail)
	}
	p = newGeminiParser(nil)
	p.Line([]byte(`{"type":"error","severity":"error","message":"first"}`))
	p.Line([]byte(`{"type":"error","severity":"error","message":"second"}`))
	if _, ok, detail := finish(p, 1); ok || detail != "second" {
		t.Fatalf("Verdict = %v, %q; want the last error line", ok, detail)
	}
}

// Gemini CLI says its own retries only as text on stderr; the stream shows
// the provider's trouble from the first one, while the CLI still retries.
func TestGeminiParserReadsItsRetryLines(t *testing.T) {
	p := newGeminiParser(nil)
	p.Line([]byte(`Attempt 1 failed with status 500. Retrying with backoff... _ApiError: {"error":{"code":500,"message":"boom","status":"INTERNAL"}}`))
	if got := p.Progress().ProviderError; got != "API error 500 Internal Server Error" {
		t.Errorf("after a 500 retry line: ProviderError %q", got)
	}
	p = newGeminiParser(nil)
	p.Line([]byte(`Attempt 2 failed with status 429. Retrying with backoff... Suggested retry after 20s.`))
	if pr := p.Progress(); !pr.RateLimited || pr.ProviderError != "" {
		t.Errorf("after a 429 retry line: %+v", pr)
	}
	p = newGeminiParser(nil)
	for _, l := range []string{"Attempt to read the file failed with status unknown", "Attempt 1 failed with status 404. Retrying", "    at throwErrorIfNotOK (file:///x.js:1:2)"} {
		p.Line([]byte(l))
	}
	if pr := p.Progress(); pr.RateLimited || pr.ProviderError != "" {
		t.Errorf("lines that are no provider trouble: %+v", pr)
	}
}
