package review

import (
	"errors"
	"strings"
	"testing"
)

func TestScan(t *testing.T) {
	tests := []struct {
		text string
		want Signal
	}{
		// The line is the signal, possibly decorated.
		{"DONE", Done},
		{"PASS", Pass},
		{"FAIL", Fail},
		{"All good.\n\nDONE\n", Done},
		{"summary\r\nDONE\r\n", Done},
		{"  DONE  ", Done},
		{"**DONE**", Done},
		{"`PASS`", Pass},
		{"## FAIL", Fail},
		{"> DONE", Done},
		{"DONE.", Done},
		{"DONE!", Done},
		{"_DONE_", Done},
		{"\tDONE\u00a0", Done},
		// The signal then ':' or a dash, then anything.
		{"DONE: implemented the parser", Done},
		{"DONE:", Done},
		{"**PASS**: looks good", Pass},
		{"FAIL: no tests for the error path", Fail},
		{"DONE - added tests", Done},
		{"DONE — added tests", Done},
		{"DONE – added tests", Done},
		// Only the last non-empty line counts.
		{"DONE\nbut then more text", NoSignal},
		{"I will print DONE when finished.\nWorking on it.", NoSignal},
		{"FAIL: first try\n\nPASS", Pass},
		{"report\n\nDONE\n```\n", Done},       // a closing fence is skipped
		{"report\n\nDONE\n\n***\n  \n", Done}, // so is a rule
		{"```\nDONE\n```\nnote", NoSignal},
		// Not the signal.
		{"", NoSignal},
		{"\n \n\t\n", NoSignal},
		{"NOT DONE", NoSignal},
		{"DONEGAL", NoSignal},
		{"DONE_FAIL", NoSignal},
		{"DONE-ish", NoSignal},
		{"I am DONE", NoSignal},
		{"Verdict: PASS", NoSignal},
		{"Status: DONE", NoSignal},
		{"done", NoSignal},
		{"Done.", NoSignal},
		{"DONE. All tests pass", NoSignal},
		{"DONE all tests pass", NoSignal},
		{"- DONE", NoSignal},
		{"1. DONE", NoSignal},
		{"PASSED", NoSignal},
		{"FAILURE: disk full", NoSignal},
		{"\x1b[32mDONE\x1b[0m", NoSignal}, // colours are not stripped
		{"DONE\x00", NoSignal},
		{"\xff\xfeDONE", NoSignal},
	}
	var s Signals
	for _, tt := range tests {
		if got := s.Scan(tt.text); got != tt.want {
			t.Errorf("Scan(%q) = %v, want %v", tt.text, got, tt.want)
		}
	}
}

func TestScanConfigured(t *testing.T) {
	s := Signals{Done: "<promise>COMPLETE</promise>", Pass: "LGTM"} // Fail stays FAIL
	tests := []struct {
		text string
		want Signal
	}{
		{"work\n<promise>COMPLETE</promise>", Done},
		{"LGTM: ship it", Pass},
		{"**LGTM**", Pass},
		{"FAIL", Fail},
		{"DONE", NoSignal}, // the default is replaced, not added
		{"PASS", NoSignal},
		{"<promise>COMPLETE", NoSignal},
	}
	for _, tt := range tests {
		if got := s.Scan(tt.text); got != tt.want {
			t.Errorf("Scan(%q) = %v, want %v", tt.text, got, tt.want)
		}
	}
	// One word a prefix of another: the longest match wins.
	s = Signals{Done: "OK", Pass: "OK."}
	for text, want := range map[string]Signal{"OK.": Pass, "OK": Done, "OK: fine": Done, "OK.: fine": Pass} {
		if got := s.Scan(text); got != want {
			t.Errorf("prefix words: Scan(%q) = %v, want %v", text, got, want)
		}
	}
	// Equal words (refused by Validate): the conservative reading.
	if got := (Signals{Done: "X", Fail: "X"}).Scan("X"); got != Fail {
		t.Errorf("equal words: %v, want fail", got)
	}
}

func TestValidate(t *testing.T) {
	good := []Signals{{}, {Done: "TASK_COMPLETE", Pass: "LGTM", Fail: "REJECT"}, {Done: "<promise>COMPLETE</promise>"}, {Done: "✅"}}
	for _, s := range good {
		if err := s.Validate(); err != nil {
			t.Errorf("%+v: %v", s, err)
		}
	}
	bad := []struct {
		s    Signals
		want string
	}{
		{Signals{Done: "ALL DONE"}, `signals.done "ALL DONE": invalid signal: contains ' '`},
		{Signals{Pass: "OK:"}, `signals.pass "OK:": invalid signal: contains ':'`},
		{Signals{Fail: "*FAIL*"}, `signals.fail "*FAIL*": invalid signal: starts with '*'`},
		{Signals{Done: "-done"}, `signals.done "-done": invalid signal: starts with '-'`},
		{Signals{Done: "#1"}, `signals.done "#1": invalid signal: starts with '#'`},
		{Signals{Done: "A\tB"}, `signals.done "A\tB": invalid signal: contains '\t'`},
		{Signals{Done: "\xff"}, `signals.done "\xff": invalid signal: not valid UTF-8`},
		{Signals{Done: strings.Repeat("D", 65)}, "invalid signal: longer than 64 bytes"},
		{Signals{Done: "PASS"}, `signals.done and signals.pass are both "PASS": invalid signal: they must differ`},
		{Signals{Done: "X", Fail: "X"}, `signals.done and signals.fail are both "X"`},
		{Signals{Pass: "FAIL"}, `signals.pass and signals.fail are both "FAIL"`},
	}
	for _, tt := range bad {
		err := tt.s.Validate()
		if !errors.Is(err, ErrInvalidSignal) || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%+v: %v; want %q", tt.s, err, tt.want)
		}
	}
}

// TestScanTail: a command's output is cut to its last CommandTail bytes;
// the cut may split the first line or a rune without changing the result.
func TestScanTail(t *testing.T) {
	out := strings.Repeat("compiling é…\n", 1000) + "DONE: built\n"
	tail := out[len(out)-CommandTail:]
	if got := (Signals{}).Scan(tail); got != Done {
		t.Errorf("tail: %v", got)
	}
	if got := (Signals{}).Scan(out[len(out)-CommandTail : len(out)-10]); got != NoSignal {
		t.Errorf("cut inside the signal: %v", got)
	}
}

func TestScanAllocs(t *testing.T) {
	text := strings.Repeat("line of output\n", 200) + "**PASS**: fine\n\n```\n"
	var s Signals
	allocs := testing.AllocsPerRun(100, func() {
		if s.Scan(text) != Pass {
			panic("no pass")
		}
	})
	if allocs != 0 {
		t.Errorf("Scan allocated %.1f times, want 0", allocs)
	}
}
