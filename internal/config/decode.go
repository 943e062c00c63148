package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// maxAliases bounds alias expansion: a config needs a handful, and a bound
// keeps nested aliases (a "billion laughs" file) from costing exponential work.
const maxAliases = 1000

// maxMergeDepth bounds chains of `<<:` merge keys.
const maxMergeDepth = 8

// decoder walks the yaml.Node tree of one file and collects every problem.
type decoder struct {
	file        string // as the caller named it, for messages
	dir         string // absolute directory of the config file
	repo        string // absolute repository directory, once known
	opts        Options
	errs        Errors
	warnings    []*Error
	aliasBudget int
	broken      map[string]bool // backends whose definition was reported invalid
}

func (d *decoder) errorf(line int, key, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Key: key, Msg: fmt.Sprintf(format, args...)})
}

func (d *decoder) warnf(line int, key, format string, args ...any) {
	d.warnings = append(d.warnings, &Error{File: d.file, Line: line, Key: key, Msg: fmt.Sprintf(format, args...), Warning: true})
}

// sortByLine orders problems by line; problems without a line go last.
func sortByLine(es []*Error) Errors {
	key := func(e *Error) int {
		if e.Line == 0 {
			return maxInt
		}
		return e.Line
	}
	slices.SortStableFunc(es, func(a, b *Error) int { return cmp.Compare(key(a), key(b)) })
	return es
}

var yamlLineRE = regexp.MustCompile(`^line (\d+): (.*)$`)

// parserProblems are the messages of yaml.v3's parser (as opposed to its
// scanner). For these it reports the 0-based line of the enclosing
// collection (and no line at all for the first one), so they need +1.
var parserProblems = []string{
	"did not find expected <stream-start>",
	"did not find expected <document start>",
	"found undefined tag handle",
	"did not find expected node content",
	"did not find expected '-' indicator",
	"did not find expected key",
	"did not find expected ',' or ']'",
	"did not find expected ',' or '}'",
	"found duplicate %YAML directive",
	"found incompatible YAML document",
	"found duplicate %TAG directive",
}

// syntaxError turns a yaml error ("yaml: line 3: did not find expected
// key") into an Error at that line.
func (d *decoder) syntaxError(err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	if slices.Contains(parserProblems, msg) {
		line++
	}
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Msg: "invalid YAML: " + msg, Err: err})
}

// parse returns the top-level node, or nil for an empty document. ok is
// false when the file is not YAML at all.
func (d *decoder) parse(data []byte) (root *yaml.Node, ok bool) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, true
		}
		d.syntaxError(err)
		return nil, false
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		d.syntaxError(err)
		return nil, false
	default:
		// A second document would be silently ignored by a plain decode.
		d.errorf(extra.Line, "", "a config file holds one YAML document; a second one starts here (remove the --- line and what follows)")
		return nil, false
	}
	if len(doc.Content) == 0 {
		return nil, true
	}
	root, ok = d.resolve(doc.Content[0])
	if !ok || isNull(root) {
		return nil, ok
	}
	if root.Kind != yaml.MappingNode {
		d.errorf(root.Line, "", "the top level must be a mapping (repo:, defaults:, backends:, agents: ...), got %s", describe(root))
		return nil, false
	}
	return root, true
}

// resolve follows aliases within the alias budget.
func (d *decoder) resolve(n *yaml.Node) (*yaml.Node, bool) {
	for n != nil && n.Kind == yaml.AliasNode {
		if d.aliasBudget <= 0 {
			if d.aliasBudget == 0 {
				d.errorf(n.Line, "", "more than %d alias expansions (simplify the anchors)", maxAliases)
				d.aliasBudget-- // report once
			}
			return nil, false
		}
		d.aliasBudget--
		n = n.Alias
	}
	return n, n != nil
}

