package merge

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/environ"
	"github.com/swarmd/swarmd/internal/proc"
)

// gateScript runs the gate commands ("$@") in order, each with /bin/sh -c in
// the integration worktree's top directory, and stops at the first that
// fails, saying which. The whole run is one process tree of the daemon's
// Supervisor, so a timeout kills everything the commands started.
const gateScript = `for c in "$@"; do
  printf '$ %s\n' "$c"
  /bin/sh -c "$c"
  s=$?
  if [ "$s" -ne 0 ]; then
    printf '\nswarmd: gate command failed with exit status %d: %s\n' "$s" "$c"
    exit "$s"
  fi
done`

// Limits of what a rejection carries back to the worker.
const (
	tailBytes = 8 << 10
	tailLines = 40
)

// gateRun is how one gate run went.
type gateRun struct {
	exit     proc.ExitStatus
	timedOut bool
	tail     string // the last lines of the output, for the worker
	started  time.Time
	duration time.Duration
}

func (g gateRun) passed() bool { return !g.timedOut && g.exit.Signal == 0 && g.exit.Code == 0 }

// killedOutside reports whether run was killed by something outside the
// queue (Options.Killed: the daemon's lease guard) rather than failing on
// its own: its result says nothing about the candidate.
func (q *Queue) killedOutside(run gateRun) bool {
	return !run.timedOut && run.exit.Signal == syscall.SIGKILL && q.opts.Killed != nil && q.opts.Killed(run.started)
}

// rejection is what a failed run tells the worker: its kind and detail.
func (q *Queue) rejection(run gateRun) (Kind, string) {
	if run.timedOut {
		return KindTimeout, fmt.Sprintf("the gate ran longer than %s and was killed\n%s", q.opts.Timeout, run.tail)
	}
	return KindGateFailed, run.tail
}

// runGate runs the gate in dir as gate run seq on the candidate of a batch,
// es (one entry unless batched, in line: the last one's candidate is the
// whole batch's), logging to logs/merge/<seq>.log like a session. When ctx
// ends first the tree is killed and ctx's error returned.
func (q *Queue) runGate(ctx context.Context, es []*Entry, dir string, seq uint32) (gateRun, error) {
	e := es[len(es)-1]
	id := "merge-" + strconv.FormatUint(uint64(seq), 10)
	q.gateLogs.started(seq)
	defer func() { // after the log's close
		if upTo := q.gateLogs.ended(seq); upTo > 0 && q.opts.GateLogged != nil {
			q.opts.GateLogged(upTo)
		}
	}()
	logf, err := openLog(q.opts.Logs.LogPath(LogName, seq))
	if err != nil {
		return gateRun{}, fmt.Errorf("gate run %d: %w", seq, err)
	}
	defer logf.Close()
	out := &gateOutput{log: logf, tail: make([]byte, 0, 2*tailBytes)}
	started := q.now()
	out.line(fmt.Sprintf("=== swarmd session %s seq %d started %s head %s ===\n", id, seq, started.Format(time.RFC3339), e.Candidate))
	out.line(fmt.Sprintf("swarmd: gate of task %d: %s at %s (agent %s) onto %s at %s, strategy %s, candidate %s, in %s\n",
		e.Task, e.Branch, short(e.Head), e.Agent, q.opts.Into, short(e.Target), q.opts.Strategy, short(e.Candidate), dir))
	if len(es) > 1 {
		out.line(fmt.Sprintf("swarmd: a batch of %d, merged in this order onto %s:\n", len(es), short(e.Target)))
		for _, b := range es {
			out.line(fmt.Sprintf("swarmd:   task %d: %s at %s (agent %s), candidate %s\n", b.Task, b.Branch, short(b.Head), b.Agent, short(b.Candidate)))
		}
	}
	spec := proc.Spec{
		Path:   "/bin/sh",
		Args:   append([]string{"-c", gateScript, "swarmd-gate"}, q.opts.Gate...),
		Dir:    dir,
		Env:    q.gateEnv(es),
		Output: out,
		ID:     id,
	}
	if q.opts.Sandbox != nil {
		// The gate runs code from the branch under test: contained like
		// the session that wrote it.
		argv := q.opts.Sandbox(dir, append([]string{spec.Path}, spec.Args...))
		spec.Path, spec.Args, spec.Wrapped = argv[0], argv[1:], true
	}
	tree, err := q.opts.Procs.Start(spec)
	if err != nil {
		out.line(fmt.Sprintf("=== swarmd session %s seq %d ended %s outcome error: %v ===\n", id, seq, q.now().Format(time.RFC3339), err))
		return gateRun{}, fmt.Errorf("gate run %d: %w", seq, err)
	}
	run, err := q.waitGate(ctx, tree)
	outcome := "success"
	switch {
	case err != nil:
		outcome = "cancelled"
	case run.timedOut:
		outcome = string(KindTimeout)
	case !run.passed():
		outcome = string(KindGateFailed)
	}
	run.started, run.duration = started, q.now().Sub(started)
	run.tail = lastLines(string(out.tail), tailLines)
	out.end(fmt.Sprintf("=== swarmd session %s seq %d ended %s outcome %s: %s ===\n", id, seq, q.now().Format(time.RFC3339), outcome, run.exit))
	if out.err != nil {
		q.log.Warn("gate log incomplete", zap.Uint32("gate_seq", seq), zap.Error(out.err))
	}
	return run, err
}

