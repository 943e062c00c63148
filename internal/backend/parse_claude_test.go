package backend

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestClaudeParserSuccess(t *testing.T) {
	p := newClaudeParser(newFakeClock().now)
	feed(t, p, "claude-success.jsonl")
	r, ok, detail := finish(p, 0)
	if !ok || detail != "" {
		t.Fatalf("Verdict = %v, %q; want success", ok, detail)
	}
	want := Usage{InputTokens: 240, OutputTokens: 60, CacheReadTokens: 14, CacheWriteTokens: 10, CostUSD: 0.0022128}
	if r.Usage != want {
		t.Errorf("Usage = %+v, want %+v", r.Usage, want)
	}
	if r.ToolCalls != 1 || len(r.Tools) != 1 || r.Tools[0].Name != "Bash" || r.Tools[0].End.IsZero() {
		t.Errorf("tool calls %d %+v, want one ended Bash call", r.ToolCalls, r.Tools)
	}
	if r.Text != "All done: wrote one.txt." {
		t.Errorf("Text = %q", r.Text)
	}
	if r.ResultAt.IsZero() || !r.ResultAt.After(r.Tools[0].End) {
		t.Errorf("ResultAt %v, tool end %v", r.ResultAt, r.Tools[0].End)
	}
	if r.Fatal != "" || r.RateLimited {
		t.Errorf("Fatal %q RateLimited %v on a success", r.Fatal, r.RateLimited)
	}
}

func TestClaudeParserAuthRetryIsFatal(t *testing.T) {
	p := newClaudeParser(newFakeClock().now)
	// The init line alone is not an error; the first api_retry line with
	// authentication_failed is, before the CLI gives up.
	feed(t, p, "claude-401.jsonl")
	if f := p.Fatal(); !strings.Contains(f, "authentication failed") || !strings.Contains(f, "401") {
		t.Fatalf("Fatal() = %q, want an authentication failure naming 401", f)
	}
	r, ok, _ := finish(p, 130)
	if ok || r.Fatal == "" {
		t.Fatalf("Verdict %v, Fatal %q", ok, r.Fatal)
	}

	for _, line := range []string{
		`{"type":"system","subtype":"api_retry","attempt":1,"error":"authentication_failed"}`,
		`{"type":"assistant","message":{"content":[{"type":"text","text":"API Error: 403"}]},"error":"unknown","api_error_status":403}`,
		`{"type":"result","is_error":true,"result":"API Error: 401","api_error_status":401}`,
	} {
		p := newClaudeParser(nil)
		p.Line([]byte(`{"type":"system","subtype":"init"}`))
		if p.Fatal() != "" {
			t.Fatalf("fatal after init")
		}
		p.Line([]byte(line))
		if p.Fatal() == "" {
			t.Errorf("no fatal after %s", line)
		}
	}
}

func TestClaudeParserRateLimit(t *testing.T) {
	c := newFakeClock()
	p := newClaudeParser(c.now)
	feed(t, p, "claude-429.jsonl")
	r, ok, detail := finish(p, 1)
	if ok || !strings.Contains(detail, "429") {
		t.Fatalf("Verdict = %v, %q; want a 429 error", ok, detail)
	}
	if !r.RateLimited || r.Fatal != "" {
		t.Fatalf("RateLimited %v Fatal %q", r.RateLimited, r.Fatal)
	}
	// The api_retry line was read at epoch+1s with a delay of 1133 ms.
	if want := epoch.Add(time.Second + 1133*time.Millisecond); !r.RetryAfter.Equal(want) {
		t.Fatalf("RetryAfter = %v, want %v", r.RetryAfter, want)
	}

	// A reset time reported by a rejected rate_limit_event outlasts a
	// shorter retry delay.
	p = newClaudeParser(newFakeClock().now)
	p.Line([]byte(`{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1900000000,"rateLimitType":"five_hour"}}`))
	p.Line([]byte(`{"type":"system","subtype":"api_retry","retry_delay_ms":500,"error_status":429,"error":"rate_limit"}`))
	p.Line([]byte(`{"type":"rate_limit_event","rate_limit_info":{"status":"allowed_warning","resetsAt":1999999999}}`))
	r, _, _ = finish(p, 1)
	if want := time.Unix(1900000000, 0); !r.RetryAfter.Equal(want) {
		t.Fatalf("RetryAfter = %v, want %v", r.RetryAfter, want)
	}

	// A retry for another status is not a rate limit.
	p = newClaudeParser(nil)
	p.Line([]byte(`{"type":"system","subtype":"api_retry","retry_delay_ms":500,"error_status":500,"error":"server_error"}`))
	if r, _, _ := finish(p, 1); r.RateLimited || r.Fatal != "" {
		t.Fatalf("500 retry: RateLimited %v Fatal %q", r.RateLimited, r.Fatal)
	}
}

