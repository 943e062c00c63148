package backend

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// render renders data written in chunks of n bytes.
func render(t testing.TB, data []byte, n int) string {
	t.Helper()
	var out bytes.Buffer
	r := NewRenderer(&out)
	for len(data) > 0 {
		k := min(n, len(data))
		if _, err := r.Write(data[:k]); err != nil {
			t.Fatalf("Write: %v", err)
		}
		data = data[k:]
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return out.String()
}

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// inOrder checks that out has each of the lines, whole, in this order.
func inOrder(t *testing.T, out string, lines ...string) {
	t.Helper()
	got := strings.Split(out, "\n")
	i := 0
	for _, want := range lines {
		for i < len(got) && got[i] != want {
			i++
		}
		if i == len(got) {
			t.Fatalf("rendered output lacks %q (in this order):\n%s", want, out)
		}
		i++
	}
}

// usageOf is the usage line for the tokens and cost the format's parser
// reports for a whole log: what swarmd records for the session.
func usageOf(t *testing.T, p Reporter, name string) string {
	t.Helper()
	feed(t, p, name)
	var r Result
	p.Report(&r)
	return "  " + usageText(r.Usage)
}

// Session logs of the real CLIs (2.1.328, 0.169.0, 0.61.0) answered by
// mockllm: a shell call that fails, one that commits, a two-line answer.
func TestRenderRecordedSessions(t *testing.T) {
	for _, tc := range []struct {
		log    string
		parser Reporter
		want   []string
	}{
		{"claude-tools.log", newClaudeParser(nil), []string{
			"● claude claude-opus-5-5 in /tmp/rec/repo",
			"→ Bash: echo hello; echo two; false",
			"  ✗ Exit code 1", "  │ hello", "  │ two",
			`→ Bash: printf 'made by the agent\n' > agent.txt && git add -A && git commit -q -m 'x' && echo committed`,
			"  │ committed",
			"Committed.", "Second line.",
			"✓ success (3 turns, 0.3s)",
			"  tokens: 360 in · 90 out · 21 cache read · 15 cache write · cost $0.0033",
		}},
		{"codex-tools.log", newCodexParser(nil), []string{
			"✗ Model metadata for `mock-model` not found. Defaulting to fallback metadata; this can degrade performance and cause issues.",
			"→ shell: /bin/bash -lc 'echo hello; echo two; false'",
			"  ✗ exit 1", "  │ hello", "  │ two",
			"  │ committed",
			"Committed.", "Second line.",
			"✓ turn completed",
			"  tokens: 360 in · 90 out · 21 cache read",
		}},
		{"gemini-tools.log", newGeminiParser(nil), []string{
			"● gemini auto",
			"→ run_shell_command: echo hello; echo two; false",
			"  │ hello", "  │ two",
			"  │ committed",
			"Committed.", "Second line.",
			"✓ success",
			"  tokens: 370 in · 95 out · 21 cache read",
		}},
	} {
		t.Run(tc.log, func(t *testing.T) {
			data := readTestdata(t, tc.log)
			out := render(t, data, 61)
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			want := append([]string{lines[0]}, tc.want...) // the header, ...
			want = append(want, lines[len(lines)-1])       // ..., the footer
			inOrder(t, out, want...)
			if u := usageOf(t, tc.parser, tc.log); !strings.Contains(out, "\n"+u+"\n") {
				t.Errorf("tokens shown differ from the parser's %q:\n%s", u, out)
			}
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(strings.TrimSpace(l), "{") {
					t.Errorf("a JSON line is shown: %q", l)
				}
			}
			if len(out)*3 > len(data) && tc.log == "claude-tools.log" {
				t.Errorf("rendered %d bytes of %d: not much shorter", len(out), len(data))
			}
		})
	}
}

// Non-JSON lines are shown bounded: the first lines of a run that are not
// indented, then how many were not shown (Gemini CLI's JavaScript stack
// trace of an API error, its startup warnings).
func TestRenderBoundsTextLines(t *testing.T) {
	out := render(t, readTestdata(t, "gemini-401.jsonl"), 4096)
	inOrder(t, out,
		"  Warning: 256-color support not detected. Using a terminal with at least 256-color support is recommended for a better visual experience.",
		"  YOLO mode is enabled. All tool calls will be automatically approved.",
		"  YOLO mode is enabled. All tool calls will be automatically approved.",
		"  … (2 more lines)",
		"● gemini auto",
		"  … (12 more lines)",
		`✗ error: [API Error: {"error":{"code":401,"message":"mockllm: 401 Unauthorized","status":"UNAUTHENTICATED"}}]`,
		"  tokens: 10 in · 5 out",
	)
	if !strings.Contains(out, "\n  Error when talking to Gemini API Full report available at:") {
		t.Errorf("the stack trace's first line is not shown:\n%s", out)
	}
	if strings.Contains(out, "at throwErrorIfNotOK") {
		t.Errorf("stack frames are shown:\n%s", out)
	}
	// A plain-text log is bounded the same way, run by run.
	var text strings.Builder
	for i := range 100 {
		text.WriteString("line " + strconv.Itoa(i) + "\n")
	}
	if out := render(t, []byte(text.String()), 7); out != "  line 0\n  line 1\n  line 2\n  … (97 more lines)\n" {
		t.Errorf("100 text lines rendered as:\n%s", out)
	}
}