func isNull(n *yaml.Node) bool {
	return n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// describe names a node's kind for "want X, got Y" messages.
func describe(n *yaml.Node) string {
	switch {
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case isNull(n):
		return "nothing"
	case n.Kind == yaml.ScalarNode:
		return strconv.Quote(n.Value)
	}
	return "an unexpected node"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

type entry struct{ k, v *yaml.Node }

// entries returns a mapping's key/value pairs with `<<:` merges expanded
// (explicit keys win, then earlier merges). Keys are scalars; duplicate
// explicit keys are reported.
func (d *decoder) entries(n *yaml.Node, path string, depth int) []entry {
	if n.Kind != yaml.MappingNode {
		d.errorf(n.Line, path, "want a mapping, got %s", describe(n))
		return nil
	}
	var out, merged []entry
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, ok := d.resolve(n.Content[i])
		if !ok {
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.errorf(k.Line, path, "keys must be plain strings, got %s", describe(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			merged = append(merged, d.merge(n.Content[i+1], path, depth)...)
			continue
		}
		if prev, dup := seen[k.Value]; dup {
			d.errorf(k.Line, join(path, k.Value), "duplicate key (first defined at line %d; keep one of them)", prev)
			continue
		}
		seen[k.Value] = k.Line
		out = append(out, entry{k, n.Content[i+1]})
	}
	for _, e := range merged {
		if _, dup := seen[e.k.Value]; !dup {
			seen[e.k.Value] = e.k.Line
			out = append(out, e)
		}
	}
	return out
}

func (d *decoder) merge(v *yaml.Node, path string, depth int) []entry {
	v, ok := d.resolve(v)
	if !ok {
		return nil
	}
	if depth >= maxMergeDepth {
		d.errorf(v.Line, path, "merge keys (<<) nested more than %d deep", maxMergeDepth)
		return nil
	}
	switch v.Kind {
	case yaml.MappingNode:
		return d.entries(v, path, depth+1)
	case yaml.SequenceNode:
		var out []entry
		for _, item := range v.Content {
			item, ok := d.resolve(item)
			if !ok {
				continue
			}
			if item.Kind != yaml.MappingNode {
				d.errorf(item.Line, path, "a merge key (<<) takes a mapping or a list of mappings, got %s", describe(item))
				continue
			}
			out = append(out, d.entries(item, path, depth+1)...)
		}
		return out
	}
	d.errorf(v.Line, path, "a merge key (<<) takes a mapping or a list of mappings, got %s", describe(v))
	return nil
}

// value is how one key's value is read and what JSON Schema says of it:
// set gets the resolved, non-null value and reports whether it was valid
// (problems are recorded by set itself); schema describes the same rule for
// editors. The constructors below build both, so they cannot drift apart.
type value struct {
	set    func(path string, v *yaml.Node) bool
	schema *schemaNode
}

// field is one known key of a mapping, with the one-line description that
// the JSON Schema gives editors.
type field struct {
	key string
	doc string
	value
}

// keySet records the keys a mapping gave: key -> line of its value, or
// invalid when the value was present but wrong (and already reported), so
// that later checks neither use it nor report it missing.
type keySet map[string]int

const invalid = -1

// line returns the line of a key that was given a valid value.
func (s keySet) line(key string) (int, bool) {
	l, ok := s[key]
	return l, ok && l != invalid
}

func (s keySet) present(key string) bool { _, ok := s[key]; return ok }

// at is the line of a valid key, or 0 (no position) for a missing one.
func (s keySet) at(key string) int {
	l, _ := s.line(key)
	return max(l, 0)
}

// section is a field whose value is a nested mapping.
func (d *decoder) section(fields []field, set *keySet) value {
	return value{func(path string, v *yaml.Node) bool {
		ks := d.mapping(v, path, fields)
		if set != nil {
			*set = ks
		}
		return true
	}, objectSchema(fields)}
}

// mapping walks n against fields and reports unknown keys. A null value
// (`key:` with nothing after it) counts as absent, so the default applies.
func (d *decoder) mapping(n *yaml.Node, path string, fields []field) keySet {
	set := keySet{}
	for _, e := range d.entries(n, path, 0) {
		i := slices.IndexFunc(fields, func(f field) bool { return f.key == e.k.Value })
		if i < 0 {
			known := make([]string, len(fields))
			for j, f := range fields {
				known[j] = f.key
			}
			d.errorf(e.k.Line, join(path, e.k.Value), "unknown key (known keys: %s)", strings.Join(known, ", "))
			continue
		}
		v, ok := d.resolve(e.v)
		if !ok || isNull(v) {
			continue
		}
		set[e.k.Value] = invalid
		if fields[i].set(join(path, e.k.Value), v) {
			set[e.k.Value] = v.Line
		}
	}
	return set
}

// str is a scalar as a string. Numbers and booleans are taken as written.
func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode || isNull(n) {
		d.errorf(n.Line, path, "want a string, got %s", describe(n))
		return "", false
	}
	return n.Value, true
}

// strTo reads a string; its current value is the default the schema shows.
func (d *decoder) strTo(dst *string, nonEmpty bool) value {
	sch := &schemaNode{Type: []string{"string"}}
	if nonEmpty {
		sch.Pattern = nonBlank
	}
	if *dst != "" {
		sch.Default = *dst
	}
	return value{func(path string, v *yaml.Node) bool {
		s, ok := d.str(v, path)
		if !ok {
			return false
		}
		if nonEmpty && strings.TrimSpace(s) == "" {
			d.errorf(v.Line, path, "must not be empty (give a value, or remove the key for the default)")
			return false
		}
		*dst = s
		return true
	}, sch}
}

func (d *decoder) intTo(dst *int, minimum, maximum int) value {
	sch := &schemaNode{Type: []string{"integer"}, Minimum: intPtr(minimum)}
	if maximum != maxInt {
		sch.Maximum = intPtr(maximum)
	}
	if *dst != 0 {
		sch.Default = *dst
	}
	return value{func(path string, v *yaml.Node) bool {
		var n int
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" || v.Decode(&n) != nil {
			d.errorf(v.Line, path, "want an integer, got %s", describe(v))
			return false
		}
		if n < minimum || n > maximum {
			if maximum == maxInt {
				d.errorf(v.Line, path, "must be at least %d, got %d", minimum, n)
			} else {
				d.errorf(v.Line, path, "must be between %d and %d, got %d", minimum, maximum, n)
			}
			return false
		}
		*dst = n
		return true
	}, sch}
}

const maxInt = int(^uint(0) >> 1)

// durTo parses a Go duration; zero is allowed only where it means something.
func (d *decoder) durTo(dst *time.Duration, allowZero bool) value {
	sch := &schemaNode{Type: []string{"string"}, Pattern: durationPattern}
	if *dst != 0 {
		sch.Default = FormatDuration(*dst)
	}
	return value{func(path string, v *yaml.Node) bool {
		if v.Kind != yaml.ScalarNode {
			d.errorf(v.Line, path, "want a duration such as 30s or 10m, got %s", describe(v))
			return false
		}
		dur, err := time.ParseDuration(v.Value)
		if err != nil {
			d.errorf(v.Line, path, "%q is not a duration (use Go syntax such as 30s, 10m, 1h30m)", v.Value)
			return false
		}
		switch {
		case dur < 0 || (dur == 0 && !allowZero):
			if allowZero {
				d.errorf(v.Line, path, "must not be negative, got %s", v.Value)
			} else {
				d.errorf(v.Line, path, "must be positive, got %s", v.Value)
			}
			return false
		}
		*dst = dur
		return true
	}, sch}
}

func (d *decoder) boolTo(dst *bool) value {
	return value{func(path string, v *yaml.Node) bool {
		b, ok := d.boolOf(path, v)
		if ok {
			*dst = b
		}
		return ok
	}, &schemaNode{Type: []string{"boolean"}, Default: *dst}}
}

// boolOf reads a YAML boolean, reporting anything else.
func (d *decoder) boolOf(path string, v *yaml.Node) (bool, bool) {
	var b bool
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" || v.Decode(&b) != nil {
		d.errorf(v.Line, path, "want true or false, got %s", describe(v))
		return false, false
	}
	return b, true
}

