package docs

import (
	"errors"
	"go/build"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/agent"
)

const module = "github.com/swarmd/swarmd/"

// tableRows returns the cells of every row of architecture.md's table
// whose header starts with header (the header and separator rows
// excluded).
func tableRows(t *testing.T, header string) [][]string {
	t.Helper()
	data, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows [][]string
	in := false
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, header):
			in = true
		case in && strings.HasPrefix(line, "|--"):
		case in && strings.HasPrefix(line, "|"):
			var cells []string
			for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
				cells = append(cells, strings.TrimSpace(c))
			}
			rows = append(rows, cells)
		default:
			in = false
		}
	}
	if len(rows) == 0 {
		t.Fatalf("architecture.md has no table %q", header)
	}
	return rows
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// TestPackageTableImports: the package table lists every package under
// internal/, and for each exactly the swarmd packages it imports.
func TestPackageTableImports(t *testing.T) {
	documented := map[string][]string{}
	for _, row := range tableRows(t, "| Package |") {
		pkg := strings.Trim(row[0], "`")
		if !strings.HasPrefix(pkg, "internal/") {
			continue // cmd/swarmd imports everything
		}
		imports := []string{}
		for _, m := range codeSpan.FindAllStringSubmatch(row[2], -1) {
			imports = append(imports, m[1])
		}
		documented[pkg] = imports
	}
	dirs, err := filepath.Glob("../internal/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range dirs {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			var noGo *build.NoGoError
			if errors.As(err, &noGo) {
				continue
			}
			t.Fatal(err)
		}
		name := "internal/" + filepath.Base(dir)
		var got []string
		for _, imp := range pkg.Imports {
			if rest, ok := strings.CutPrefix(imp, module+"internal/"); ok {
				got = append(got, rest)
			}
		}
		slices.Sort(got)
		want, ok := documented[name]
		if !ok {
			t.Errorf("architecture.md's package table has no row for %s", name)
			continue
		}
		delete(documented, name)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s imports %v of swarmd; architecture.md says %v", name, got, want)
		}
	}
	for name := range documented {
		t.Errorf("architecture.md lists %s, which is not a package", name)
	}
}

// eventRE is an event cell: "SessionExited(Error), a threshold reached".
var eventRE = regexp.MustCompile(`^(\w+)(?:\((\w+)\))?(, a threshold reached)?$`)

