package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// SchemaDialect is the JSON Schema draft that JSONSchema emits.
const SchemaDialect = "https://json-schema.org/draft/2020-12/schema"

// schemaNode is the JSON Schema of one value: the small subset of draft
// 2020-12 that swarmd.yaml needs. The decoder's field lists build these next
// to their setters, so the schema and the validation walk are one
// description; `swarmd config validate` remains the judge of what the schema
// cannot say (a backend type's keys, files that must exist).
type schemaNode struct {
	Type        []string
	Description string
	Default     any
	Pattern     string // ECMA-262 and RE2 alike: only the syntax both share
	Enum        []string
	Minimum     *int
	Maximum     *int

	Items    *schemaNode // arrays
	MinItems int

	Props    []prop      // objects with fixed keys; any other key is refused
	Required []string    // of Props
	Values   *schemaNode // objects with free keys (env, backends): each value
	KeyRE    string      // free keys must match
	KeyNotRE string      // ...and must not match
}

// prop is one fixed key of an object.
type prop struct {
	key  string
	node *schemaNode
}

func intPtr(n int) *int { return &n }

// orderedObject writes a JSON object with its keys in the given order, so
// that the schema reads in the order of the config file.
type orderedObject []struct {
	k string
	v any
}

func (o *orderedObject) add(k string, v any) {
	*o = append(*o, struct {
		k string
		v any
	}{k, v})
}

func (o orderedObject) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, kv := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(kv.k)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(kv.v)
		if err != nil {
			return nil, fmt.Errorf("schema key %s: %w", kv.k, err)
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func (n *schemaNode) MarshalJSON() ([]byte, error) {
	var o orderedObject
	switch len(n.Type) {
	case 0:
	case 1:
		o.add("type", n.Type[0])
	default:
		o.add("type", n.Type)
	}
	if n.Description != "" {
		o.add("description", n.Description)
	}
	if n.Default != nil {
		o.add("default", n.Default)
	}
	if n.Pattern != "" {
		o.add("pattern", n.Pattern)
	}
	if len(n.Enum) > 0 {
		o.add("enum", n.Enum)
	}
	if n.Minimum != nil {
		o.add("minimum", *n.Minimum)
	}
	if n.Maximum != nil {
		o.add("maximum", *n.Maximum)
	}
	if n.Items != nil {
		o.add("items", n.Items)
	}
	if n.MinItems > 0 {
		o.add("minItems", n.MinItems)
	}
	if n.Props != nil {
		var props orderedObject
		for _, p := range n.Props {
			props.add(p.key, p.node)
		}
		o.add("properties", props)
		if len(n.Required) > 0 {
			o.add("required", n.Required)
		}
		o.add("additionalProperties", false)
	}
	if n.Values != nil {
		if n.KeyRE != "" || n.KeyNotRE != "" {
			var names orderedObject
			if n.KeyRE != "" {
				names.add("pattern", n.KeyRE)
			}
			if n.KeyNotRE != "" {
				names.add("not", map[string]string{"pattern": n.KeyNotRE})
			}
			o.add("propertyNames", names)
		}
		o.add("additionalProperties", n.Values)
	}
	return json.Marshal(o)
}

// objectSchema is the schema of a mapping walked against fields. Every
// key also takes null, because mapping() counts `key:` with no value as
// absent (the default applies).
func objectSchema(fields []field) *schemaNode {
	n := &schemaNode{Type: []string{"object"}, Props: make([]prop, 0, len(fields))}
	for _, f := range fields {
		s := *f.schema
		s.Description = f.doc
		if !strings.Contains(strings.Join(s.Type, ","), "null") {
			s.Type = append(append([]string(nil), s.Type...), "null")
		}
		n.Props = append(n.Props, prop{f.key, &s})
	}
	return n
}

// durationPattern is a non-negative Go duration (time.ParseDuration).
const durationPattern = `^(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))+)$`

// nonBlank is the pattern of a string that is not only white space.
const nonBlank = `\S`

// anyCase turns a word into a pattern that matches it in any letter case:
// cancel_signal accepts "SIGINT", "sigint" and "INT".
func anyCase(word string) string {
	var b strings.Builder
	for _, r := range word {
		lo, up := strings.ToLower(string(r)), strings.ToUpper(string(r))
		if lo == up {
			b.WriteRune(r)
			continue
		}
		b.WriteString("[" + up + lo + "]")
	}
	return b.String()
}

func signalPattern() string {
	names := make([]string, len(cancelSignals))
	for i, s := range cancelSignals {
		names[i] = anyCase(strings.TrimPrefix(s.name, "SIG"))
	}
	return `^\s*(` + anyCase("SIG") + `)?(` + strings.Join(names, "|") + `)\s*$`
}

// FormatDuration writes a duration the way a person would: 60m, 720h, 10s
// rather than 1h0m0s. Defaults are shown this way in the schema, the
// starter config and the documentation.
func FormatDuration(d time.Duration) string {
	switch {
	case d >= 24*time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}

// JSONSchema is the JSON Schema (draft 2020-12) of swarmd.yaml, built from
// the field lists that Parse walks. Editors use it to complete and check the
// file; it is stricter than Parse in one way only: it wants strings where
// Parse also takes a number or boolean as written.
func JSONSchema() ([]byte, error) {
	root := schemaTree()
	var o orderedObject
	o.add("$schema", SchemaDialect)
	o.add("title", "swarmd.yaml")
	o.add("description", "The config of swarmd, which keeps a swarm of coding agents working on one git repository. "+
		"Check a file with: swarmd config validate -c FILE. Every key: docs/configuration.md.")
	body, err := root.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("config: json schema: %w", err)
	}
	var rest json.RawMessage = body
	// Splice the root's own keywords after the header.
	var out bytes.Buffer
	head, err := o.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("config: json schema: %w", err)
	}
	out.Write(head[:len(head)-1])
	out.WriteByte(',')
	out.Write(rest[1:])
	var indented bytes.Buffer
	if err := json.Indent(&indented, out.Bytes(), "", "  "); err != nil {
		return nil, fmt.Errorf("config: json schema: %w", err)
	}
	indented.WriteByte('\n')
	return indented.Bytes(), nil
}

// schemaTree builds the field lists against a throwaway decoder and
// defaultConfig, so that each field's default is the value defaultConfig
// gives it.
func schemaTree() *schemaNode {
	d := &decoder{broken: map[string]bool{}}
	var t topValues
	root := objectSchema(d.topFields(defaultConfig(), &t))
	root.Type = []string{"object"}
	root.Required = []string{"agents"}
	return root
}
