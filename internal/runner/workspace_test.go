package runner

import (
	"testing"

	"github.com/swarmd/swarmd/internal/worktree"
)

// A prepared or verified worktree serves one prompt without another check;
// a prompt's HEAD serves one spawn, after which HEAD is read.
func TestTree(t *testing.T) {
	var tr tree
	if !tr.needsCheck() {
		t.Fatal("a worktree nothing checked needs no check")
	}
	tr.ready(worktree.Worktree{Path: "/w"})
	if tr.needsCheck() || !tr.needsCheck() || tr.wt.Path != "/w" {
		t.Fatal("a check did not serve exactly one prompt")
	}
	reads := 0
	read := func() string { reads++; return "bbb" }
	tr.promptHead = "aaa"
	if got := tr.startHead(read); got != "aaa" || reads != 0 || tr.promptHead != "" {
		t.Fatalf("startHead %q after %d reads, prompt head %q", got, reads, tr.promptHead)
	}
	if got := tr.startHead(read); got != "bbb" || reads != 1 || tr.headBefore != "bbb" {
		t.Fatalf("startHead %q after %d reads, head before %q", got, reads, tr.headBefore)
	}
}
