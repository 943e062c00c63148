package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/proc"
	"github.com/swarmd/swarmd/internal/prompt"
	"github.com/swarmd/swarmd/internal/quarantine"
	"github.com/swarmd/swarmd/internal/sandbox"
	"github.com/swarmd/swarmd/internal/worktree"
)

// The git objects a sandbox writes wait in its agent's quarantine (package
// quarantine, under the state directory's q/) until its session ends,
// and only those whose content matches their name reach the repository's
// object store, which every sandbox sees read-only.

// openQuarantine makes the agents' quarantines, once the repository is
// open, and moves what a killed daemon's sessions left in them: their
// branches may name those objects. Whatever this start's isolation, an
// earlier one's sandboxes may have left some.
func (d *Daemon) openQuarantine(ctx context.Context, cfg *config.Config) {
	d.host.quarantine = quarantine.New(filepath.Join(cfg.StateDir, "q"), d.trees.CommonDir(),
		// Inside the state directory, which a sandbox sees as an empty
		// tmpfs: the bind's mount point is made there, not on the host.
		filepath.Join(cfg.StateDir, "o"))
	d.host.quarantine.Exec = d.objectsGit
	d.host.quarantine.Git = d.host.tools.git
	d.host.releases, d.host.cutReleases = context.WithCancel(context.Background())
	d.releaseLeft(ctx, startReleaseTime)
}

// stopReleaseTime is how long the releases of a stop's sessions may run
// once the stop has begun: a release cut short leaves its objects in the
// quarantine, for the next start (releaseLeft) or the agent's next prompt.
// A session's pack (a hostile one takes git ten minutes) must not hold up
// SIGTERM.
const stopReleaseTime = 10 * time.Second

// cutReleasesAfter cuts every release still running within from now:
// the stop has begun.
func (d *Daemon) cutReleasesAfter(within time.Duration) *time.Timer {
	return time.AfterFunc(within, d.host.cutReleases)
}

// startReleaseTime is how long a start gives git on the packs a killed
// daemon's sessions left. One it has not finished by then stays, and its
// agent's first prompt moves it (objectsFirst), with the release's whole
// time: one agent's pack (a hostile one takes ten minutes) holds up that
// agent, not the swarm's start.
const startReleaseTime = 10 * time.Second

// releaseLeft moves what the quarantines hold at a start, giving git
// within on their packs.
func (d *Daemon) releaseLeft(ctx context.Context, within time.Duration) {
	rctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	left, err := d.host.quarantine.ReleaseAll(rctx)
	switch {
	case err != nil && rctx.Err() != nil:
		d.log.Warn("the objects an earlier daemon's sessions left were not all moved into the repository at the start: "+
			"each agent's first prompt moves its own", zap.Duration("within", within), zap.Error(err))
	case err != nil:
		d.log.Error("move the objects an earlier daemon's sessions left into the repository", zap.Error(err))
	}
	for agent, r := range left {
		d.log.Info("moved the objects an earlier daemon's session left into the repository",
			zap.String("agent", agent), zap.Int("objects", r.Moved))
		d.refusedObjects(ctx, agent, r.Refused)
	}
}

// objectsGit runs the git of a release (quarantine.Exec) as a process
// tree of the daemon's, as hooks and gates run: at the sessions' priority
// (limits.session_nice), in a cgroup of its own where isolation makes
// them (its memory.max the bound the release gives git, where the memory
// controller is delegated), killed whole when the release's time runs
// out, and marked, so that the next start ends it if this daemon is
// killed. It reads a pack a sandbox wrote: its CPU and memory are spent
// for that agent, not as the daemon's own.
func (d *Daemon) objectsGit(ctx context.Context, c quarantine.Command) ([]byte, error) {
	out := &firstBytes{max: 4 << 10}
	spec := proc.Spec{
		Path: c.Argv[0], Args: c.Argv[1:], Env: c.Env, Output: out, MemoryMax: c.Memory,
		ID: "objects-" + c.Agent + "-" + strconv.FormatUint(d.host.objectRuns.Add(1), 10),
	}
	if c.Stdin != nil {
		spec.Stdin = c.Stdin
	}
	tree, err := d.host.sup.Start(spec)
	if err != nil {
		return nil, err
	}
	if tree.WaitBounded(ctx, 0, 0) == proc.EndedByContext {
		return out.b, ctx.Err()
	}
	if st := tree.Exit(); st.Code != 0 {
		return out.b, &quarantine.GitError{Status: st.String()}
	}
	return out.b, nil
}

// firstBytes keeps the first max bytes written to it: why git failed is
// its first line, and a pack's git writes no more than a line or two.
type firstBytes struct {
	b   []byte
	max int
}

