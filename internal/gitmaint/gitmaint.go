// Package gitmaint keeps the repository's object store packed while the
// daemon runs. The daemon's own git starts no git gc (worktree.GitOptions:
// gc.auto=0), so the objects the sessions' quarantines move into the
// repository would stay loose until the operator ran git gc. A Maintainer
// looks at a low rate (every Options.Every, on the instants the daemon's
// other periodic checks wake on) whether git's own threshold is passed,
// estimated as git gc --auto estimates it (the loose objects of one
// fan-out directory, objects/17, times 256; the packs), and then runs one
// git gc --auto, bounded in time, as a process tree of the daemon's, ended
// whole at its bound and at the daemon's stop.
//
// What that git may do is narrowed to what cannot hurt the swarm
// (docs/decisions.md, "The daemon packs the repository's objects itself"):
// no hook, no fsmonitor (worktree.GitOptions); no packed refs, no reflog
// expiry, no worktree pruning and no commit-graph written, so that it takes
// no lock that an agent's git or the daemon's other git waits on (a FIFO a
// session planted where git lists the refs holds it until its bound, and
// nothing else); git's own prune grace for unreachable objects; and no
// object directory a sandbox writes read (git trusts an alternate as its own
// store, and repack -l -d would delete the repository's copies of what one
// holds): Options.Prepare moves the quarantines' objects in, checked,
// before each run, so that a branch whose tip a running sandbox has written
// only there resolves. A sandbox that moves its branch after that stops
// gc's walk of the refs ("bad object"): the loose objects are then packed
// without one (Maintainer.packLoose), so that they stay bounded however
// busy the swarm.
package gitmaint

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/proc"
	"github.com/swarmd/swarmd/internal/service"
	"github.com/swarmd/swarmd/internal/worktree"
)

// Defaults: git's own thresholds (gc.auto, gc.autoPackLimit), a check
// every ten minutes, and half an hour for one run.
const (
	DefaultLooseObjects = 6700
	DefaultPacks        = 50
	DefaultEvery        = 10 * time.Minute
	DefaultTimeout      = 30 * time.Minute
)

// termGrace is how long a run that must end (its bound, the daemon's stop)
// has after SIGTERM before its tree is killed: on SIGTERM git removes its
// lock files (gc.pid, a pack's temporary files) and exits; SIGKILL would
// leave them.
const termGrace = 5 * time.Second

// rerunAfter is how long after a run that left the repository above the
// threshold (unreachable loose objects younger than git's prune grace,
// which gc keeps) the next runs, unless as many objects again have come.
const rerunAfter = 24 * time.Hour

// Procs starts process trees (a *proc.Supervisor).
type Procs interface {
	Start(spec proc.Spec) (*proc.Tree, error)
}

// Options configure a Maintainer.
type Options struct {
	// GitDir is the repository's common git directory.
	GitDir string
	// Git is the git binary ("": git, looked up in PATH).
	Git string
	// Env is the environment git runs with (nil: the daemon's), made fit
	// by worktree.GitEnv.
	Env []string
	// LooseObjects and Packs are the thresholds: gc.auto and
	// gc.autoPackLimit for the run (0: git's defaults; not negative).
	LooseObjects, Packs int
	// Every is how often the threshold is checked (0: DefaultEvery);
	// Timeout bounds one run (0: DefaultTimeout).
	Every, Timeout time.Duration
	// Prepare, if set, is called before each run, with the run's
	// context: it moves into the repository's store the objects the refs
	// may name before a session's end moves them (the agents'
	// quarantines', checked). git gc reads no other object directory: one
	// a sandbox writes can make it delete the store's objects.
	Prepare func(ctx context.Context)
	Procs   Procs
	Log     *zap.Logger
	// Observe, if set, is told of each run once it has ended.
	Observe func(Run)
}

// Result is what came of a run.
type Result string

// Results of a run.
const (
	ResultOK      Result = "ok"      // git gc ran to its end
	ResultFailed  Result = "failed"  // git gc failed, or did not start
	ResultTimeout Result = "timeout" // ended at Options.Timeout
	ResultStopped Result = "stopped" // ended by the Maintainer's Stop
	// ResultPacked: git gc failed (Run.Reason says why), and the loose
	// objects were packed without it (Maintainer.packLoose).
	ResultPacked Result = "packed"
)

