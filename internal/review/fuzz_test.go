package review

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// The oracle for FuzzScan: the rule of Signals.Scan written as regular
// expressions. ws is unicode.IsSpace as a class.
const ws = `\s\v\x{85}\p{Z}`

var blankLine = regexp.MustCompile("^[" + ws + "#>*_`]*$")

func oracleCarries(line, word string) bool {
	re := regexp.MustCompile("^[" + ws + "#>*_`]*" + regexp.QuoteMeta(word) +
		"(?:[" + ws + "*_`.!]*$|[*_`]*:|[*_`]*[" + ws + "]+[-–—])")
	return re.MatchString(line)
}

func oracleScan(s Signals, text string) Signal {
	s = s.withDefaults()
	if !utf8.ValidString(s.Done) || !utf8.ValidString(s.Pass) || !utf8.ValidString(s.Fail) {
		return NoSignal
	}
	lines := strings.Split(text, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if blankLine.MatchString(lines[i]) {
			continue
		}
		best, bestLen := NoSignal, 0
		for _, c := range []struct {
			sig  Signal
			word string
		}{{Fail, s.Fail}, {Pass, s.Pass}, {Done, s.Done}} {
			if len(c.word) > bestLen && oracleCarries(lines[i], c.word) {
				best, bestLen = c.sig, len(c.word)
			}
		}
		return best
	}
	return NoSignal
}

func FuzzScan(f *testing.F) {
	for _, text := range []string{"DONE", "x\n**PASS**: ok\n```\n", "NOT DONE", "DONE — x", "FAIL:\r\n", "DONEGAL", "\u00a0DONE\u2028"} {
		f.Add(text, "", "", "")
	}
	f.Add("work\nLGTM.", "FINISHED", "LGTM", "NOPE")
	f.Add("OK.: x", "OK", "OK.", "")
	f.Fuzz(func(t *testing.T, text, done, pass, fail string) {
		s := Signals{Done: done, Pass: pass, Fail: fail}
		got := s.Scan(text)
		// A regexp cannot hold an invalid UTF-8 word (Validate refuses one
		// too); Scan must still not panic on it.
		oracle := utf8.ValidString(done) && utf8.ValidString(pass) && utf8.ValidString(fail)
		if want := oracleScan(s, text); oracle && got != want {
			t.Fatalf("Scan(%q) with %+v = %v, oracle %v", text, s, got, want)
		}
		// Only the last non-empty line counts: text before it and blank lines
		// after it change nothing.
		if lastLine(text) != "" {
			if again := s.Scan(s.withDefaults().Done + "\n" + text); again != got {
				t.Fatalf("a DONE line before %q changed %v to %v", text, got, again)
			}
		}
		if again := s.Scan(text + "\n \r\n```\n"); again != got {
			t.Fatalf("blank lines after %q changed %v to %v", text, got, again)
		}
		// A word inside a line is never a signal.
		if again := s.Scan(text + "\nNOT " + s.withDefaults().Done); again != NoSignal && !strings.HasPrefix(s.withDefaults().Done, "NOT") &&
			!strings.HasPrefix(s.withDefaults().Pass, "NOT") && !strings.HasPrefix(s.withDefaults().Fail, "NOT") {
			t.Fatalf("NOT %s read as %v", s.withDefaults().Done, again)
		}
	})
}

// FuzzLoop drives a loop with random events and checks its invariants: it
// only takes seed rows, refusals change nothing, terminal states absorb,
// the iteration never passes max_iterations, rounds are one per verdict with
// increasing iterations, and Resume(Snapshot()) gives the same loop.
func FuzzLoop(f *testing.F) {
	f.Add([]byte{3, 0, 2, 9, 2, 8})
	f.Add([]byte{0, 0, 2, 9, 2, 9, 2, 9, 2, 9})
	f.Add([]byte{1, 0, 1, 2, 7, 6, 9, 10, 11})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		l := New(uint32(data[0] % 5))
		verdicts := 0
		for i, b := range data[1:] {
			before := l.Snapshot()
			err := events[int(b)%len(events)].apply(l)
			after := l.Snapshot()
			name := events[int(b)%len(events)].name
			if err != nil || before.State.IsTerminal() {
				if err == nil || !sameSnapshot(before, after) {
					t.Fatalf("step %d: %v + %s: err %v, %+v → %+v", i, before.State, name, err, before, after)
				}
				continue
			}
			if after.State != before.State && !CanTransition(before.State, after.State) {
				t.Fatalf("step %d: %s took %v → %v", i, name, before.State, after.State)
			}
			if len(after.History) > len(before.History) {
				verdicts++
			}
			if len(after.History) != verdicts || after.Iteration > l.MaxIterations() || (after.Failure != "") != (after.State == Failed) {
				t.Fatalf("step %d: %s: %+v (verdicts %d)", i, name, after, verdicts)
			}
			r, err := Resume(after)
			if err != nil || !sameSnapshot(r.Snapshot(), after) || r.Next() != l.Next() {
				t.Fatalf("step %d: Resume(%+v) = %v", i, after, err)
			}
		}
	})
}