func TestClaudeParserOddLines(t *testing.T) {
	p := newClaudeParser(nil)
	for _, l := range []string{
		"", "plain text from stderr", "{", "[1,2]", `{"type":"result"}`, // no is_error: not a result record
		`{"type":"user","message":{"role":"user","content":"the prompt as a string"}}`,
		`{"type":"assistant","message":{"content":[{"type":"tool_use","id":7,"name":["x"]}]}}`,
		`{"type":"result","is_error":"false"}`,
		`{"type":"some_future_type","result":"x","is_error":false}`,
	} {
		p.Line([]byte(l))
	}
	if ok, _ := p.Verdict(); ok {
		t.Fatal("success without a result record")
	}
	// A field of a new shape does not hide the others.
	p.Line([]byte(`{"type":"result","is_error":false,"result":"ok","usage":"n/a","total_cost_usd":0.5}`))
	if ok, _ := p.Verdict(); !ok {
		t.Fatal("result record with an odd usage field not taken")
	}
}

func FuzzClaudeParser(f *testing.F) {
	addSeeds(f, "claude-")
	f.Fuzz(func(t *testing.T, data []byte, exit int) {
		p := newClaudeParser(newFakeClock().now)
		fuzzLines(p, data)
		checkInvariants(t, p, exit)
	})
}

// benchParser feeds a testdata file's lines to new parsers, b.N times.
func benchParser(b *testing.B, name string, newP func() StreamParser) {
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		b.Fatal(err)
	}
	lines := bytes.Split(data, []byte("\n"))
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		p := newP()
		for _, l := range lines {
			p.Line(l)
		}
		p.Verdict()
	}
}

func BenchmarkClaudeParser(b *testing.B) {
	benchParser(b, "claude-success.jsonl", func() StreamParser { return newClaudeParser(nil) })
}

// Code in a session can write lines into the CLI's stream: a result that
// reports less than the responses streamed, or negative counts, is not
// believed. (A forged result with tokens of -4,000,000 was priced into a
// cost of -$12, which credited the budget for good.)
func TestClaudeParserForgedResultNeverLowersUsage(t *testing.T) {
	response := func(id string) string {
		return `{"type":"assistant","message":{"id":"` + id + `","model":"m","content":[{"type":"text","text":"x"}],` +
			`"usage":{"input_tokens":100000,"output_tokens":20000}}}`
	}
	for _, tc := range []struct{ name, result string }{
		{"fewer", `{"type":"result","subtype":"success","is_error":false,"result":"ok","total_cost_usd":0.0001,"usage":{"input_tokens":1,"output_tokens":1}}`},
		{"negative", `{"type":"result","subtype":"success","is_error":false,"result":"ok","total_cost_usd":-12,"usage":{"input_tokens":-4000000,"output_tokens":-1}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newClaudeParser(newFakeClock().now)
			for _, l := range []string{`{"type":"system","subtype":"init"}`, response("m1"), response("m2"), tc.result} {
				p.Line([]byte(l))
			}
			r, _, _ := finish(p, 0)
			if r.Usage.InputTokens != 200000 || r.Usage.OutputTokens != 40000 {
				t.Errorf("tokens in/out %d/%d, want 200000/40000: the two responses streamed", r.Usage.InputTokens, r.Usage.OutputTokens)
			}
			if r.Usage.CostUSD < 0 {
				t.Errorf("cost %v, want never negative", r.Usage.CostUSD)
			}
		})
	}
}
