package main

import (
	"strings"
	"testing"
)

// TestFlagAndArgErrorsNameTheCommand: cobra's and pflag's refusals of a
// command line are one line that names the command and, for a flag's
// value, says what the value should be, not how the parser failed; exit 2.
func TestFlagAndArgErrorsNameTheCommand(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"task", "add"}, "swarmd: task add: accepts 1 arg(s), received 0"},
		{[]string{"mail", "send", "a", "b"}, "swarmd: mail send: accepts at most 1 arg(s), received 2"},
		{[]string{"task", "add", "x", "--priority", "abc"}, `swarmd: task add: --priority: "abc" is not a number`},
		{[]string{"task", "add", "x", "--priority", "99999999999999999999"}, `swarmd: task add: --priority: "99999999999999999999" is out of range`},
		{[]string{"logs", "alice", "--session", "-1"}, `swarmd: logs: --session: "-1" is not a whole number of 0 or more`},
		{[]string{"task", "list", "--store-wait", "abc"}, `swarmd: task list: --store-wait: "abc" is not a duration (like 30s, 5m or 1h30m)`},
		{[]string{"task", "list", "--bogus"}, "swarmd: task list: unknown flag: --bogus"},
		{[]string{"budget", "set", "alice", "-5"}, "swarmd: budget set: -5 is read as a flag: a negative number is no value here"},
		{[]string{"task", "done", "7"}, `swarmd: task done: takes no argument (got "7")`},
		{[]string{"task", "frob"}, `swarmd: task: unknown command "frob" for "swarmd task"`},
		{[]string{"task", "list", "-x"}, "swarmd: task list: unknown shorthand flag: 'x' in -x"},
		{[]string{"task", "list", "--store-wait", "0"}, `swarmd: task list: invalid argument "0" for "--store-wait" flag: want a positive duration, like 30s or 2m`},
		{[]string{"status", "-c", ""}, `config: the path is empty (-c ""): name a file, or leave -c out for ./swarmd.yaml`},
	} {
		_, stderr, code := runCLIIn(t, dir, nil, c.args...)
		if code != 2 || strings.TrimSpace(stderr) != c.want {
			t.Errorf("swarmd %s: exit %d %q, want exit 2 %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
}
