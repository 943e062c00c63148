package review

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Signal is the signal a session's result carries, if any.
type Signal uint8

// The signals of seed 002. The zero value is "no signal".
const (
	NoSignal Signal = iota
	Done            // the worker says the task is done
	Pass            // the reviewer approves the work
	Fail            // the worker gives up, or the reviewer rejects the work
)

var signalNames = [...]string{NoSignal: "none", Done: "done", Pass: "pass", Fail: "fail"}

// String returns "none", "done", "pass" or "fail": the kind, not the
// configured word, so that persisted rounds survive a change of config.
func (s Signal) String() string {
	if int(s) < len(signalNames) {
		return signalNames[s]
	}
	return "Signal(" + strconv.Itoa(int(s)) + ")"
}

// ErrUnknownSignal is wrapped by the error ParseSignal returns.
var ErrUnknownSignal = errors.New("unknown signal")

// ParseSignal is the inverse of Signal.String, exact.
func ParseSignal(s string) (Signal, error) {
	for i, n := range signalNames {
		if n == s {
			return Signal(i), nil
		}
	}
	return 0, fmt.Errorf("review: parse signal %q: %w", s, ErrUnknownSignal)
}

// The default signal words of seed 002.
const (
	DefaultDone = "DONE"
	DefaultPass = "PASS"
	DefaultFail = "FAIL"
)

// CommandTail is how much of a command or scripted backend's output, from
// its end, the caller hands to Scan: the signal is on the last line, and a
// bounded tail keeps a chatty command from costing memory.
const CommandTail = 4 << 10

// Signals are the words that mark each signal, as configured under
// `signals: {done, pass, fail}`. An empty field means its default, so the
// zero value is DONE / PASS / FAIL.
type Signals struct {
	Done, Pass, Fail string
}

func (s Signals) withDefaults() Signals {
	if s.Done == "" {
		s.Done = DefaultDone
	}
	if s.Pass == "" {
		s.Pass = DefaultPass
	}
	if s.Fail == "" {
		s.Fail = DefaultFail
	}
	return s
}

// maxSignalLen bounds a configured word; a signal is a marker, not a text.
const maxSignalLen = 64

// ErrInvalidSignal is wrapped by every error of Signals.Validate.
var ErrInvalidSignal = errors.New("invalid signal")

// Validate checks the configured words (defaults filled in): each is valid
// UTF-8 of at most 64 bytes with no space, control character or ':', does
// not start with a character Scan strips from the start of a line (# > * _ `)
// or a dash, and the three are distinct. These rules make the matching rule
// of Scan unambiguous for a word of its own.
func (s Signals) Validate() error {
	s = s.withDefaults()
	for _, f := range [...]struct{ key, word string }{{"done", s.Done}, {"pass", s.Pass}, {"fail", s.Fail}} {
		if err := validWord(f.word); err != nil {
			return fmt.Errorf("signals.%s %q: %w: %s", f.key, f.word, ErrInvalidSignal, err.Error())
		}
	}
	switch {
	case s.Done == s.Pass:
		return fmt.Errorf("signals.done and signals.pass are both %q: %w: they must differ", s.Done, ErrInvalidSignal)
	case s.Done == s.Fail:
		return fmt.Errorf("signals.done and signals.fail are both %q: %w: they must differ", s.Done, ErrInvalidSignal)
	case s.Pass == s.Fail:
		return fmt.Errorf("signals.pass and signals.fail are both %q: %w: they must differ", s.Pass, ErrInvalidSignal)
	}
	return nil
}

// CheckWord says what is wrong with w as one signal word (nil: nothing);
// Validate checks each word this way, and that the three differ.
func CheckWord(w string) error { return validWord(w) }

func validWord(w string) error {
	if len(w) > maxSignalLen {
		return fmt.Errorf("longer than %d bytes", maxSignalLen)
	}
	if !utf8.ValidString(w) {
		return errors.New("not valid UTF-8")
	}
	first, _ := utf8.DecodeRuneInString(w)
	if isLeadMarker(first) || isDash(first) {
		return fmt.Errorf("starts with %q", first)
	}
	for _, r := range w {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r == ':' {
			return fmt.Errorf("contains %q", r)
		}
	}
	return nil
}

// Scan reports the signal that text carries. text is a structured backend's
// final result text, or the last CommandTail bytes of a command or scripted
// backend's output. A signal counts only on the last non-empty line, so that
// a plan ("I will print DONE when finished") or a quoted earlier verdict is
// not taken for one. The rule, on that line:
//
//  1. A line is empty if it holds only whitespace and the markdown markers
//     # > * _ ` (so a closing ``` fence is skipped). Leading whitespace and
//     markers are dropped, then trailing whitespace.
//  2. The line must start with the word, exactly (case-sensitive: prose
//     "done" is not DONE), and the word must be followed by one of:
//     nothing but whitespace, closing markers * _ ` and the punctuation . !
//     ("DONE", "**DONE**", "DONE."); a ':' after optional closing markers
//     ("DONE: added the parser", "**PASS**: looks good"); or whitespace then
//     a dash - – — ("DONE - added the parser").
//
// Anything else is no signal: "NOT DONE", "DONEGAL", "DONE_FAIL", "I am
// DONE", "Verdict: PASS", "DONE. All tests pass", "- DONE". If several words
// match (one is a prefix of another), the longest wins. Scan does not
// allocate.
func (s Signals) Scan(text string) Signal {
	s = s.withDefaults()
	line := lastLine(text)
	if line == "" {
		return NoSignal
	}
	best, bestLen := NoSignal, 0
	// Fail first: with equal words (a config Validate refuses) the
	// conservative reading wins.
	for _, c := range [...]struct {
		sig  Signal
		word string
	}{{Fail, s.Fail}, {Pass, s.Pass}, {Done, s.Done}} {
		if len(c.word) > bestLen && carries(line, c.word) {
			best, bestLen = c.sig, len(c.word)
		}
	}
	return best
}

// lastLine returns the last non-empty line of text with leading whitespace
// and markers and trailing whitespace removed, or "".
func lastLine(text string) string {
	for {
		i := strings.LastIndexByte(text, '\n')
		line := strings.TrimRightFunc(strings.TrimLeftFunc(text[i+1:], isLeadRune), unicode.IsSpace)
		if line != "" {
			return line
		}
		if i < 0 {
			return ""
		}
		text = text[:i]
	}
}

// carries applies rule 2 of Scan to a line prepared by lastLine.
func carries(line, word string) bool {
	rest, ok := strings.CutPrefix(line, word)
	if !ok {
		return false
	}
	if strings.TrimRightFunc(rest, isTrailRune) == "" {
		return true
	}
	rest = strings.TrimLeft(rest, "*_`")
	if strings.HasPrefix(rest, ":") {
		return true
	}
	afterSpace := strings.TrimLeftFunc(rest, unicode.IsSpace)
	if len(afterSpace) == len(rest) {
		return false
	}
	r, _ := utf8.DecodeRuneInString(afterSpace)
	return isDash(r)
}

func isLeadMarker(r rune) bool {
	return r == '#' || r == '>' || r == '*' || r == '_' || r == '`'
}

func isLeadRune(r rune) bool { return unicode.IsSpace(r) || isLeadMarker(r) }

func isTrailRune(r rune) bool {
	return unicode.IsSpace(r) || r == '*' || r == '_' || r == '`' || r == '.' || r == '!'
}

func isDash(r rune) bool { return r == '-' || r == '–' || r == '—' }
