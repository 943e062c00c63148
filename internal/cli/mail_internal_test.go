package cli

import "testing"

func TestPrintableStripsEscapes(t *testing.T) {
	for _, c := range []struct {
		in        string
		multiline bool
		want      string
	}{
		{"\x1b[2J\x1b]0;pwned\x07hello", false, "[2J]0;pwnedhello"},
		{"a\nb\tc\r", false, "a b c"},
		{"a\nb\tc\r\u009b31m", true, "a\nb\tc31m"},
		{"plain ünïcode", false, "plain ünïcode"},
	} {
		if got := printable(c.in, c.multiline); got != c.want {
			t.Errorf("printable(%q, %v) = %q, want %q", c.in, c.multiline, got, c.want)
		}
	}
}