// TestAgentMachineTable: every row of architecture.md's transition table
// is what agent.Machine does, and every state and event pair the table
// leaves out is refused.
func TestAgentMachineTable(t *testing.T) {
	states := map[string]agent.StateKind{}
	for _, k := range agent.AllStates {
		states[k.String()] = k
	}
	events := map[string]agent.EventKind{}
	for k := agent.WorktreeReady; k <= agent.FatalError; k++ {
		events[k.String()] = k
	}
	outcomes := map[string]agent.OutcomeKind{"Success": agent.Success, "Error": agent.Error, "Timeout": agent.Timeout}
	th := agent.Thresholds{MaxConsecutiveErrors: 3, MaxTotalErrors: 3}
	now := time.Unix(1_700_000_000, 0)

	type pair struct {
		from    agent.StateKind
		ev      agent.EventKind
		outcome agent.OutcomeKind
	}
	covered := map[pair]bool{}
	rows := tableRows(t, "| From | Event |")
	for _, row := range rows {
		if len(row) != 5 {
			t.Fatalf("row %q: want 5 cells", row)
		}
		m := eventRE.FindStringSubmatch(row[1])
		if m == nil {
			t.Fatalf("row %q: cannot read the event %q", row, row[1])
		}
		kind, ok := events[m[1]]
		if !ok {
			t.Fatalf("row %q: unknown event %s", row, m[1])
		}
		ev := agent.Event{Kind: kind, Msg: "why", Prompt: "p", Seq: 1}
		if m[2] != "" {
			ev.Outcome = agent.ExitOutcome{Kind: outcomes[m[2]], Msg: "x"}
		}
		atThreshold := m[3] != ""
		for _, fromName := range strings.Split(row[0], ", ") {
			from, ok := states[fromName]
			if !ok {
				t.Fatalf("row %q: unknown state %s", row, fromName)
			}
			covered[pair{from, kind, ev.Outcome.Kind}] = covered[pair{from, kind, ev.Outcome.Kind}] || !atThreshold
			c := uint32(1)
			if atThreshold {
				c = 2
			}
			mc := agent.Restore(th, agent.State{Kind: from}, c, c)
			eff, err := mc.Handle(ev, now)
			if err != nil {
				t.Errorf("row %q from %s: %v", row, fromName, err)
				continue
			}
			if got := mc.State().Kind.String(); got != row[2] {
				t.Errorf("row %q from %s: to %s", row, fromName, got)
			}
			if got := eff.Kind.String(); got != row[3] {
				t.Errorf("row %q from %s: effect %s", row, fromName, got)
			}
			wantCons, wantTotal := c, c
			switch row[4] {
			case "unchanged":
			case "consecutive 0":
				wantCons = 0
			case "both +1":
				wantCons, wantTotal = c+1, c+1
			default:
				t.Fatalf("row %q: unknown counters %q", row, row[4])
			}
			if mc.ConsecutiveErrors() != wantCons || mc.TotalErrors() != wantTotal {
				t.Errorf("row %q from %s: counters %d, %d; want %d, %d", row, fromName,
					mc.ConsecutiveErrors(), mc.TotalErrors(), wantCons, wantTotal)
			}
		}
	}
	for _, from := range agent.AllStates {
		for kind := agent.WorktreeReady; kind <= agent.FatalError; kind++ {
			outs := []agent.OutcomeKind{agent.Success}
			if kind == agent.SessionExited {
				outs = []agent.OutcomeKind{agent.Success, agent.Error, agent.Timeout}
			}
			for _, o := range outs {
				if covered[pair{from, kind, o}] {
					continue
				}
				mc := agent.Restore(th, agent.State{Kind: from}, 1, 1)
				if _, err := mc.Handle(agent.Event{Kind: kind, Outcome: agent.ExitOutcome{Kind: o}}, now); !errors.Is(err, agent.ErrInvalidTransition) {
					t.Errorf("%s in %s (outcome %s) is not in architecture.md's table, but the machine allows it", kind, from, o)
				}
			}
		}
	}
}

// tiers orders the packages under internal/ from the leaves up: a package
// may import only packages of lower tiers. An import that climbs (the store
// reaching for the mailbox, the runner for the daemon) is the wrong way.
var tiers = [][]string{
	{"sysfile"}, // the kernel's files, for cgroup and proc
	{"agent", "task", "review", "budget", "provider", "cgroup", "admission", "sandbox", "quarantine", "fence", "notify", "control", "environ", "service", "mockllm", "pgtest", "fuzzhttp"}, // leaves: import nothing of swarmd but sysfile
	{"proc"},
	{"backend", "hooks", "worktree", "store", "logs"},
	{"mailbox", "taskboard", "merge", "runner", "gitmaint", "history"},
	{"config", "prompt", "settle", "registry", "router", "metrics", "view", "backup"},
	{"web", "tui", "spend", "providergate"},
	{"daemon"}, // imported by the commands alone
	{"cli"},    // the commands, wired by cmd/swarmd
}

// TestImportLayers: the import graph runs one way, from cmd/swarmd down
// to the leaves, and every package has its place in it.
func TestImportLayers(t *testing.T) {
	tierOf := map[string]int{}
	for i, ps := range tiers {
		for _, p := range ps {
			tierOf[p] = i
		}
	}
	dirs, err := filepath.Glob("../internal/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range dirs {
		pkg, err := build.ImportDir(dir, 0)
		var noGo *build.NoGoError
		if errors.As(err, &noGo) {
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(dir)
		tier, ok := tierOf[name]
		if !ok {
			t.Errorf("internal/%s has no tier in TestImportLayers: place it", name)
			continue
		}
		for _, imp := range pkg.Imports {
			if strings.HasPrefix(imp, module+"cmd/") {
				t.Errorf("internal/%s imports %s: nothing imports the commands", name, imp)
			}
			dep, ok := strings.CutPrefix(imp, module+"internal/")
			if !ok {
				continue
			}
			if dt, known := tierOf[dep]; known && dt >= tier {
				t.Errorf("internal/%s (tier %d) imports internal/%s (tier %d): imports must point down", name, tier, dep, dt)
			}
		}
	}
}
