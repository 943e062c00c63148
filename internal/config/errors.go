package config

import (
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Error is one problem in a config file. Error() is a single line that names
// the file, the line (when known) and the key, so that a person can find it,
// then what is wrong and, in parentheses, what to do:
//
//	swarmd.yaml:14: agents[1].name: "Bob" is not a valid agent name (want ^[a-z][a-z0-9-]{0,31}$)
//
// A warning (Config.Warnings) has the same form with "warning: " before the
// message.
type Error struct {
	File    string // the config path as the caller named it
	Line    int    // 1-based; 0 when the problem has no position (a missing key)
	Key     string // dotted key path such as "agents[1].name"; "" for the whole file
	Msg     string
	Err     error // underlying cause, if any (for example fs.ErrNotExist)
	Warning bool  // a warning: the config loads regardless
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	if e.Warning {
		b.WriteString("warning: ")
	}
	b.WriteString(e.Msg)
	// Messages quote user values with %q, but a file name or a library message
	// may still carry a newline; the contract is one line per error.
	return strings.ReplaceAll(b.String(), "\n", " ")
}

func (e *Error) Unwrap() error { return e.Err }

// Errors is every problem found in one config file, ordered by line. Parse
// and Load return it (never empty) so that `swarmd config validate` and
// `swarmd run` print them all, one line each (Lines); errors.As(err,
// new(*Error)) yields the first.
type Errors []*Error

// Error is the first problem and a count of the rest, on one line.
func (es Errors) Error() string {
	switch len(es) {
	case 0:
		return "config: no errors"
	case 1:
		return es[0].Error()
	}
	return fmt.Sprintf("%s (and %d more problems)", es[0].Error(), len(es)-1)
}

// Unwrap lets errors.As and errors.Is see each problem.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// Lines is every problem's Error(), one line each.
func (es Errors) Lines() []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Error()
	}
	return out
}

// KeyLine is the line of a dotted key such as "merge.into" in the config
// file at path, or 0 when the file does not set it (a default applies) or
// cannot be read: checks made after Load (the repository's refs) point at
// the line the way Load's own errors do.
func KeyLine(path, key string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return 0
	}
	n := doc.Content[0]
	line := 0
	for _, k := range strings.Split(key, ".") {
		if n.Kind == yaml.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		if n.Kind != yaml.MappingNode {
			return 0
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				line, next = n.Content[i].Line, n.Content[i+1]
			}
		}
		if next == nil {
			return 0
		}
		n = next
	}
	return line
}
