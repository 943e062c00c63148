package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// FuzzParse: Parse never panics; a failure is one-line *Error values; a
// success satisfies every rule the rest of swarmd relies on.
func FuzzParse(f *testing.F) {
	for _, pattern := range []string{"testdata/*.yaml", "testdata/invalid/*.yaml", "testdata/paths/conf/*.yaml"} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	path := filepath.Join("testdata", "fuzz.yaml") // role files resolve against testdata/

	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data, path)
		_, err2 := Parse(data, path)
		if (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
			t.Fatalf("Parse is not deterministic: %v / %v", err, err2)
		}
		if err != nil {
			checkError(t, err, path)
			return
		}
		checkConfig(t, cfg)
	})
}

func checkError(t *testing.T, err error, path string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *Error", err, err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("error spans lines: %q", err)
	}
	var all Errors
	if !errors.As(err, &all) || len(all) == 0 {
		t.Fatalf("error %v is not a non-empty Errors", err)
	}
	for i, e := range all {
		if e.File != path || e.Line < 0 || e.Msg == "" || strings.Contains(e.Error(), "\n") {
			t.Fatalf("bad problem %+v", e)
		}
		if i > 0 && all[i-1].Line > e.Line && e.Line != 0 {
			t.Fatalf("problems out of line order: %v", all)
		}
	}
}

func checkConfig(t *testing.T, cfg *Config) {
	t.Helper()
	if !filepath.IsAbs(cfg.Repo) || !filepath.IsAbs(cfg.StateDir) || !filepath.IsAbs(cfg.Path) {
		t.Fatalf("paths not absolute: %q %q %q", cfg.Repo, cfg.StateDir, cfg.Path)
	}
	if cfg.BaseRef == "" || strings.HasPrefix(cfg.BaseRef, "-") {
		t.Fatalf("bad base_ref %q", cfg.BaseRef)
	}
	if cfg.Logs.KeepArchives < 1 || cfg.Logs.MaxAge <= 0 || cfg.Hooks.Timeout <= 0 || cfg.Mailbox.MaxBody < 1 || cfg.StallAfter <= 0 {
		t.Fatalf("non-positive setting: %+v %+v %+v %s", cfg.Logs, cfg.Hooks, cfg.Mailbox, cfg.StallAfter)
	}
	for _, name := range []string{"claude", "codex", "gemini"} {
		if _, ok := cfg.Backends[name]; !ok {
			t.Fatalf("built-in backend %s missing", name)
		}
	}
	for name, b := range cfg.Backends {
		if b.Name != name || !slices.Contains(backendTypes, b.Type) {
			t.Fatalf("backend %s: %+v", name, b)
		}
		if _, ok := canonicalSignal(b.CancelSignal); !ok || b.CancelSignal == "" {
			t.Fatalf("backend %s: cancel signal %q", name, b.CancelSignal)
		}
		if b.Type == TypeScripted && len(b.Steps) == 0 || b.Type != TypeScripted && b.Command == "" || b.Env == nil {
			t.Fatalf("backend %s incomplete: %+v", name, b)
		}
	}
	if len(cfg.Agents) == 0 {
		t.Fatal("no agents")
	}
	seen := map[string]bool{}
	for _, a := range cfg.Agents {
		if !agentNameRE.MatchString(a.Name) || seen[a.Name] || reservedNames[a.Name] != "" {
			t.Fatalf("bad or duplicate agent name %q", a.Name)
		}
		seen[a.Name] = true
		if _, ok := cfg.Backends[a.Backend]; !ok {
			t.Fatalf("agent %s: unknown backend %q", a.Name, a.Backend)
		}
		if strings.TrimSpace(a.Role) == "" || a.SessionTimeout <= 0 || a.GracePeriod <= 0 ||
			a.MaxConsecutiveErrors < 1 || a.MaxTotalErrors < 1 || a.Env == nil {
			t.Fatalf("agent %s invalid: %+v", a.Name, a)
		}
		for k := range a.Env {
			if !envNameRE.MatchString(k) || strings.HasPrefix(k, "SWARM_") {
				t.Fatalf("agent %s: env %q", a.Name, k)
			}
		}
	}
}
