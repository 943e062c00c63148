package daemon

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/gitmaint"
)

// bulk gives the repository of cfgPath a branch of n files whose objects
// are all loose.
func bulk(t *testing.T, cfgPath string, n int) (gitDir string) {
	t.Helper()
	run := func(dir string, stdin []byte, args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Stdin = bytes.NewReader(stdin)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	scratch := t.TempDir()
	run(scratch, nil, "init", "-q")
	var in bytes.Buffer
	fmt.Fprintf(&in, "commit refs/heads/bulk\ncommitter T <t@e> 1700000000 +0000\ndata 2\nc0\n")
	for i := 0; i < n; i++ {
		body := fmt.Sprintf("file %d\n", i)
		fmt.Fprintf(&in, "M 100644 inline f%d\ndata %d\n%s", i, len(body), body)
	}
	run(scratch, in.Bytes(), "fast-import", "--quiet")
	dir := filepath.Dir(cfgPath)
	run(dir, []byte(run(scratch, nil, "pack-objects", "--all", "--stdout")), "unpack-objects", "-q")
	run(dir, nil, "update-ref", "refs/heads/bulk", run(scratch, nil, "rev-parse", "bulk"))
	return filepath.Join(dir, ".git")
}

// gcRuns are the daemon's git gc runs its metrics recorded, by result.
func gcRuns(t *testing.T, r *running) map[string]uint64 {
	t.Helper()
	families, err := r.metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]uint64{}
	for _, f := range families {
		if f.GetName() != "swarmd_git_maintenance_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			runs[m.GetLabel()[0].GetValue()] += m.GetHistogram().GetSampleCount()
		}
	}
	return runs
}

// TestDaemonPacksTheLooseObjects: a daemon whose repository is past the
// threshold runs git gc itself, and counts it.
func TestDaemonPacksTheLooseObjects(t *testing.T) {
	cfg := repo(t, agentsYAML("alice")+"maintenance: {loose_objects: 300}\n")
	gitDir := bulk(t, cfg, 2000)
	r := start(t, cfg)
	waitFor(t, "a git gc run recorded", func() bool { return len(gcRuns(t, r)) > 0 })
	r.stop(t)
	if runs := gcRuns(t, r); runs["ok"] != 1 || len(runs) != 1 {
		t.Errorf("git gc runs recorded: %v, want one ok", runs)
	}
	if loose, _ := gitmaint.Count(gitDir); loose != 0 {
		t.Errorf("loose objects after the daemon's git gc: %d in objects/17", loose/256)
	}
}

// TestDaemonWithMaintenanceOffRunsNoGC: maintenance.gc: false runs
// nothing, however many loose objects. The check is made at the start,
// and a run it began is recorded by the time the daemon has stopped.
func TestDaemonWithMaintenanceOffRunsNoGC(t *testing.T) {
	cfg := repo(t, agentsYAML("alice")+"maintenance: {gc: false, loose_objects: 300}\n")
	gitDir := bulk(t, cfg, 2000)
	before, _ := gitmaint.Count(gitDir)
	r := start(t, cfg)
	r.stop(t)
	if runs := gcRuns(t, r); len(runs) != 0 {
		t.Errorf("git gc runs with maintenance.gc off: %v", runs)
	}
	if after, _ := gitmaint.Count(gitDir); after != before {
		t.Errorf("loose objects: %d before, %d after a daemon with maintenance.gc off", before, after)
	}
}