// boolPtrTo decodes a boolean whose absence means something of its own
// (nil: the default, decided elsewhere).
func (d *decoder) boolPtrTo(dst **bool) value {
	return value{func(path string, v *yaml.Node) bool {
		b, ok := d.boolOf(path, v)
		if ok {
			*dst = &b
		}
		return ok
	}, &schemaNode{Type: []string{"boolean"}}}
}

// strList is a list of strings; nonEmpty refuses empty items (hook commands).
func (d *decoder) strList(n *yaml.Node, path string, nonEmpty bool) ([]string, bool) {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n.Line, path, "want a list, got %s", describe(n))
		return nil, false
	}
	out := make([]string, 0, len(n.Content))
	ok := true
	for i, item := range n.Content {
		item, resolved := d.resolve(item)
		if !resolved {
			ok = false
			continue
		}
		s, good := d.str(item, index(path, i))
		if good && nonEmpty && strings.TrimSpace(s) == "" {
			d.errorf(item.Line, index(path, i), "must not be empty (remove the empty item)")
			good = false
		}
		ok = ok && good
		out = append(out, s)
	}
	return out, ok
}

func (d *decoder) strListTo(dst *[]string, nonEmpty bool) value {
	item := &schemaNode{Type: []string{"string"}}
	if nonEmpty {
		item.Pattern = nonBlank
	}
	return value{func(path string, v *yaml.Node) bool {
		l, ok := d.strList(v, path, nonEmpty)
		if ok {
			*dst = l
		}
		return ok
	}, &schemaNode{Type: []string{"array"}, Items: item}}
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// envTo reads an environment map. Values may be any scalar (`DEBUG: 1`);
// SWARM_* names are refused because swarmd sets them per session.
func (d *decoder) envTo(dst *map[string]string) value {
	sch := &schemaNode{
		Type:     []string{"object"},
		Values:   &schemaNode{Type: []string{"string", "number", "boolean", "null"}},
		KeyRE:    envNameRE.String(),
		KeyNotRE: "^SWARM_",
	}
	return value{func(path string, v *yaml.Node) bool {
		env, before := map[string]string{}, len(d.errs)
		for _, e := range d.entries(v, path, 0) {
			name, p := e.k.Value, join(path, e.k.Value)
			if !envNameRE.MatchString(name) {
				d.errorf(e.k.Line, p, "%q is not a valid environment variable name (use letters, digits and _, not starting with a digit)", name)
				continue
			}
			if strings.HasPrefix(name, "SWARM_") {
				d.errorf(e.k.Line, p, "SWARM_* variables are set by swarmd and cannot be configured (use another name)")
				continue
			}
			val, ok := d.resolve(e.v)
			if !ok {
				continue
			}
			switch {
			case isNull(val):
				env[name] = ""
			case val.Kind == yaml.ScalarNode:
				env[name] = val.Value
			default:
				d.errorf(val.Line, p, "want a string, got %s", describe(val))
			}
		}
		*dst = env
		return len(d.errs) == before
	}, sch}
}
