package backend

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCodexParserSuccess(t *testing.T) {
	p := newCodexParser(newFakeClock().now)
	feed(t, p, "codex-success.jsonl")
	r, ok, detail := finish(p, 0)
	if !ok {
		t.Fatalf("Verdict = %v, %q; want success (an error item is a warning)", ok, detail)
	}
	if want := (Usage{InputTokens: 240, OutputTokens: 60, CacheReadTokens: 14}); r.Usage != want {
		t.Errorf("Usage = %+v, want %+v", r.Usage, want)
	}
	if r.ToolCalls != 1 || len(r.Tools) != 1 || r.Tools[0].Name != "command_execution" || r.Tools[0].End.IsZero() {
		t.Errorf("tool calls %d %+v", r.ToolCalls, r.Tools)
	}
	if r.Text != "All done: wrote two.txt." || r.ResultAt.IsZero() {
		t.Errorf("Text %q ResultAt %v", r.Text, r.ResultAt)
	}
}

func TestCodexParserUnauthorizedIsFatal(t *testing.T) {
	p := newCodexParser(nil)
	feed(t, p, "codex-401.jsonl") // two "Reconnecting..." lines, no turn.failed yet
	if f := p.Fatal(); !strings.Contains(f, "401 Unauthorized") {
		t.Fatalf("Fatal() = %q", f)
	}
	if ok, _ := p.Verdict(); ok {
		t.Fatal("success")
	}
}

func TestCodexParserFailures(t *testing.T) {
	c := newFakeClock()
	p := newCodexParser(c.now)
	for _, l := range []string{
		`{"type":"turn.started"}`,
		`{"type":"error","message":"Reconnecting... 1/5 (exceeded retry limit, last status: 429 Too Many Requests)"}`,
		`{"type":"error","message":"Rate limit reached for gpt-5 in organization org-x on tokens per min. Please try again in 2.5s."}`,
		`{"type":"turn.failed","error":{"message":"exceeded retry limit, last status: 429 Too Many Requests"}}`,
	} {
		p.Line([]byte(l))
	}
	r, ok, detail := finish(p, 1)
	if ok || detail != "exceeded retry limit, last status: 429 Too Many Requests" {
		t.Fatalf("Verdict = %v, %q", ok, detail)
	}
	if !r.RateLimited || !r.RetryAfter.Equal(epoch.Add(time.Second+2500*time.Millisecond)) || r.Fatal != "" {
		t.Fatalf("RateLimited %v RetryAfter %v Fatal %q", r.RateLimited, r.RetryAfter, r.Fatal)
	}

	// A completed turn followed by a failed one is not a success.
	p = newCodexParser(nil)
	p.Line([]byte(`{"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":20,"output_tokens":1}}`))
	p.Line([]byte(`{"type":"turn.failed","error":{"message":"boom"}}`))
	r, ok, detail = finish(p, 0)
	if ok || detail != "boom" {
		t.Fatalf("Verdict = %v, %q", ok, detail)
	}
	// Cached tokens beyond the input (a provider's quirk) do not go negative.
	if r.Usage.InputTokens != 0 || r.Usage.CacheReadTokens != 10 {
		t.Fatalf("Usage = %+v", r.Usage)
	}
}

func FuzzCodexParser(f *testing.F) {
	addSeeds(f, "codex-")
	f.Fuzz(func(t *testing.T, data []byte, exit int) {
		p := newCodexParser(newFakeClock().now)
		fuzzLines(p, data)
		checkInvariants(t, p, exit)
		if r, _, _ := finish(p, exit); r.Usage.InputTokens < 0 {
			t.Fatalf("negative input tokens %d", r.Usage.InputTokens)
		}
	})
}

func BenchmarkCodexParser(b *testing.B) {
	benchParser(b, "codex-success.jsonl", func() StreamParser { return newCodexParser(nil) })
}

// Every start of a call goes to the tools policy's check, a repeated id
// included: a session's command printed starts for the ids Codex would use
// next, running `true`, and the model's next call under one of them (a
// refused command) was never checked.
func TestCodexParserChecksEveryStartOfACall(t *testing.T) {
	p := newCodexParser(newFakeClock().now)
	var told []string
	p.OnToolStart(func(c ToolCall) { told = append(told, c.Input) })
	for _, l := range []string{
		`{"type":"item.started","item":{"id":"item_2","type":"command_execution","command":"true","status":"in_progress"}}`,
		`{"type":"item.completed","item":{"id":"item_2","type":"command_execution","command":"true","exit_code":0,"status":"completed"}}`,
		`{"type":"item.started","item":{"id":"item_2","type":"command_execution","command":"echo evil","status":"in_progress"}}`,
	} {
		p.Line([]byte(l))
	}
	if !slices.ContainsFunc(told, func(in string) bool { return strings.Contains(in, "echo evil") }) {
		t.Errorf("the policy was told of %q, not of the call under a repeated id", told)
	}
	r, _, _ := finish(p, 0)
	if r.ToolCalls != 1 {
		t.Errorf("%d tool calls counted, want 1 (an id counts once)", r.ToolCalls)
	}
}

// Bytes written into the CLI's stream without a newline begin its next
// line. A tool call's record is still read from its first brace, so the
// tools policy hears of it; one that still does not parse (a brace glued
// on) ends the session as tampered with, instead of going unchecked.
func TestCodexParserGluedBytesHideNoCall(t *testing.T) {
	started := `{"type":"item.started","item":{"id":"item_3","type":"command_execution","command":"echo evil","status":"in_progress"}}`
	for _, tc := range []struct {
		glue      string
		told, end bool // the policy told of the call; the session ended as tampered with
	}{
		{"xxx", true, false},
		{"{", false, true},
		{"{{{{{{{{{{", false, true},
	} {
		p := newCodexParser(newFakeClock().now)
		var told []string
		p.OnToolStart(func(c ToolCall) { told = append(told, c.Input) })
		p.Line([]byte(tc.glue + started))
		gotTold := slices.ContainsFunc(told, func(in string) bool { return strings.Contains(in, "echo evil") })
		if gotTold != tc.told || (p.Fatal() != "") != tc.end {
			t.Errorf("glue %q: told %v (want %v), fatal %q (want one: %v)", tc.glue, gotTold, tc.told, p.Fatal(), tc.end)
		}
	}
	// A plain line that names no call, and one cut at the splitter's
	// bound, end nothing.
	p := newCodexParser(nil)
	p.Line([]byte("warning: something { odd"))
	p.Line(append([]byte(`{"type":"item.started"`), make([]byte, DefaultMaxLine)...))
	if p.Fatal() != "" {
		t.Errorf("fatal %q for lines the session did not tamper with", p.Fatal())
	}
}