// waitGate waits for the tree, killing it at the timeout or when ctx ends.
func (q *Queue) waitGate(ctx context.Context, tree *proc.Tree) (gateRun, error) {
	var run gateRun
	var err error
	switch tree.WaitBounded(ctx, q.opts.Timeout, 0) {
	case proc.EndedAtBound:
		run.timedOut = true
	case proc.EndedByContext:
		err = ctx.Err()
	}
	run.exit = tree.Exit()
	if run.timedOut && run.exit.Signal == 0 {
		run.timedOut = false // it ended on its own just in time
	}
	return run, err
}

// gateEnv is the gate's environment: Options.Env (the daemon's when nil)
// and what the gate may want to know about the candidate. For a batch the
// task's variables are its last entry's (whose candidate is the batch's),
// and SWARM_MERGE_TASKS lists every task in it.
func (q *Queue) gateEnv(es []*Entry) []string {
	base := q.opts.Env
	if base == nil {
		base = os.Environ()
	}
	e := es[len(es)-1]
	tasks := make([]string, len(es))
	for i, b := range es {
		tasks[i] = strconv.FormatInt(b.Task, 10)
	}
	return environ.Build("", base, []string{
		"SWARM_MERGE_TASKS=" + strings.Join(tasks, " "),
		"SWARM_MERGE_TASK=" + strconv.FormatInt(e.Task, 10),
		"SWARM_MERGE_AGENT=" + e.Agent,
		"SWARM_MERGE_BRANCH=" + e.Branch,
		"SWARM_MERGE_HEAD=" + e.Head,
		"SWARM_MERGE_INTO=" + q.opts.Into,
		"SWARM_MERGE_TARGET=" + e.Target,
		"SWARM_MERGE_CANDIDATE=" + e.Candidate,
	})
}

func openLog(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("log directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	return f, nil
}

// gateOutput writes the tree's output to the log and keeps its tail. The
// tree calls Write from one goroutine; line and end are called before the
// tree starts and after it is done.
type gateOutput struct {
	log         *os.File
	err         error // the first log write error; the tail is kept anyway
	tail        []byte
	atLineStart bool
}

func (o *gateOutput) Write(p []byte) (int, error) {
	if o.err == nil {
		_, o.err = o.log.Write(p)
	}
	o.tail = append(o.tail, p...)
	if len(o.tail) > 2*tailBytes {
		o.tail = append(o.tail[:0], o.tail[len(o.tail)-tailBytes:]...)
	}
	if len(p) > 0 {
		o.atLineStart = p[len(p)-1] == '\n'
	}
	return len(p), nil
}

// line writes one of swarmd's own lines to the log only.
func (o *gateOutput) line(s string) {
	if o.err == nil {
		_, o.err = o.log.WriteString(s)
	}
	o.atLineStart = true
}

// end writes the footer on a line of its own.
func (o *gateOutput) end(s string) {
	if !o.atLineStart && len(o.tail) > 0 {
		s = "\n" + s
	}
	o.line(s)
}

// lastLines is the last n lines of s (at most tailBytes), as valid UTF-8.
func lastLines(s string, n int) string {
	if len(s) > tailBytes {
		s = s[len(s)-tailBytes:]
		for len(s) > 0 && !utf8.RuneStart(s[0]) {
			s = s[1:]
		}
	}
	s = strings.TrimRight(s, "\n")
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.ToValidUTF8(strings.Join(lines, "\n"), "")
}

// gateLogs knows which gate runs are writing their logs: a run ahead
// (merge.parallel: 2) runs beside the one it is ahead of, and may end first.
type gateLogs struct {
	mu       sync.Mutex
	running  []uint32
	last     uint32 // the highest seq ended
	reported uint32 // the highest seq returned by ended
}

func (g *gateLogs) started(seq uint32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running = append(g.running, seq)
}

// ended records the end of run seq and returns the highest seq up to
// which every run has ended, when that is news; 0 otherwise.
func (g *gateLogs) ended(seq uint32) uint32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running = slices.DeleteFunc(g.running, func(s uint32) bool { return s == seq })
	g.last = max(g.last, seq)
	upTo := g.last
	for _, s := range g.running {
		if s <= upTo {
			upTo = s - 1
		}
	}
	if upTo <= g.reported {
		return 0
	}
	g.reported = upTo
	return upTo
}