// A tool's output shows its first lines, each cut, with escape sequences
// made harmless; a multi-line command shows its first line.
func TestRenderBoundsToolOutput(t *testing.T) {
	var lines []string
	for i := range 100 {
		lines = append(lines, "out "+strconv.Itoa(i))
	}
	lines[1] = strings.Repeat("x", 1000)
	lines[2] = "\x1b[31mred\x1b[0m"
	content, _ := json.Marshal(strings.Join(lines, "\n"))
	log := `{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"cat <<EOF\na\nb\nEOF"}}]}}
{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":` + string(content) + `}]}}
`
	out := render(t, []byte(log), 3)
	inOrder(t, out,
		"→ Bash: cat <<EOF (+3 lines)",
		"  │ out 0",
		"  │ "+strings.Repeat("x", renderWidth-1)+"…",
		"  │ \uFFFD[31mred\uFFFD[0m",
		"  │ out 7",
		"  │ … (92 more lines)",
	)
	if strings.Contains(out, "out 8\n") {
		t.Errorf("more than %d lines of output shown:\n%s", renderOutLines, out)
	}
}

// The renderer renders each line as soon as it is complete: a followed log
// shows a tool call while it runs.
func TestRenderStreams(t *testing.T) {
	var out bytes.Buffer
	r := NewRenderer(&out)
	data := readTestdata(t, "claude-tools.log")
	call := bytes.Index(data, []byte(`"type":"tool_use"`))
	end := call + bytes.IndexByte(data[call:], '\n') + 1
	for _, b := range data[:end] {
		if _, err := r.Write([]byte{b}); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.HasSuffix(out.String(), "→ Bash: echo hello; echo two; false\n") {
		t.Fatalf("after the tool call's line, output is:\n%s", out.String())
	}
	// Gemini's assistant text comes in deltas and is shown once it ends.
	out.Reset()
	r = NewRenderer(&out)
	_, _ = r.Write([]byte(`{"type":"init","model":"m"}` + "\n" +
		`{"type":"message","role":"assistant","content":"Hel","delta":true}` + "\n" +
		`{"type":"message","role":"assistant","content":"lo.","delta":true}` + "\n"))
	if strings.Contains(out.String(), "Hel") {
		t.Fatalf("a delta shown before the message ended:\n%s", out.String())
	}
	if err := r.Close(); err != nil || !strings.HasSuffix(out.String(), "\nHello.\n") {
		t.Fatalf("Close = %v; output:\n%s", err, out.String())
	}
}

// Each attempt in a log starts afresh: the next may be another backend's.
func TestRenderSeveralAttempts(t *testing.T) {
	log := append(readTestdata(t, "codex-tools.log"), readTestdata(t, "claude-tools.log")...)
	inOrder(t, render(t, log, 1024),
		"→ shell: /bin/bash -lc 'echo hello; echo two; false'", "✓ turn completed",
		"→ Bash: echo hello; echo two; false", "✓ success (3 turns, 0.3s)",
	)
}

type failWriter struct{ n int }

var errDiskFull = errors.New("disk full")

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n == 0 {
		return 0, errDiskFull
	}
	w.n--
	return len(p), nil
}

// A failing output (a closed pipe) stops the rendering with its error.
func TestRenderWriteError(t *testing.T) {
	r := NewRenderer(&failWriter{n: 2})
	_, err := r.Write(readTestdata(t, "claude-tools.log"))
	if !errors.Is(err, errDiskFull) {
		t.Fatalf("Write = %v, want the writer's error", err)
	}
	if _, err := r.Write([]byte("more\n")); !errors.Is(err, errDiskFull) {
		t.Fatalf("second Write = %v", err)
	}
	if err := r.Close(); !errors.Is(err, errDiskFull) {
		t.Fatalf("Close = %v", err)
	}
}

func TestCut(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 3, "abc"}, {"abcd", 3, "ab…"}, {"ééé", 3, "ééé"}, {"éééé", 3, "éé…"}, {"", 1, ""},
	} {
		if got := cut(tc.s, tc.n); got != tc.want {
			t.Errorf("cut(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

func FuzzRenderer(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.*")) // not the fuzz directory
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("a\n \n{}\n{\"type\":\"error\",\"message\":\"x\\ny\"}\n\x1b[2J\n{\"type\":\"result\",\"is_error\":true}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var out bytes.Buffer
		r := NewRenderer(&out)
		// Two writes at an arbitrary point: lines may arrive in pieces.
		half := len(data) / 3
		if _, err := r.Write(data[:half]); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Write(data[half:]); err != nil {
			t.Fatal(err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		s := out.String()
		if !utf8.ValidString(s) {
			t.Fatalf("invalid UTF-8 in %q", s)
		}
		if len(s) > 8*len(data)+4096 {
			t.Fatalf("rendered %d bytes of %d", len(s), len(data))
		}
		for _, l := range strings.Split(s, "\n") {
			if n := utf8.RuneCountInString(l); n > renderTextWidth+8 {
				t.Fatalf("a line of %d runes", n)
			}
			if strings.IndexFunc(l, func(c rune) bool { return unicode.IsControl(c) }) >= 0 {
				t.Fatalf("control character in %q", l)
			}
		}
	})
}
