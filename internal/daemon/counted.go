package daemon

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/merge"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/worktree"
)

// With a remote, each daemon has a clone of its own, and a merge on its
// target (refs/heads/INTO) is the swarm's only once the swarm counts it: the
// store records it (merge.Queue.Made), or the remote's target holds it as
// last fetched. A daemon that led the merge queue and was cut off (killed,
// stopped past its lease) between moving its target and recording the
// merge leaves a merge on it that nobody counted: the next leader merges
// that task again, onto the remote's target. A task line started from the
// uncounted merge carried the task into the target a second time (found by
// TestChaosPostgres). So a new line starts below the target's merges
// (commits with the queue's task trailer) that the remote does not hold
// (lineBase), and the leader sets the uncounted ones aside when it takes
// the remote's target. Anyone's own commits on the
// target are left alone: they are the operator's to bring in.

// lineBaseWalk bounds how far back a line's start is looked for: that many
// uncounted merges are not one lost leader's; the line then starts at the
// target's tip, as without a remote.
const lineBaseWalk = 32

// setAsidePrefix is where a target's uncounted merges are kept once they
// are set aside (refs/swarmd/set-aside/INTO/UNIXNANO).
const setAsidePrefix = "refs/swarmd/set-aside/"

// lineBases is what lineBase keeps between calls.
type lineBases struct {
	mu    sync.Mutex
	below string // the target's tip that new lines last started below, logged once
}

// remoteRefs are the refs that hold what the daemon last saw of the
// remote's into: FetchBranch's, and the remote-tracking branch of a named
// remote (a clone's origin/INTO), which a daemon that never merged has.
func remoteRefs(into, remote string) []string {
	refs := []string{worktree.FetchedPrefix + into}
	if remote != "" && !strings.ContainsAny(remote, "/:") {
		refs = append(refs, "refs/remotes/"+remote+"/"+into)
	}
	return refs
}

// lineBase returns where a new task line starts with a remote: the
// target, below the queue's merges at its tip that the remote does not
// hold as last seen. A merge the store records is not enough: the queue
// records a batch's merges before its report pushes them, and a leader
// cut off in between leaves a recorded merge the remote never gets, which
// the next leader makes again as another commit; lines started on the
// first were rejected for carrying it, over and over (TestChaosPostgres).
// Until the remote holds a merge, new lines start below it: on a commit
// one merge older at worst, which merges all the same.
func (d *Daemon) lineBase(into, remote string) func(context.Context) (string, error) {
	refs := remoteRefs(into, remote)
	return func(ctx context.Context) (string, error) {
		cs, err := d.trees.FirstParents(ctx, "refs/heads/"+into, refs, merge.TaskTrailer, lineBaseWalk)
		if err != nil {
			return "", err
		}
		for i, c := range cs {
			if c.Trailer == "" { // someone's own commit: counted as theirs
				if i > 0 {
					d.lineBelow(into, cs[:i], c.Commit)
				}
				return c.Commit, nil
			}
		}
		// Every commit of cs is a merge the remote lacks: the line starts
		// below them all, at a commit the remote holds, when cs ends at
		// one.
		if len(cs) == 0 || len(cs) == lineBaseWalk || cs[len(cs)-1].Parent == "" {
			return into, nil
		}
		d.lineBelow(into, cs, cs[len(cs)-1].Parent)
		return cs[len(cs)-1].Parent, nil
	}
}

// lineBelow logs, once per tip, that lines start below the uncounted
// commits cs (newest first) of into.
func (d *Daemon) lineBelow(into string, cs []worktree.FirstParent, base string) {
	l := &d.merge.lines
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.below == cs[0].Commit {
		return
	}
	l.below = cs[0].Commit
	d.log.Warn("new task lines start below merges on the target that the remote does not hold (yet)",
		zap.String("target", into), zap.String("tip", cs[0].Commit), zap.Int("uncounted", len(cs)), zap.String("base", base))
}

// setAsideUncounted sets aside this repository's into (ours) in favour of
// the remote's (theirs), when every commit of ours the remote lacks is a
// merge the queue made (it carries the task trailer) and the store records
// none of them: the merges of a leader cut off before it recorded them,
// which the swarm made again since, or will (their tasks are not merged).
// Only ours' first-parent line counts: a merge's second parent is its
// task's own head, whose commits the remote lacks until the task is merged
// again, and which its task's branch keeps. It reports whether it did.
func (d *Daemon) setAsideUncounted(ctx context.Context, into, theirs, ours string) (bool, error) {
	cs, err := d.trees.FirstParents(ctx, ours, []string{theirs}, merge.TaskTrailer, 0)
	if err != nil || len(cs) == 0 {
		return false, err
	}
	var ids []string
	for _, c := range cs {
		if c.Trailer == "" {
			return false, nil // not a merge: someone's own commit
		}
		made, err := d.merge.queue.Made(ctx, c.Commit)
		if err != nil || made {
			return false, err
		}
		ids = append(ids, c.Trailer)
	}
	slices.Sort(ids)
	keep := fmt.Sprintf("%s%s/%d", setAsidePrefix, into, time.Now().UnixNano())
	if err := d.trees.SetAside(ctx, into, ours, theirs, keep); err != nil {
		return false, err
	}
	reason := fmt.Sprintf("%s set aside at %.12s (kept as %s): %d merge(s) of task(s) %s that no queue recorded (a leader cut off before it recorded them; the queue merges those tasks again, if it has not), in favour of the remote's %.12s",
		into, ours, keep, len(cs), strings.Join(ids, ", "), theirs)
	d.log.Warn("merge queue: "+reason, zap.String("target", into), zap.String("kept", keep), zap.String("to", theirs))
	d.journal.Event(store.EventRecord{At: time.Now(), Agent: "merge", Event: "target_set_aside", Actor: "swarmd", Reason: reason})
	return true, nil
}
