package agent

import (
	"regexp"
	"testing"
)

func TestValidNameMatchesPattern(t *testing.T) {
	re := regexp.MustCompile(NamePattern)
	for _, s := range []string{"", "a", "alice", "a-1", "bob2", "A", "1a", "-a", "a_b", "a.b", "a/b", "é",
		"abcdefghijklmnopqrstuvwxyz012345", "abcdefghijklmnopqrstuvwxyz0123456", "a b", "a\n"} {
		if got, want := ValidName(s), re.MatchString(s); got != want {
			t.Errorf("ValidName(%q) = %v, pattern says %v", s, got, want)
		}
	}
}

func FuzzValidName(f *testing.F) {
	re := regexp.MustCompile(NamePattern)
	f.Add("alice")
	f.Add("A-1")
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := ValidName(s), re.MatchString(s); got != want {
			t.Fatalf("ValidName(%q) = %v, pattern says %v", s, got, want)
		}
	})
}
