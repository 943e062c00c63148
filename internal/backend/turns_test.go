package backend

import (
	"strings"
	"testing"
)

// TestParsersCountTurnsAndRecordTools reads each CLI's recorded session (a
// failing shell command, a commit, a final answer): three model turns, and
// each tool call with its command, its end and whether it failed, told to
// OnTool as it ends.
func TestParsersCountTurnsAndRecordTools(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Reporter
		// Codex reports a failed shell command as failed; Claude Code as a
		// tool error; Gemini CLI's tool itself succeeds.
		firstFailed bool
		firstName   string
	}{
		{"claude", newClaudeParser(newFakeClock().now), true, "Bash"},
		{"codex", newCodexParser(newFakeClock().now), true, "command_execution"},
		{"gemini", newGeminiParser(newFakeClock().now), false, "run_shell_command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var told []ToolCall
			tc.p.OnTool(func(c ToolCall) { told = append(told, c) })
			feed(t, tc.p, tc.name+"-tools.log")
			r, _, _ := finish(tc.p, 0)
			if r.Turns != 3 || r.TurnLimit {
				t.Errorf("Turns = %d, TurnLimit %v; want 3 turns", r.Turns, r.TurnLimit)
			}
			if len(told) != 2 || len(r.Tools) != 2 {
				t.Fatalf("OnTool told %d calls, Tools %d; want 2: %+v", len(told), len(r.Tools), told)
			}
			for i, c := range told {
				if c != r.Tools[i] {
					t.Errorf("OnTool call %d %+v differs from Tools %+v", i, c, r.Tools[i])
				}
				if c.ID == "" || c.End.IsZero() || !c.End.After(c.Start) {
					t.Errorf("call %d not finished: %+v", i, c)
				}
			}
			first, second := told[0], told[1]
			if first.Name != tc.firstName || !strings.Contains(first.Input, "echo hello; echo two; false") || first.Failed != tc.firstFailed {
				t.Errorf("first call %+v; want %s running the failing echo, failed %v", first, tc.firstName, tc.firstFailed)
			}
			if !strings.Contains(second.Input, "git commit -q -m 'x'") || second.Failed {
				t.Errorf("second call %+v; want the commit, not failed", second)
			}
		})
	}
}

// TestReportTurnsSettle: a turn is settled once every tool call it made
// has ended; text alone never settles it (the session ends by itself).
func TestReportTurnsSettle(t *testing.T) {
	r := newReport(newFakeClock().now)
	check := func(want int, settled bool) {
		t.Helper()
		if n, s := r.turns, r.settled(); n != want || s != settled {
			t.Fatalf("turns %d settled %v; want %d %v", n, s, want, settled)
		}
	}
	check(0, false)
	r.output() // text
	r.toolStart("a", "Bash", "ls", true)
	r.toolStart("b", "Bash", "pwd", true) // parallel calls of one turn
	check(1, false)
	r.toolEnd("a", false, true)
	check(1, false)
	r.toolEnd("b", false, true)
	check(1, true)
	r.toolStart("sub", "Read", "x", false) // a subagent's call: no turn
	r.toolEnd("sub", false, false)
	check(1, true)
	r.output()
	check(2, false)
	r.output() // the same response goes on
	check(2, false)
}

// TestReportUnfinishedCallsAtReport: calls that never ended are told to
// OnTool once, in start order, when the session is reported; Report again
// tells nothing.
func TestReportUnfinishedCallsAtReport(t *testing.T) {
	r := newReport(newFakeClock().now)
	var told []string
	r.onTool = func(c ToolCall) {
		told = append(told, c.Name)
		if c.Name != "done" && !c.End.IsZero() {
			t.Errorf("unfinished call %s has an end", c.Name)
		}
	}
	r.toolStart("1", "first", "", true)
	r.toolStart("", "second", "", true)
	r.toolStart("3", "done", "", true)
	r.toolStart("4", "fourth", "", true)
	r.toolEnd("3", false, true)
	var res Result
	r.fill(&res)
	r.fill(&res)
	if got := strings.Join(told, ","); got != "done,first,second,fourth" {
		t.Fatalf("told %s", got)
	}
}

func TestToolInputBounded(t *testing.T) {
	long := strings.Repeat("é", MaxToolInput) // 2 bytes each
	got := toolInput(long)
	if len(got) > MaxToolInput || !strings.HasPrefix(long, got) || len(got) < MaxToolInput-1 {
		t.Fatalf("toolInput cut %d bytes to %d", len(long), len(got))
	}
	if got := toolInput("a\xffb"); got != "a\uFFFDb" {
		t.Fatalf("invalid UTF-8 kept: %q", got)
	}
}
