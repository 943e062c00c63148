package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
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

// TestDaemonGCTakesNothingOfTheStoreForAQuarantine: a sandbox writes its
// quarantine as it likes, a pack too: one holding a copy of every object
// of the repository's store (git repack -a, which borrows what the
// alternate holds, or a copy of the store's packs). The daemon's git gc
// must not drop the store's own copies for it: once the sandbox has
// removed that pack, or its release refused it, every object of the
// repository must still be there.
func TestDaemonGCTakesNothingOfTheStoreForAQuarantine(t *testing.T) {
	cfg := repo(t, agentsYAML("alice")+"maintenance: {loose_objects: 300}\n")
	gitDir := bulk(t, cfg, 2000)
	d := open(t, cfg)
	// While the daemon runs, alice's sandbox packs what it reads through
	// its alternate into its quarantine.
	q := d.host.quarantine.Dir("alice")
	if err := os.MkdirAll(filepath.Join(q, "pack"), 0o755); err != nil {
		t.Fatal(err)
	}
	pack := exec.Command("git", "--git-dir="+gitDir, "pack-objects", "-q", "--all", filepath.Join(q, "pack", "pack"))
	pack.Stdin = strings.NewReader("")
	if out, err := pack.CombinedOutput(); err != nil {
		t.Fatalf("git pack-objects: %v: %s", err, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Daemon: d, cancel: cancel, errc: make(chan error, 1)}
	go func() { r.errc <- d.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	waitFor(t, "a git gc run recorded", func() bool { return len(gcRuns(t, r)) > 0 })
	r.stop(t)
	// The sandbox removes its pack (or a release refuses it).
	if err := os.RemoveAll(filepath.Join(q, "pack")); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "--git-dir="+gitDir, "fsck", "--connectivity-only", "--no-dangling").CombinedOutput(); err != nil {
		t.Fatalf("the repository lost objects to the daemon's git gc: %v\n%s", err, firstLines(out, 5))
	}
}

func firstLines(b []byte, n int) string {
	lines := strings.SplitN(string(b), "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}
