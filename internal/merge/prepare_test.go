package merge

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestPrepareMakesTheEntryWait: an entry whose Prepare fails (its head not
// fetched yet) waits, saying why, and nothing moves; once Prepare succeeds
// it merges.
func TestPrepareMakesTheEntryWait(t *testing.T) {
	e := newEnv(t)
	var fail error = errors.New("head not on the remote yet")
	var seen []Entry
	opts := e.options()
	opts.Prepare = func(_ context.Context, en Entry) error {
		seen = append(seen, en)
		return fail
	}
	q := e.open(opts)
	alice := e.worker("alice")
	head := commitFile(t, alice, "a.txt", "a\n", "alice: a")
	if _, err := q.Enqueue(context.Background(), 1, "alice", "swarm/alice/work", ""); err != nil {
		t.Fatal(err)
	}
	before := e.main()
	step(t, q, OutcomeWaiting)
	st, err := q.Status(context.Background())
	if err != nil || !strings.Contains(st.Waiting, "head not on the remote yet") {
		t.Fatalf("status = %+v, %v; want waiting with Prepare's error", st, err)
	}
	if e.main() != before {
		t.Fatal("main moved while Prepare failed")
	}
	if len(seen) != 1 || seen[0].Head != head || seen[0].Branch != "swarm/alice/work" {
		t.Fatalf("Prepare saw %+v, want alice's entry at %s", seen, head)
	}
	fail = nil
	step(t, q, OutcomeMerged)
	if got := e.fileAt(e.main(), "a.txt"); got != "a" {
		t.Fatalf("main's a.txt = %q after the merge", got)
	}
}
