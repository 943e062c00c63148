package config

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// validate checks v (decoded YAML) against the subset of JSON Schema that
// JSONSchema emits, and returns every violation as "path: problem". It is
// deliberately small: it knows exactly the keywords the schema uses and
// fails on any other, so the schema cannot grow a keyword no test checks.
func validate(t *testing.T, s map[string]any, v any, path string) []string {
	t.Helper()
	known := []string{"$schema", "title", "description", "default", "type", "pattern", "enum", "minimum", "maximum",
		"items", "minItems", "properties", "required", "additionalProperties", "propertyNames"}
	for k := range s {
		if !slices.Contains(known, k) {
			t.Fatalf("%s: the schema uses %q, which this validator does not know", path, k)
		}
	}
	if types, ok := s["type"]; ok && !typeMatches(types, v) {
		return []string{fmt.Sprintf("%s: %T is not %v", path, v, types)}
	}
	var out []string
	switch v := v.(type) {
	case string:
		if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(v) {
			out = append(out, fmt.Sprintf("%s: %q does not match %s", path, v, p))
		}
		if e, ok := s["enum"].([]any); ok && !slices.Contains(e, any(v)) {
			out = append(out, fmt.Sprintf("%s: %q is not one of %v", path, v, e))
		}
	case int:
		if m, ok := s["minimum"].(float64); ok && float64(v) < m {
			out = append(out, fmt.Sprintf("%s: %d < %v", path, v, m))
		}
		if m, ok := s["maximum"].(float64); ok && float64(v) > m {
			out = append(out, fmt.Sprintf("%s: %d > %v", path, v, m))
		}
	case []any:
		if m, ok := s["minItems"].(float64); ok && float64(len(v)) < m {
			out = append(out, fmt.Sprintf("%s: %d items, want at least %v", path, len(v), m))
		}
		if items, ok := s["items"].(map[string]any); ok {
			for i, item := range v {
				out = append(out, validate(t, items, item, fmt.Sprintf("%s[%d]", path, i))...)
			}
		}
	case map[string]any:
		out = append(out, validateObject(t, s, v, path)...)
	}
	return out
}

func validateObject(t *testing.T, s map[string]any, v map[string]any, path string) []string {
	var out []string
	props, _ := s["properties"].(map[string]any)
	for _, r := range asList(s["required"]) {
		if _, ok := v[r.(string)]; !ok {
			out = append(out, fmt.Sprintf("%s: %s is required", path, r))
		}
	}
	for k, val := range v {
		if ps, ok := props[k]; ok {
			out = append(out, validate(t, ps.(map[string]any), val, join(path, k))...)
			continue
		}
		if names, ok := s["propertyNames"].(map[string]any); ok {
			if p, ok := names["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(k) {
				out = append(out, fmt.Sprintf("%s: key %q does not match %s", path, k, p))
			}
			if not, ok := names["not"].(map[string]any); ok && regexp.MustCompile(not["pattern"].(string)).MatchString(k) {
				out = append(out, fmt.Sprintf("%s: key %q matches %s", path, k, not["pattern"]))
			}
		}
		switch ap := s["additionalProperties"].(type) {
		case bool:
			if !ap {
				out = append(out, fmt.Sprintf("%s: unknown key %q", path, k))
			}
		case map[string]any:
			out = append(out, validate(t, ap, val, join(path, k))...)
		}
	}
	return out
}

func asList(v any) []any { l, _ := v.([]any); return l }

func typeMatches(types any, v any) bool {
	want := asList(types)
	if s, ok := types.(string); ok {
		want = []any{s}
	}
	var got string
	switch v.(type) {
	case nil:
		got = "null"
	case string:
		got = "string"
	case int:
		return slices.Contains(want, any("integer")) || slices.Contains(want, any("number"))
	case float64:
		got = "number"
	case bool:
		got = "boolean"
	case []any:
		got = "array"
	case map[string]any:
		got = "object"
	}
	return slices.Contains(want, any(got))
}

func loadSchema(t *testing.T) map[string]any {
	t.Helper()
	data, err := JSONSchema()
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("the schema is not JSON: %v", err)
	}
	return s
}

func yamlFile(t *testing.T, path string) any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// TestSchemaValidatesTheExamples: every example config, and every valid
// test config, is valid under the schema; Parse accepts them too (the
// examples are loaded elsewhere).
func TestSchemaValidatesTheExamples(t *testing.T) {
	s := loadSchema(t)
	if s["$schema"] != SchemaDialect {
		t.Errorf("$schema = %v", s["$schema"])
	}
	files, _ := filepath.Glob("../../configs/*.yaml")
	if len(files) == 0 {
		t.Fatal("no example configs found")
	}
	files = append(files, "testdata/full.yaml", "testdata/minimal.yaml", "testdata/roles.yaml", "testdata/anchors.yaml")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			v := yamlFile(t, f)
			if f == "testdata/anchors.yaml" {
				t.Skip("merge keys (<<) are resolved by Parse; a YAML decoder hands them to the validator as keys")
			}
			for _, p := range validate(t, s, v, "") {
				t.Error(p)
			}
		})
	}
}

