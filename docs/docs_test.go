// Package docs holds swarmd's user documentation; its tests keep the
// documentation in step with the code and the repository self-contained.
package docs

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/config"
)

// schemaKey is one key of swarmd.yaml as configuration.md names it:
// "defaults.session_timeout", "backends.<name>.steps[].exit".
type schemaKey struct {
	path string
	def  any // the schema's default; nil when it has none
}

// schemaKeys walks the JSON Schema that `swarmd config schema` prints.
func schemaKeys(t *testing.T) []schemaKey {
	t.Helper()
	data, err := config.JSONSchema()
	if err != nil {
		t.Fatal(err)
	}
	var root map[string]any
	if err := json.Unmarshal(data, &root); err != nil {
		t.Fatal(err)
	}
	var keys []schemaKey
	var walk func(n map[string]any, path string)
	walk = func(n map[string]any, path string) {
		if props, ok := n["properties"].(map[string]any); ok {
			for k, p := range props {
				p := p.(map[string]any)
				q := k
				if path != "" {
					q = path + "." + k
				}
				keys = append(keys, schemaKey{q, p["default"]})
				walk(p, q)
			}
		}
		if items, ok := n["items"].(map[string]any); ok {
			walk(items, path+"[]")
		}
		// A map of named entries whose values have keys of their own
		// (backends) is documented as path.<name>; a map of scalars (env)
		// is one key.
		if ap, ok := n["additionalProperties"].(map[string]any); ok {
			if _, nested := ap["properties"]; nested {
				keys = append(keys, schemaKey{path + ".<name>", nil})
				walk(ap, path+".<name>")
			}
		}
	}
	walk(root, "")
	sort.Slice(keys, func(i, j int) bool { return keys[i].path < keys[j].path })
	return keys
}

// docRow is a table row of configuration.md whose first cell is a key.
var docRow = regexp.MustCompile("^\\| `([^`]+)` \\|([^|]*)\\|")

// documentedKeys returns every key that configuration.md has a table row
// for, with the row's default cell.
func documentedKeys(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile("configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for i, line := range strings.Split(string(data), "\n") {
		m := docRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if _, dup := out[m[1]]; dup {
			t.Errorf("configuration.md:%d: %s is documented twice", i+1, m[1])
		}
		out[m[1]] = strings.TrimSpace(m[2])
	}
	return out
}

// TestConfigurationDocumentsEveryKey: every key of the schema has its row
// in configuration.md, every row is a key of the schema, and a key's
// default in the schema is the default the row states.
func TestConfigurationDocumentsEveryKey(t *testing.T) {
	keys := schemaKeys(t)
	if len(keys) < 40 {
		t.Fatalf("only %d keys in the schema: the walk is broken", len(keys))
	}
	doc := documentedKeys(t)
	known := map[string]bool{}
	for _, k := range keys {
		known[k.path] = true
		def, ok := doc[k.path]
		if !ok {
			t.Errorf("%s is not documented in configuration.md (add a table row starting with | `%s` |)", k.path, k.path)
			continue
		}
		if k.def == nil {
			continue
		}
		want := fmt.Sprint(k.def)
		if f, ok := k.def.(float64); ok { // a JSON number: 67108864, not 6.7108864e+07
			want = strconv.FormatFloat(f, 'f', -1, 64)
		}
		if !strings.Contains(def, "`"+want+"`") {
			t.Errorf("%s: configuration.md gives the default %q; the schema says `%s`", k.path, def, want)
		}
	}
	for k := range doc {
		if !known[k] {
			t.Errorf("configuration.md documents %s, which is not a key of swarmd.yaml", k)
		}
	}
}

// TestRowsParse guards the row pattern that the test above relies on: a
// key row is recognised, anything else is not.
func TestRowsParse(t *testing.T) {
	for line, want := range map[string]string{
		"| `listen` | `127.0.0.1:9464` | rule | restart |": "listen",
		"| `agents[].name` | required | rule | x |":        "agents[].name",
		"| Key | Default | Rule | SIGHUP |":                "",
		"`listen` in prose":                                "",
	} {
		m := docRow.FindStringSubmatch(line)
		if got := ""; m != nil {
			got = m[1]
			if got != want {
				t.Errorf("%q: key %q, want %q", line, got, want)
			}
		} else if want != "" {
			t.Errorf("%q: no key, want %q", line, want)
		}
	}
}

