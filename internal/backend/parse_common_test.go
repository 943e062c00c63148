package backend

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// fakeClock advances one second per reading, so that every time a parser
// takes is distinct and predictable.
type fakeClock struct{ t time.Time }

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newFakeClock() *fakeClock { return &fakeClock{t: epoch} }

func (c *fakeClock) now() time.Time {
	c.t = c.t.Add(time.Second)
	return c.t
}

// feed gives a parser a testdata file line by line through a LineSplitter
// in small writes, as a session's pipe would.
func feed(t testing.TB, p StreamParser, name string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("read testdata: %v", err)
	}
	ls := NewLineSplitter(0, p.Line)
	for len(b) > 0 {
		n := min(len(b), 97)
		_, _ = ls.Write(b[:n])
		b = b[n:]
	}
	ls.Flush()
}

func finish(p Reporter, exit int) (Result, bool, string) {
	p.Exit(exit)
	ok, detail := p.Verdict()
	var r Result
	p.Report(&r)
	return r, ok, detail
}

func TestExcerpt(t *testing.T) {
	if got := excerpt("short"); got != "short" {
		t.Fatalf("excerpt(short) = %q", got)
	}
	// A 3-byte rune straddling the limit is dropped whole.
	s := strings.Repeat("a", MaxResultText-1) + "€" + "tail"
	got := excerpt(s)
	if len(got) != MaxResultText-1 || !utf8.ValidString(got) {
		t.Fatalf("excerpt cut to %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
}

func TestRetryHint(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want time.Duration
	}{
		{"Rate limit reached for gpt-5 on tokens per min. Please try again in 1.898s.", 1898 * time.Millisecond},
		{"rate limited, try again in 20ms", 20 * time.Millisecond},
		{"Please retry in 30.5s.", 30500 * time.Millisecond},
		{`[API Error: {"error":{"code":429,"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"41s"}]}}]`, 41 * time.Second},
		{"slow down; retry after 2 minutes", 2 * time.Minute},
		{"Try again in 6m0s", 6 * time.Minute},
		{"try again in 30 seconds", 30 * time.Second},
	} {
		got, ok := retryHint(tc.msg)
		if !ok || got != tc.want {
			t.Errorf("retryHint(%q) = %v, %v; want %v", tc.msg, got, ok, tc.want)
		}
	}
	for _, msg := range []string{"", "429 Too Many Requests", "try again in a while", "try again in -5s", "retry in 0s"} {
		if d, ok := retryHint(msg); ok {
			t.Errorf("retryHint(%q) = %v, want none", msg, d)
		}
	}
}

func TestUnixTime(t *testing.T) {
	if got := unixTime(1795311466); !got.Equal(time.Unix(1795311466, 0)) {
		t.Errorf("seconds: %v", got)
	}
	if got := unixTime(1795311466123); !got.Equal(time.UnixMilli(1795311466123)) {
		t.Errorf("milliseconds: %v", got)
	}
	for _, v := range []float64{0, -1, 1e300} {
		if got := unixTime(v); !got.IsZero() {
			t.Errorf("unixTime(%v) = %v, want zero", v, got)
		}
	}
}

func TestReportToolCalls(t *testing.T) {
	c := newFakeClock()
	r := newReport(c.now)
	r.toolStart("a", "Bash", "ls", true)
	r.toolStart("a", "Bash", "ls", true) // the same call reported again
	r.toolStart("", "Read", "f", true)   // no id: counted, never ended
	r.toolEnd("a", false, true)
	r.toolEnd("nope", true, true)
	for i := range MaxToolCalls + 10 {
		r.toolStart("x"+strings.Repeat("y", i), "Edit", "", true)
	}
	var res Result
	r.fill(&res)
	if res.ToolCalls != MaxToolCalls+12 {
		t.Fatalf("ToolCalls = %d, want %d", res.ToolCalls, MaxToolCalls+12)
	}
	if len(res.Tools) != MaxToolCalls {
		t.Fatalf("len(Tools) = %d, want %d", len(res.Tools), MaxToolCalls)
	}
	a := res.Tools[0]
	if a.Name != "Bash" || !a.Start.Equal(epoch.Add(time.Second)) || !a.End.Equal(epoch.Add(3*time.Second)) {
		t.Fatalf("Tools[0] = %+v", a)
	}
	if !res.Tools[1].End.IsZero() {
		t.Fatalf("a call without an id ended: %+v", res.Tools[1])
	}
}

// checkInvariants holds for any input: bounded text and tool list, and a
// retry time only with a rate limit.
func checkInvariants(t *testing.T, p Reporter, exit int) {
	t.Helper()
	r, _, _ := finish(p, exit)
	if len(r.Text) > MaxResultText || !utf8.ValidString(r.Text) {
		t.Fatalf("text of %d bytes, valid UTF-8 %v", len(r.Text), utf8.ValidString(r.Text))
	}
	if len(r.Tools) > MaxToolCalls || r.ToolCalls < len(r.Tools) {
		t.Fatalf("ToolCalls %d, len(Tools) %d", r.ToolCalls, len(r.Tools))
	}
	if !r.RetryAfter.IsZero() && !r.RateLimited {
		t.Fatalf("RetryAfter %v without RateLimited", r.RetryAfter)
	}
}

// fuzzLines feeds data to p as lines, checking that Fatal can be asked after
// each, as a session does.
func fuzzLines(p Reporter, data []byte) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		p.Line(sc.Bytes())
		_ = p.Fatal()
	}
}

// addSeeds adds each testdata file, and each of its lines, to a fuzz corpus.
func addSeeds(f *testing.F, prefix string) {
	files, _ := filepath.Glob(filepath.Join("testdata", prefix+"*.jsonl"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, 0)
		for _, l := range bytes.Split(b, []byte("\n")) {
			f.Add(l, 1)
		}
	}
	f.Add([]byte("not json\n{\n{}\n[]\n{\"type\":null}\n"), 145)
}

// A line that is no JSON object costs the parsers no allocation: a session
// can print them by the million (its log is capped, its stream is not), and
// each allocation took its share of a garbage collection in the daemon.
// 32 MiB of empty lines took 4.5 s of the daemon's CPU, 0.65 s after.
func TestParsersAllocateNothingForOtherLines(t *testing.T) {
	for name, p := range map[string]StreamParser{
		"claude": newClaudeParser(nil), "codex": newCodexParser(nil), "gemini": newGeminiParser(nil),
	} {
		for _, line := range []string{"", "x", "   ", "not json at all"} {
			b := []byte(line)
			if n := testing.AllocsPerRun(100, func() { p.Line(b) }); n != 0 {
				t.Errorf("%s: %v allocations for the line %q, want none", name, n, line)
			}
		}
	}
}