// Run is one run of git gc.
type Run struct {
	Result   Result
	Duration time.Duration
	// Loose (git's estimate) and Packs are what the check found.
	Loose, Packs int
	// Reason says why a run failed: git's last words, or the error.
	Reason string
}

// Maintainer is the service that runs git gc when the repository needs it.
// Start checks at once, and runs git gc then if it is due; Stop ends a run
// under way (its whole tree) and returns once it has ended.
type Maintainer struct {
	service.Service
	opts Options
	runs atomic.Uint64

	// Of the loop's goroutine: the last run's end and what it left.
	lastRun              time.Time
	leftLoose, leftPacks int
	lastOK               bool
}

// New returns a Maintainer of opts' repository.
func New(opts Options) *Maintainer {
	if opts.Git == "" {
		opts.Git = "git"
	}
	if opts.Env == nil {
		opts.Env = os.Environ()
	}
	opts.Env = worktree.GitEnv(opts.Env)
	// The config accepts none below 1: zero is the default.
	opts.LooseObjects = cmp.Or(opts.LooseObjects, DefaultLooseObjects)
	opts.Packs = cmp.Or(opts.Packs, DefaultPacks)
	opts.Every = cmp.Or(opts.Every, DefaultEvery)
	opts.Timeout = cmp.Or(opts.Timeout, DefaultTimeout)
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	m := &Maintainer{opts: opts}
	m.Service = service.Func(m.start)
	return m
}

// start checks at once (a directory read), so that a run due at the
// start is under way, or recorded as stopped, by the time Stop returns.
func (m *Maintainer) start(ctx context.Context) (func(), error) {
	loose, packs, due := m.due(time.Now())
	loop := service.Loop(func(ctx context.Context) {
		if due {
			m.run(ctx, loose, packs)
		}
		m.loop(ctx)
	})
	if err := loop.Start(ctx); err != nil {
		return nil, err
	}
	return loop.Stop, nil
}

// loop checks every Options.Every, at the wall clock's multiples of it,
// where the daemon's other periodic checks wake too.
func (m *Maintainer) loop(ctx context.Context) {
	service.Every(ctx, m.opts.Every, false, func(ctx context.Context) {
		if loose, packs, due := m.due(time.Now()); due {
			m.run(ctx, loose, packs)
		}
	})
}

// due counts what git gc --auto counts and says whether a run is due: the
// threshold passed, and, after a run that left the repository above it,
// as many objects (or packs) again come since, or a day gone by.
func (m *Maintainer) due(now time.Time) (loose, packs int, due bool) {
	loose, packs = Count(m.opts.GitDir)
	if !Over(loose, packs, m.opts.LooseObjects, m.opts.Packs) {
		return loose, packs, false
	}
	if m.lastRun.IsZero() || !m.lastOK || now.Sub(m.lastRun) >= rerunAfter {
		return loose, packs, true
	}
	return loose, packs, loose-m.leftLoose >= m.opts.LooseObjects || packs-m.leftPacks > m.opts.Packs
}

// Over reports whether git gc --auto would run with the thresholds
// looseObjects (gc.auto) and packLimit (gc.autoPackLimit), given Count's
// estimate: more than ceil(looseObjects/256) loose objects in objects/17,
// or more than packLimit packs.
func Over(loose, packs, looseObjects, packLimit int) bool {
	return loose/256 > (looseObjects+255)/256 || packs > packLimit
}

// Count is git gc --auto's estimate of the loose objects in the object
// store of the repository whose git directory is gitDir (the object files
// in objects/17, times 256), and its packs that gc may repack (those
// without a .keep).
func Count(gitDir string) (loose, packs int) {
	objects := filepath.Join(gitDir, "objects")
	if entries, err := os.ReadDir(filepath.Join(objects, "17")); err == nil {
		for _, e := range entries {
			if objectFile(e.Name()) && e.Type().IsRegular() {
				loose++
			}
		}
	}
	if entries, err := os.ReadDir(filepath.Join(objects, "pack")); err == nil {
		names := make(map[string]bool, len(entries))
		for _, e := range entries {
			names[e.Name()] = true
		}
		for name := range names {
			base, ok := strings.CutSuffix(name, ".pack")
			if ok && strings.HasPrefix(base, "pack-") && names[base+".idx"] && !names[base+".keep"] {
				packs++
			}
		}
	}
	return loose * 256, packs
}