// TestSchemaRefusesWhatParseRefuses: the validator, and so the schema, does
// reject the shape errors of testdata/invalid that JSON Schema can express.
func TestSchemaRefusesWhatParseRefuses(t *testing.T) {
	s := loadSchema(t)
	for file, want := range map[string]string{
		"unknown_top":          `unknown key "repos"`,
		"unknown_agent_key":    `agents[1]: unknown key "bakend"`,
		"unknown_logs_key":     `logs: unknown key "keep"`,
		"unknown_backend_key":  `backends.claude: unknown key "modle"`,
		"unknown_step_key":     `backends.fake.steps[1]: unknown key "printt"`,
		"bad_agent_name":       `agents[1].name: "Bob" does not match`,
		"bad_duration":         `defaults.session_timeout: "10 minutes" does not match`,
		"negative_duration":    `logs.max_age: "-1h" does not match`,
		"zero_consecutive":     `agents[0].max_consecutive_errors: 0 < 1`,
		"exit_out_of_range":    `backends.fake.steps[0].exit: 256 > 255`,
		"bool_not_bool":        `backends.fake.steps[0].ignore_signals: string is not [boolean null]`,
		"unknown_backend_type": `backends.box.type: "docker" is not one of`,
		"bad_cancel_signal":    `backends.tests.cancel_signal: "SIGFOO" does not match`,
		"swarm_env":            `defaults.env: key "SWARM_AGENT_ID" matches ^SWARM_`,
		"bad_env_name":         `agents[0].env: key "BAD-NAME" does not match`,
		"wrong_kind_agents":    `agents: map[string]interface {} is not`,
		"empty_agents":         `agents: 0 items, want at least 1`,
		"missing_role":         `agents[0]: role is required`,
		"bad_backend_name":     `backends: key "my backend" does not match`,
		"scripted_empty_steps": `backends.fake.steps: 0 items, want at least 1`,
		"empty_hook":           `hooks.session_end[1]: "" does not match`,
	} {
		t.Run(file, func(t *testing.T) {
			problems := validate(t, s, yamlFile(t, filepath.Join("testdata", "invalid", file+".yaml")), "")
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(strings.TrimPrefix(p, ": "), want) }) {
				t.Errorf("problems %q lack %q", problems, want)
			}
		})
	}
}

// TestSchemaShape: the structure editors rely on. Every object with fixed
// keys refuses others (additionalProperties false); every key has a
// description; the defaults are those of defaultConfig.
func TestSchemaShape(t *testing.T) {
	s := loadSchema(t)
	var walk func(n map[string]any, path string)
	keys := 0
	walk = func(n map[string]any, path string) {
		if props, ok := n["properties"].(map[string]any); ok {
			if n["additionalProperties"] != false {
				t.Errorf("%s: additionalProperties is %v, want false", path, n["additionalProperties"])
			}
			for k, p := range props {
				keys++
				p := p.(map[string]any)
				if d, _ := p["description"].(string); d == "" {
					t.Errorf("%s: no description", join(path, k))
				}
				walk(p, join(path, k))
			}
		}
		if items, ok := n["items"].(map[string]any); ok {
			walk(items, path+"[]")
		}
		if ap, ok := n["additionalProperties"].(map[string]any); ok {
			walk(ap, join(path, "<name>"))
		}
	}
	walk(s, "")
	if keys < 40 {
		t.Errorf("only %d keys in the schema", keys)
	}
	props := s["properties"].(map[string]any)
	def := func(path ...string) any {
		n := props
		for _, p := range path[:len(path)-1] {
			n = n[p].(map[string]any)["properties"].(map[string]any)
		}
		return n[path[len(path)-1]].(map[string]any)["default"]
	}
	for _, c := range []struct {
		got, want any
	}{
		{def("repo"), DefaultRepo}, {def("state_dir"), DefaultStateDir}, {def("base_ref"), DefaultBaseRef},
		{def("listen"), DefaultListen}, {def("stall_after"), "5m"},
		{def("defaults", "backend"), DefaultBackend}, {def("defaults", "session_timeout"), "60m"},
		{def("defaults", "grace_period"), "10s"}, {def("defaults", "max_consecutive_errors"), float64(DefaultMaxConsecutiveErrors)},
		{def("defaults", "max_total_errors"), float64(DefaultMaxTotalErrors)},
		{def("logs", "keep_archives"), float64(DefaultKeepArchives)}, {def("logs", "max_age"), "720h"},
		{def("hooks", "timeout"), "30s"}, {def("mailbox", "max_body"), float64(DefaultMaxBody)},
	} {
		if c.got != c.want {
			t.Errorf("default %v, want %v", c.got, c.want)
		}
	}
	// An agent's settings inherit: the schema gives them no default of their own.
	agent := props["agents"].(map[string]any)["items"].(map[string]any)["properties"].(map[string]any)
	if d, ok := agent["session_timeout"].(map[string]any)["default"]; ok {
		t.Errorf("agents[].session_timeout has a default %v; it inherits defaults.session_timeout", d)
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[string]string{"60m": "60m", "720h": "720h", "10s": "10s", "30s": "30s", "5m": "5m", "1h30m": "90m", "1.5s": "1.5s"} {
		dur, err := time.ParseDuration(d)
		if err != nil {
			t.Fatal(err)
		}
		if got := FormatDuration(dur); got != want {
			t.Errorf("FormatDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

// TestDurationPattern: the schema's duration pattern accepts what
// time.ParseDuration does (without a sign) and nothing else.
func TestDurationPattern(t *testing.T) {
	re := regexp.MustCompile(durationPattern)
	for _, s := range []string{"0", "1s", "1.5h", "1h30m", "250ms", "10us", "10µs", "3ns", ".5s", "1h2m3s4ms"} {
		if _, err := time.ParseDuration(s); err != nil || !re.MatchString(s) {
			t.Errorf("%q: ParseDuration %v, pattern %v", s, err, re.MatchString(s))
		}
	}
	for _, s := range []string{"", "10", "10 minutes", "-1h", "1d", "h", "1h 30m"} {
		if re.MatchString(s) {
			t.Errorf("%q matches the duration pattern", s)
		}
	}
}