// outsidePointer is a reference to documents users do not have: the
// project's private product contract and its sources.
var outsidePointer = regexp.MustCompile(`\.\./shared|/work/shared|SPEC §|SPEC\.md`)

// outsideNumbers are the numbers of documents a user of the repository
// does not have (a seed, an issue), in its prose (the .md files).
var outsideNumbers = regexp.MustCompile(`\b[Ss]eeds? ?0?0[0-9]\b|\b[Ii]ssue [0-9]+\b|\bthe seeds?'?\b`)

// notScanned are the repository's directories of build output and local
// state, and files this test does not own.
var notScanned = []string{".git", ".cache", "bin", ".swarm", "bench/out", "BENCHMARKS.md"}

// TestNoPointersOutsideTheRepository: no file of the repository (the
// README, docs, configs, deploy files, the commands' help and init's
// output, code comments) points at documents outside it.
func TestNoPointersOutsideTheRepository(t *testing.T) {
	// The files git tracks: what ships. Build output and local state are
	// not the repository's.
	out, err := exec.Command("git", "-C", "..", "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	scanned := 0
	for _, rel := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if rel == "" || rel == "docs/docs_test.go" || slices.ContainsFunc(notScanned, func(p string) bool {
			return rel == p || strings.HasPrefix(rel, p+"/")
		}) {
			continue
		}
		data, err := os.ReadFile(filepath.Join("..", rel))
		if err != nil {
			continue // deleted in the work tree
		}
		scanned++
		prose := strings.HasSuffix(rel, ".md")
		for i, line := range strings.Split(string(data), "\n") {
			if outsidePointer.MatchString(line) || prose && outsideNumbers.MatchString(line) {
				t.Errorf("%s:%d points outside the repository: %s", rel, i+1, strings.TrimSpace(line))
			}
		}
	}
	if scanned < 50 {
		t.Fatalf("scanned only %d files", scanned)
	}
}

// mdLink is a Markdown link target.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestLinksResolve: every relative link in the documentation names a file
// of the repository, and every #anchor a heading of the file it names.
func TestLinksResolve(t *testing.T) {
	files, _ := filepath.Glob("*.md")
	files = append(files, "../README.md", "../DEVELOPERS.md")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := f
			if file != "" {
				path = filepath.Join(filepath.Dir(f), file)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: link %s: %v", f, target, err)
				continue
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !slices.Contains(anchors(t, path), anchor) {
				t.Errorf("%s: link %s: no heading with that anchor in %s", f, target, path)
			}
		}
	}
}

// anchors are the GitHub anchors of a Markdown file's headings.
func anchors(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	inCode := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var b strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}

// TestRestartKeysAreTheDocumented: the keys configuration.md says only a
// restart applies are the ones a reload keeps at their running value
// (config.RestartKeys), a key or the section above it; and every key a
// reload keeps is documented "restart".
func TestRestartKeysAreTheDocumented(t *testing.T) {
	data, err := os.ReadFile("configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	lastCell := regexp.MustCompile(`\|\s*([^|]*?)\s*\|\s*$`)
	kept := config.RestartKeys()
	keptOf := func(key string) bool {
		if key == "merge.max_rejections" {
			return false // the one key of merge a reload applies (config.KeepRestartKeys)
		}
		for k := key; ; {
			if slices.Contains(kept, k) {
				return true
			}
			i := strings.LastIndexByte(k, '.')
			if i < 0 {
				return false
			}
			k = k[:i]
		}
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		m := docRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		reload := lastCell.FindStringSubmatch(line)[1]
		restart := reload == "restart"
		if restart {
			documented[m[1]] = true
		}
		if got := keptOf(m[1]); got != restart && !strings.HasPrefix(reload, "restart for") {
			t.Errorf("configuration.md: %s applies %q on a reload, but a reload keeps it at its running value: %v", m[1], reload, got)
		}
	}
	for _, k := range kept {
		if !documented[k] {
			t.Errorf("a reload keeps %s at its running value, but configuration.md does not say restart for it", k)
		}
	}
}
