package config

import (
	"path/filepath"
	"testing"
	"time"
)

// TestMergeSection: no merge key (or `merge:` alone) means no queue; a
// section with only into gets the defaults.
func TestMergeSection(t *testing.T) {
	dir := t.TempDir()
	for doc, want := range map[string]*Merge{
		"agents: [{name: alice, role: x}]\n":                      nil,
		"merge:\nagents: [{name: alice, role: x}]\n":              nil,
		"merge: {into: main}\nagents: [{name: alice, role: x}]\n": {Into: "main", Timeout: 30 * time.Minute, Strategy: "merge", Batch: 8},
		"merge: {into: dev/next, gate: [go test ./...], strategy: rebase, timeout: 5m, batch: 1}\nagents: [{name: alice, role: x}]\n": {
			Into: "dev/next", Gate: []string{"go test ./..."}, Timeout: 5 * time.Minute, Strategy: "rebase", Batch: 1},
	} {
		cfg, err := Parse([]byte(doc), filepath.Join(dir, "swarmd.yaml"))
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		switch {
		case want == nil && cfg.Merge != nil:
			t.Errorf("%q: Merge = %+v, want none", doc, cfg.Merge)
		case want != nil && (cfg.Merge == nil || cfg.Merge.Into != want.Into || cfg.Merge.Timeout != want.Timeout ||
			cfg.Merge.Strategy != want.Strategy || len(cfg.Merge.Gate) != len(want.Gate) || cfg.Merge.Batch != want.Batch):
			t.Errorf("%q: Merge = %+v, want %+v", doc, cfg.Merge, want)
		}
	}
}

func TestBranchNameProblem(t *testing.T) {
	for name, bad := range map[string]bool{
		"main": false, "release/v2": false, "feature-x_1": false,
		"-x": true, "refs/heads/main": true, "HEAD": true, "swarm/bob/work": true, "a b": true, "a..b": true,
		"a~1": true, "a^": true, "x:y": true, "a@{1}": true, "a//b": true, "a/": true, "a.": true,
		"a.lock": true, ".hidden": true, "a/.b": true, "tab\tx": true,
	} {
		if got := branchNameProblem(name) != ""; got != bad {
			t.Errorf("branchNameProblem(%q) = %q, want bad=%v", name, branchNameProblem(name), bad)
		}
	}
}