func (w *firstBytes) Write(p []byte) (int, error) {
	w.b = append(w.b, p[:min(len(p), w.max-len(w.b))]...)
	return len(p), nil
}

// objectBinds are a sandbox's binds for git's objects: its agent's
// quarantine where git writes them, the shared store read-only as its
// alternate.
func (d *Daemon) objectBinds(acc worktree.Access, quarantined string) []sandbox.Bind {
	return []sandbox.Bind{
		{Src: quarantined, Dest: acc.Objects, Writable: true},
		{Src: acc.Objects, Dest: d.host.quarantine.Mount()},
	}
}

// releaseObjects moves the checked objects of agent's quarantine into the
// repository; its sandbox's processes have ended. Not the run's context:
// a stop's sessions' commits are moved too, for as long as a stop lets
// them (stopReleaseTime).
func (d *Daemon) releaseObjects(agent string) {
	r, err := d.host.quarantine.Release(d.host.releases, agent)
	if err != nil {
		// Nothing is lost: the objects stay in the quarantine, and the
		// agent's next prompt tries again (objectsFirst).
		d.log.Error("move a session's objects into the repository; its next prompt tries again", zap.String("agent", agent), zap.Error(err))
	}
	if r.Moved > 0 {
		d.log.Debug("moved a session's objects into the repository", zap.String("agent", agent), zap.Int("objects", r.Moved))
	}
	d.metrics.Quarantined(r.Moved, len(r.Refused))
	d.refusedObjects(context.Background(), agent, r.Refused)
}

// moveObjects moves the checked objects of agent's quarantine into the
// repository while its session runs (quarantine.Move); what it refuses is
// reported at the session's end.
func (d *Daemon) moveObjects(agent string) {
	r, err := d.host.quarantine.Move(d.host.releases, agent)
	if err != nil {
		d.log.Error("move a running session's objects into the repository", zap.String("agent", agent), zap.Error(err))
	}
	d.log.Debug("moved a running session's objects into the repository", zap.String("agent", agent), zap.Int("objects", r.Moved))
}

// refusedObjects tells the operator of objects an agent's sandbox wrote
// that are not what their names say (a forgery, or a session cut short in
// a way git's own writes never are), or packs git did not finish with in
// the release's time. They were not moved; a commit that
// names one is incomplete, and the merge queue refuses it.
func (d *Daemon) refusedObjects(ctx context.Context, agent string, refused []string) {
	if len(refused) == 0 {
		return
	}
	// A sandbox decides how many there are: the log and the note name the
	// first few.
	const named = 20
	shown := refused[:min(len(refused), named)]
	more := ""
	if len(refused) > named {
		more = fmt.Sprintf("\n(and %d more)", len(refused)-named)
	}
	d.log.Error("objects an agent's sandbox wrote were refused: not moved into the repository",
		zap.String("agent", agent), zap.Int("count", len(refused)), zap.Strings("objects", shown))
	if d.mail == nil {
		return
	}
	if _, err := d.mail.NoteToOperator(ctx, fmt.Sprintf("%s: objects its sandbox wrote were refused", agent),
		fmt.Sprintf("%d git objects that %s's sandbox wrote were refused and not moved into the repository, each for the reason given:\n\n%s%s\n\n"+
			"Git writes no object that does not match its name, and no session makes a pack that git cannot finish with in minutes: "+
			"look at the agent's last session.", len(refused), agent, strings.Join(shown, "\n"), more)); err != nil {
		d.log.Warn("mail the operator", zap.String("agent", agent), zap.Error(err))
	}
}

// objectsIn moves what a failed release left in agent's quarantine and
// reports whether nothing waits there any more. The merge feeder queues
// no task of an agent whose objects wait (a full disk): the queue would
// find its frozen head missing and reject the work as a conflict.
func (d *Daemon) objectsIn(agent string) bool {
	q := d.host.quarantine
	if q == nil || !q.Unreleased(agent) {
		return true
	}
	d.releaseObjects(agent)
	return !q.Unreleased(agent)
}

// objectsFirst is the prompt builder's view of the worktrees: before it
// reads an agent's branch, it moves what a failed release left in the
// agent's quarantine, so that once the disk has room again the agent goes
// on by itself instead of failing on objects the repository lacks.
type objectsFirst struct {
	prompt.Git
	d *Daemon
}

func (g objectsFirst) retry(agent string) {
	if g.d.host.quarantine.Unreleased(agent) {
		g.d.releaseObjects(agent)
	}
}

func (g objectsFirst) Look(ctx context.Context, agent string) (worktree.Status, error) {
	g.retry(agent)
	return g.Git.Look(ctx, agent)
}

func (g objectsFirst) RecentCommits(ctx context.Context, agent string, n int) ([]worktree.Commit, error) {
	g.retry(agent)
	return g.Git.RecentCommits(ctx, agent, n)
}