// objectFile reports whether name is the rest of a loose object's name
// after its fan-out directory: 38 (SHA-1) or 62 (SHA-256) hex digits.
func objectFile(name string) bool {
	if len(name) != 38 && len(name) != 62 {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// run runs git gc --auto once, logs and observes it.
func (m *Maintainer) run(ctx context.Context, loose, packs int) Run {
	started := time.Now()
	r := m.gc(ctx)
	r.Duration, r.Loose, r.Packs = time.Since(started), loose, packs
	m.lastRun, m.lastOK = time.Now(), r.Result == ResultOK
	m.leftLoose, m.leftPacks = Count(m.opts.GitDir)
	fields := []zap.Field{zap.String("result", string(r.Result)), zap.Duration("duration", r.Duration),
		zap.Int("loose_objects", loose), zap.Int("packs", packs), zap.Int("loose_objects_after", m.leftLoose), zap.Int("packs_after", m.leftPacks)}
	switch r.Result {
	case ResultOK, ResultStopped:
		m.opts.Log.Info("git maintenance ran: git gc --auto", fields...)
	case ResultPacked:
		m.opts.Log.Warn("git maintenance: git gc --auto failed, the loose objects were packed without it; the next check tries gc again", append(fields, zap.String("reason", r.Reason))...)
	default:
		m.opts.Log.Warn("git maintenance failed: git gc --auto; the next check tries again", append(fields, zap.String("reason", r.Reason))...)
	}
	if m.opts.Observe != nil {
		m.opts.Observe(r)
	}
	return r
}

// gc runs git gc and waits for it, ending it at the bound or when ctx
// ends. If it fails and leaves the loose objects over the threshold, they
// are packed without it (packLoose), in what is left of the bound.
func (m *Maintainer) gc(ctx context.Context) Run {
	if m.opts.Prepare != nil && ctx.Err() == nil {
		m.opts.Prepare(ctx)
	}
	if ctx.Err() != nil {
		return Run{Result: ResultStopped}
	}
	started := time.Now()
	r := m.git(ctx, m.opts.Timeout, m.Args(), nil)
	if r.Result != ResultFailed {
		return r
	}
	if loose, _ := Count(m.opts.GitDir); !Over(loose, 0, m.opts.LooseObjects, 0) {
		return r
	}
	p := m.packLoose(ctx, m.opts.Timeout-time.Since(started))
	if p.Result != ResultOK {
		p.Reason = r.Reason + "; then packing the loose objects without it: " + p.Reason
		return p
	}
	r.Result = ResultPacked
	return r
}

// maxLoosePacked bounds the objects packLoose packs in one run (41 bytes
// of names each on its pack-objects' input).
const maxLoosePacked = 250_000

// packLoose packs the loose objects when git gc cannot, for bound at most:
// git pack-objects given their names (from the object directory, not the
// refs, so that a branch naming an object that is not there yet does not
// stop it), then git prune-packed, which removes the loose copies of what
// is now packed. Unreachable objects are packed too; gc's next run that
// gets through sorts them out. (git maintenance's loose-objects task does
// the same from git 2.30 on; swarmd runs on older gits.)
func (m *Maintainer) packLoose(ctx context.Context, bound time.Duration) Run {
	objects := filepath.Join(m.opts.GitDir, "objects")
	var names bytes.Buffer
	n := 0
	for i := 0; i < 256 && n < maxLoosePacked; i++ {
		fan := fmt.Sprintf("%02x", i)
		entries, _ := os.ReadDir(filepath.Join(objects, fan))
		for _, e := range entries {
			if objectFile(e.Name()) && e.Type().IsRegular() && n < maxLoosePacked {
				names.WriteString(fan + e.Name() + "\n")
				n++
			}
		}
	}
	if n == 0 {
		return Run{Result: ResultOK}
	}
	base := append(slices.Clone(worktree.GitOptions), "-c", "core.fsmonitor=false", "--git-dir="+m.opts.GitDir)
	started := time.Now()
	r := m.git(ctx, bound, append(slices.Clone(base), "pack-objects", "--quiet", filepath.Join(objects, "pack", "pack")), &names)
	if r.Result != ResultOK {
		return r
	}
	return m.git(ctx, bound-time.Since(started), append(base, "prune-packed", "--quiet"), nil)
}

// git runs git with args as a tree of the daemon's and waits for it, for
// bound at most or until ctx ends.
func (m *Maintainer) git(ctx context.Context, bound time.Duration, args []string, stdin io.Reader) Run {
	if bound <= 0 {
		return Run{Result: ResultTimeout, Reason: fmt.Sprintf("ran longer than %s", m.opts.Timeout)}
	}
	out := &lastBytes{max: 2 << 10}
	tree, err := m.opts.Procs.Start(proc.Spec{
		Path: m.opts.Git, Args: args, Env: m.opts.Env, Output: out, Stdin: stdin,
		ID: "gitmaint-" + strconv.FormatUint(m.runs.Add(1), 10),
	})
	if err != nil {
		return Run{Result: ResultFailed, Reason: err.Error()}
	}
	var r Run
	switch tree.WaitBounded(ctx, bound, termGrace) {
	case proc.EndedAtBound:
		r.Result = ResultTimeout
	case proc.EndedByContext:
		r.Result = ResultStopped
	}
	st := tree.Exit()
	switch {
	case r.Result == ResultTimeout:
		r.Reason = fmt.Sprintf("ran longer than %s: %s", m.opts.Timeout, st)
	case r.Result != "":
	case st.Code == 0 && st.Signal == 0:
		r.Result = ResultOK
	default:
		r.Result, r.Reason = ResultFailed, st.String()
	}
	if said := gitSaid(out.b); said != "" && r.Result != ResultOK {
		r.Reason += ": " + said
	}
	return r
}

// Args are git's arguments for a run: the daemon's git options (no hook,
// no attributes file of HOME's, no submodule recursion), no fsmonitor, and
// of gc only what takes no lock another git waits on: no packed refs
// (packed-refs is read-only to a sandbox, which then could not delete a
// branch of its own, and packing holds packed-refs.lock while it lists
// every ref), no reflog expiry (it holds each ref's lock, a worktree's
// HEAD's while it lists every ref), no worktree pruning (the daemon's to
// do), no commit-graph (no file that every git of the swarm's, the
// sandboxes' too, would read that it did not read before). The thresholds
// are the Maintainer's, and gc stays in the foreground, in its tree.
func (m *Maintainer) Args() []string {
	return append(slices.Clone(worktree.GitOptions),
		"-c", "core.fsmonitor=false",
		"-c", "gc.auto="+strconv.Itoa(m.opts.LooseObjects),
		"-c", "gc.autoPackLimit="+strconv.Itoa(m.opts.Packs),
		"-c", "gc.autoDetach=false",
		"-c", "gc.packRefs=false",
		"-c", "gc.reflogExpire=never", "-c", "gc.reflogExpireUnreachable=never",
		"-c", "gc.worktreePruneExpire=never",
		"-c", "gc.writeCommitGraph=false",
		"--git-dir="+m.opts.GitDir, "gc", "--auto", "--quiet")
}

// lastBytes keeps the last max bytes written to it: why git failed is its
// last line.
type lastBytes struct {
	b   []byte
	max int
}

func (w *lastBytes) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	if over := len(w.b) - w.max; over > 0 {
		w.b = append(w.b[:0], w.b[over:]...)
	}
	return len(p), nil
}

// lastLine is the last non-empty line of out.
// gitSaid is why git failed, from its output: its first error and its last
// line. gc's last line names only the step that failed ("fatal: failed to
// run repack"); the cause is the step's own, earlier ("fatal: bad object
// refs/heads/swarm/a1/work": a branch a running session moved to a commit
// still in its quarantine).
func gitSaid(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	for _, l := range lines[:len(lines)-1] {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "fatal: ") || strings.HasPrefix(l, "error: ") {
			return l + "; " + last
		}
	}
	return last
}
