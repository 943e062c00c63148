package merge

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
)

// commitMain commits files onto main (checked out nowhere) and detaches
// again.
func (e *env) commitMain(files map[string]string) {
	e.t.Helper()
	gitT(e.t, e.repo, "checkout", "-q", "main")
	for p, c := range files {
		writeFile(e.t, filepath.Join(e.repo, p), c)
		gitT(e.t, e.repo, "add", "--", p)
	}
	gitT(e.t, e.repo, "commit", "-q", "-m", "project setup")
	gitT(e.t, e.repo, "checkout", "-q", "--detach")
}

// queueFiles queues task id: agent's branch adding files.
func (e *env) queueFiles(q *Queue, id int64, agent string, files map[string]string) {
	e.t.Helper()
	dir := e.worker(agent)
	for p, c := range files {
		writeFile(e.t, filepath.Join(dir, p), c)
	}
	gitT(e.t, dir, "add", "-A")
	gitT(e.t, dir, "commit", "-q", "-m", agent)
	if _, err := q.Enqueue(context.Background(), id, agent, "swarm/"+agent+"/work", gitT(e.t, dir, "rev-parse", "HEAD")); err != nil {
		e.t.Fatal(err)
	}
}

// What one branch's gate leaves in the queue's worktree does not change
// another's result: here a rejected task's test leaves an ignored build
// output (a stale target, dated in the future) that would have let the
// next task's broken source pass `make test`. Ignored files are removed
// before each run.
func TestAGateLeavesNothingForTheNext(t *testing.T) {
	e := newEnv(t)
	e.commitMain(map[string]string{
		".gitignore": "build/\n",
		"src.txt":    "good\n",
		"Makefile": "build/out: src.txt\n\tmkdir -p build && cp src.txt build/out\n" +
			"test: build/out\n\tgrep -qx good build/out\n\tfor t in tests/*.sh; do [ -e \"$$t\" ] || continue; sh \"$$t\" || exit 1; done\n",
	})
	q := e.open(e.options("make -s test"))
	e.queueFiles(q, 1, "hostile", map[string]string{
		"tests/h.sh": "mkdir -p build; echo good > build/out; touch -d 2099-01-01 build/out; exit 1\n",
	})
	e.queueFiles(q, 2, "buggy", map[string]string{"src.txt": "bad\n"})
	drain(t, q)
	for _, c := range e.cb.all() {
		if c.merged {
			t.Errorf("task %d merged: its gate passed only on what another task's gate left", c.task)
		}
	}
	if out, err := exec.Command("git", "-C", e.repo, "show", "main:src.txt").Output(); err != nil || string(out) != "good\n" {
		t.Errorf("main's src.txt is %q (%v), want good", out, err)
	}
}

// A task is rejected only by a gate run of its own. A gate red once (a
// flaky test) made the bisection reject the batch's last task on the red
// batch's verdict, with no run of its own: the task whose candidate had
// the red batch's tree. Now every task merges.
func TestBisectionRejectsNoTaskItDidNotRunAlone(t *testing.T) {
	e := newEnv(t)
	flag := filepath.Join(t.TempDir(), "ran")
	opts := e.options(`if [ ! -e ` + flag + ` ]; then : > ` + flag + `; echo flake; exit 1; fi`)
	opts.Batch = 4
	q := e.open(opts)
	e.queueTasks(q, 4)
	drain(t, q)
	for _, c := range e.cb.all() {
		if !c.merged {
			t.Errorf("task %d rejected (%s) after a flaky red run it was never tested alone for", c.task, c.kind)
		}
	}
	if n := len(e.cb.all()); n != 4 {
		t.Errorf("%d results, want 4", n)
	}
}
