package backend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/swarmd/swarmd/internal/environ"
	"github.com/swarmd/swarmd/internal/proc"
)

// fatalGrace is how long a session that showed a fatal error gets to exit
// after the cancel signal before it is killed: the agent CLIs exit within
// ~0.2 s of SIGINT, and one that is only retrying has nothing to save.
const fatalGrace = time.Second

// launch is what a backend decides about one session; startSession does the rest.
type launch struct {
	path      string
	args      []string
	env       []string // the backend's own env, under Spec.Env
	cancelSig syscall.Signal
	parser    StreamParser // nil: exit code 0 is success
	// tail keeps the last TailBytes of output as the result text, for
	// backends with no result record of their own (command, scripted).
	tail bool
	// turnsByCLI: the CLI enforces Spec.MaxTurns itself (a flag); swarmd's
	// count only backs it up.
	turnsByCLI bool
	// removeFile is removed when the session ends (a policy file written
	// for it).
	removeFile string
}

// session implements Session for every backend.
type session struct {
	id        string
	seq       uint32
	tree      *proc.Tree // nil if the binary could not be started
	cancelSig syscall.Signal
	parser    StreamParser
	reporter  Reporter // parser, if it is one
	tools     ToolPolicy
	maxTurns  int
	byCLI     bool     // the CLI enforces maxTurns itself
	log       *os.File // nil when Spec.LogPath is ""
	logErr    error    // the first failed write to log; nothing more is written then
	maxLog    int64    // Spec.MaxLogBytes
	out       *sessionOutput
	started   time.Time

	lastOut   atomic.Int64 // unix nanoseconds
	cancelled atomic.Bool
	forced    atomic.Bool
	frozen    atomic.Bool // Freeze stopped the tree and no Thaw has run since
	turnsHit  atomic.Bool // swarmd's count reached maxTurns
	fatalSeen bool        // owned by the output goroutine
	// ready is closed once tree is set: output, and the tree's end, may
	// come before Start has returned.
	ready chan struct{}
	// killT force-stops a session cancelled for a fatal error, its turn
	// limit or a refused call that has not exited within fatalGrace. Owned by
	// the output goroutine, then by the tree's (finish).
	killT *time.Timer
	// Owned by the output goroutine (read by classify once it is done).
	denied     *ToolDenial
	onProgress func(Progress)
	progress   Progress // the last one told to onProgress
	removeFile string

	done   chan struct{}
	result Result
}

// checkSpec refuses what no session can start with.
func checkSpec(ctx context.Context, spec Spec) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("backend: start session %s: %w", spec.SessionID, err)
	}
	if spec.SessionID == "" {
		return fmt.Errorf("%w: empty session id", ErrInvalidSpec)
	}
	if spec.Dir != "" {
		if fi, err := os.Stat(spec.Dir); err != nil {
			return fmt.Errorf("backend: start session %s: working directory: %w", spec.SessionID, err)
		} else if !fi.IsDir() {
			return fmt.Errorf("%w: working directory %s is not a directory", ErrInvalidSpec, spec.Dir)
		}
	}
	return nil
}

// startFailed ends a session whose process did not start. A binary that is
// missing or not executable: no session started, so the runner counts a
// spawn failure (counters move, the prompt's mail goes back to pending).
// The log still says why.
func (s *session) startFailed(spec Spec, l launch, err error) error {
	switch {
	case errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist):
		s.end(Result{Outcome: OutcomeError, Reason: "binary not found: " + l.path, ExitCode: 127})
		return fmt.Errorf("%w: %s", ErrBinaryNotFound, l.path)
	case errors.Is(err, fs.ErrPermission):
		s.end(Result{Outcome: OutcomeError, Reason: "permission denied: " + l.path, ExitCode: 126,
			AbortReason: AbortPermissionDenied})
		return fmt.Errorf("%w: %s", ErrNotExecutable, l.path)
	}
	if s.log != nil {
		s.log.Close()
	}
	return fmt.Errorf("backend: start session %s: %w", spec.SessionID, err)
}

func startSession(ctx context.Context, sup *proc.Supervisor, spec Spec, l launch) (Session, error) {
	if err := checkSpec(ctx, spec); err != nil {
		return nil, err
	}
	s := &session{
		id:        spec.SessionID,
		seq:       spec.Seq,
		cancelSig: l.cancelSig,
		parser:    l.parser,
		ready:     make(chan struct{}),
		tools:     spec.Tools,
		maxTurns:  spec.MaxTurns,
		byCLI:     l.turnsByCLI,
		maxLog:    spec.MaxLogBytes,
		done:      make(chan struct{}),

		onProgress: spec.OnProgress,
		removeFile: l.removeFile,
	}
	if spec.LogPath != "" {
		f, err := openLog(spec.LogPath)
		if err != nil {
			return nil, fmt.Errorf("backend: start session %s: %w", spec.SessionID, err)
		}
		s.log = f
	}
	s.started = time.Now()
	s.lastOut.Store(s.started.UnixNano())
	header := fmt.Sprintf("=== swarmd session %s seq %d started %s", s.id, s.seq, s.started.Format(time.RFC3339))
	if spec.HeadBefore != "" {
		header += " head " + spec.HeadBefore
	}
	s.logLine(header + " ===\n")

	out := &sessionOutput{s: s, atLineStart: true, keepTail: l.tail}
	if l.parser != nil {
		s.reporter, _ = l.parser.(Reporter)
		if s.reporter != nil && spec.OnTool != nil {
			s.reporter.OnTool(spec.OnTool)
		}
		if s.reporter != nil && !s.tools.Empty() {
			s.reporter.OnToolStart(s.toolStarted)
		}
		out.lines = NewLineSplitter(0, s.line)
	}
	s.out = out
	ps := proc.Spec{
		Path:      l.path,
		Args:      l.args,
		Dir:       spec.Dir,
		Env:       environ.Build(spec.PathPrepend, os.Environ(), spec.Defaults, l.env, spec.Env),
		Stdin:     strings.NewReader(spec.Prompt),
		Output:    out,
		ID:        spec.SessionID,
		OnDone:    s.finish,
		MemoryMax: spec.MemoryMax,
	}
	if spec.Sandbox != nil {
		// Found here, so that a missing binary is still "binary not found"
		// and not the wrapper's failure inside.
		path, err := proc.LookPath(l.path, ps.Env)
		if err == nil {
			_, err = os.Stat(path)
		}
		if err != nil {
			return nil, s.startFailed(spec, l, err)
		}
		var files []string
		if l.removeFile != "" {
			files = []string{l.removeFile}
		}
		argv := spec.Sandbox(append([]string{path}, l.args...), files)
		ps.Path, ps.Args, ps.Wrapped = argv[0], argv[1:], true
	}
	tree, err := sup.Start(ps)
	if err != nil {
		return nil, s.startFailed(spec, l, err)
	}
	s.tree = tree
	close(s.ready)
	return s, nil
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

// logLine writes a header or footer; a log that cannot be written must not
// stop the session.
func (s *session) logLine(line string) {
	s.writeLog([]byte(line))
}

// writeLog appends to the log until a write fails: the first error is kept
// for the Result (a full disk makes the session an error), and later
// writes are not attempted.
func (s *session) writeLog(p []byte) {
	if s.log == nil || s.logErr != nil || len(p) == 0 {
		return
	}
	if _, err := s.log.Write(p); err != nil {
		s.logErr = fmt.Errorf("write session log %s: %w", s.log.Name(), err)
	}
}

func (s *session) ID() string { return s.id }

func (s *session) Pid() int {
	if s.tree == nil {
		return 0
	}
	return s.tree.Pid()
}

func (s *session) Done() <-chan struct{} { return s.done }

func (s *session) Result() Result {
	select {
	case <-s.done:
		return s.result
	default:
		return Result{}
	}
}

func (s *session) LastOutput() time.Time { return time.Unix(0, s.lastOut.Load()) }

func (s *session) Cancel() error {
	if s.tree == nil {
		return nil
	}
	s.cancelled.Store(true)
	err := ignoreDone(s.tree.Signal(s.cancelSig))
	// A frozen tree would keep the signal pending: thaw it to act on it.
	if s.frozen.Load() {
		_, terr := s.Thaw()
		err = errors.Join(err, terr)
	}
	return err
}

// Freeze stops every process of the session's tree (SIGSTOP) and returns
// how many; Thaw continues them. After the session has ended both return 0
// and nil.
func (s *session) Freeze() (int, error) {
	if s.tree == nil {
		return 0, nil
	}
	s.frozen.Store(true)
	n, err := s.tree.Freeze()
	return n, ignoreDone(err)
}

func (s *session) Thaw() (int, error) {
	if s.tree == nil {
		return 0, nil
	}
	n, err := s.tree.Thaw()
	s.frozen.Store(false)
	return n, ignoreDone(err)
}

func (s *session) ForceStop() error {
	if s.tree == nil {
		return nil
	}
	s.forced.Store(true)
	return ignoreDone(s.tree.Kill())
}

func ignoreDone(err error) error {
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// line feeds the parser, and stops the session (stopSoon) once the output
// shows an error that no retry can fix.
func (s *session) line(b []byte) {
	s.parser.Line(b)
	if s.reporter == nil {
		return
	}
	if !s.fatalSeen && s.reporter.Fatal() != "" {
		s.fatalSeen = true
		s.stopSoon(func() error { return s.tree.Signal(s.cancelSig) })
	}
	if s.maxTurns > 0 && !s.turnsHit.Load() && s.overTurns() {
		s.turnsHit.Store(true)
		s.stopSoon(s.Cancel)
	}
	if s.onProgress != nil {
		if p := s.reporter.Progress(); p != s.progress {
			s.progress = p
			s.onProgress(p)
		}
	}
}

// toolStarted cancels the session (stopSoon) at the first call that
// the tools policy refuses: swarmd's own check, whatever the CLI did.
func (s *session) toolStarted(c ToolCall) {
	if s.denied != nil {
		return
	}
	if d, refused := s.tools.Check(c.Name, c.Input); refused {
		s.denied = &d
		s.stopSoon(s.Cancel)
	}
}

// overTurns reports whether the session has used its turns: a turn past
// the limit has begun, or (when swarmd is the one counting) the last
// allowed turn's tool calls have all ended, so the CLI is asking the model
// for one more. A CLI that enforces the limit itself stops there on its own
// and keeps its result record; only a turn past the limit is cut off.
func (s *session) overTurns() bool {
	n, settled := s.reporter.Turns()
	return n > s.maxTurns || !s.byCLI && n == s.maxTurns && settled
}

// stopSoon stops a session whose output showed a fatal error, that reached
// its turn limit or made a call the tools policy refuses: stop (the cancel
// signal) now, SIGKILL if the session has not exited within fatalGrace. It
// runs in the output goroutine, which the parser calls from.
func (s *session) stopSoon(stop func() error) {
	<-s.ready
	_ = stop()
	if s.killT == nil {
		s.killT = time.AfterFunc(fatalGrace, func() { _ = s.tree.Kill() })
	}
}

// finish ends the session once its tree has ended (proc.Spec.OnDone): in
// the tree's goroutine, so a running session has no goroutine of its own
// waiting for the end.
func (s *session) finish() {
	<-s.ready
	if s.out.lines != nil {
		s.out.lines.Flush() // a last line without a newline
	}
	if s.killT != nil {
		s.killT.Stop()
	}
	s.end(cgroupFacts(s.classify(), s.tree.Exit()))
}

// cgroupFacts adds what the session's cgroup says: its CPU time, and an
// OOM kill for its memory limit, which is then why it ended.
func cgroupFacts(r Result, st proc.ExitStatus) Result {
	r.CPU = st.CPU
	if st.OOMKills > 0 {
		r.OOMKilled = true
		if r.Outcome != OutcomeSuccess {
			r.AbortReason = AbortOOMKilled
			r.Reason += fmt.Sprintf(" (oom_killed: the kernel killed %d process(es) over the agent's memory_max)", st.OOMKills)
		}
	}
	return r
}

// classify turns the leader's exit, the parser's verdict and what we did to
// the session into a Result.
func (s *session) classify() Result {
	st := s.tree.Exit()
	r := Result{ExitCode: st.Code}
	if st.Signal != 0 {
		r.Signal = proc.SignalName(st.Signal)
	}
	success, detail := true, ""
	if s.reporter != nil {
		s.reporter.Exit(st.Code)
	}
	if s.parser != nil {
		success, detail = s.parser.Verdict()
	}
	if s.reporter != nil {
		s.reporter.Report(&r)
	}
	if r.Text == "" && s.out.keepTail {
		r.Text = s.out.tailText()
	}
	cancelled, forced := s.cancelled.Load(), s.forced.Load()
	switch {
	case r.Fatal != "":
		// Whatever the exit, it came from our stop or the CLI giving up.
		r.Outcome, r.Reason = OutcomeError, "fatal: "+r.Fatal
		return r
	case s.denied != nil:
		r.Outcome, r.AbortReason, r.Denied = OutcomeError, AbortPermissionDenied, s.denied
		r.Reason = "permission_denied: tool " + s.denied.String()
		return r
	case s.turnsHit.Load() || r.TurnLimit:
		r.Outcome, r.AbortReason = OutcomeError, AbortMaxTurns
		r.Reason = "max_turns: stopped after " + plural(r.Turns, "turn")
		if s.maxTurns > 0 {
			r.Reason += " (limit " + strconv.Itoa(s.maxTurns) + ")"
		}
		return r
	case st.Signal != 0:
		r.Outcome, r.Reason = OutcomeError, st.String()
		switch {
		case forced && st.Signal == syscall.SIGKILL:
			r.Reason += " (force stop)"
		case cancelled && st.Signal == s.cancelSig:
			r.Reason += " (cancelled)"
		}
	case st.Code != 0:
		r.Outcome, r.Reason = OutcomeError, st.String()
		if detail != "" {
			r.Reason += ": " + detail
		}
	case !success:
		r.Outcome, r.Reason = OutcomeError, "exit 0 without a success record"
		if detail != "" {
			r.Reason = "exit 0: " + detail
		}
	default:
		r.Outcome, r.Reason = OutcomeSuccess, st.String()
		// The CLI's own retries got through.
		r.RateLimited, r.RetryAfter, r.ProviderError = false, time.Time{}, ""
		return r
	}
	r.AbortReason = AbortReasonFor(st.Code, st.Signal)
	if forced && st.Signal == syscall.SIGKILL {
		r.AbortReason = "" // our SIGKILL, not the OOM killer's
	}
	if r.AbortReason == "" {
		switch {
		case cancelled:
			r.AbortReason = abortForSignal(s.cancelSig)
		case forced:
			r.AbortReason = AbortUnknown
		}
	}
	return r
}

// end records the result, writes the footer and closes the log.
func (s *session) end(r Result) {
	r.Started, r.Ended = s.started, time.Now()
	if s.out != nil {
		s.out.flushHeld()
	}
	if s.out != nil && s.out.dropped > 0 {
		r.LogDropped = s.out.dropped
		nl := ""
		if !s.out.atLineStart {
			nl = "\n"
		}
		s.logLine(fmt.Sprintf("%s[swarmd: dropped %d bytes of output over logs.max_session_bytes (%d)]\n", nl, s.out.dropped, s.maxLog))
	}
	if IsDiskFull(s.logErr) {
		diskFull(&r, s.logErr)
	}
	// One line: the reason may quote the session's output, and a line
	// break in it would start a line of the session's choosing.
	footer := fmt.Sprintf("=== swarmd session %s seq %d ended %s outcome %s: %s", s.id, s.seq,
		r.Ended.Format(time.RFC3339), r.Outcome, strings.NewReplacer("\n", " ", "\r", " ").Replace(r.Reason))
	if r.AbortReason != "" {
		footer += " (abort reason " + r.AbortReason + ")"
	}
	s.logLine(footer + " ===\n")
	if s.log != nil {
		s.log.Close()
	}
	if s.removeFile != "" {
		os.Remove(s.removeFile)
	}
	s.result = r
	close(s.done)
}

// sessionOutput receives the tree's output from proc's copy goroutine.
type sessionOutput struct {
	s           *session
	lines       *LineSplitter // nil without a parser
	keepTail    bool          // launch.tail: keep the last output bytes in tail
	tail        []byte        // grown as output comes: a quiet session holds none
	written     int64         // output bytes written to the log
	dropped     int64         // output bytes over Spec.MaxLogBytes, not written
	atLineStart bool          // the last byte written was a newline (or none was)
	// held is the start of a line of the session's that may be the start
	// of swarmd's own framing (logFraming), not written yet.
	held []byte
	esc  []byte        // scratch for logOut
	owed time.Duration // pacing past the log's cap not slept yet (pace)
}

// overCapRate is how fast a session's output is read once its log is full
// (logs.max_session_bytes): parsing goes on past the cap, and it costs the
// daemon's CPU, outside the session's cgroup, for output that costs the
// session next to nothing (`yes` writes 64 KiB a system call). Read no
// faster, the session's writes block, and a session cannot keep the daemon
// busy by printing.
const overCapRate = 1 << 20 // bytes a second

// pace sleeps for n bytes read past the cap, at overCapRate, in sleeps of
// 10 ms or more.
func (o *sessionOutput) pace(n int) {
	o.owed += time.Duration(n) * time.Second / overCapRate
	if o.owed >= 10*time.Millisecond {
		time.Sleep(o.owed)
		o.owed = 0
	}
}

// logFraming starts every line swarmd writes into a session's log (its
// header, footer and outcome record, which a restart reads back); a line
// of the session's output that starts so is written with a space before
// it, so that what the session prints is never taken for swarmd's.
const logFraming = "=== swarmd "

var logFramingBytes = []byte(logFraming) // for comparisons on the output's path, with no copy

// logOut writes p, output of the session's, to its log, framing escaped.
func (o *sessionOutput) logOut(p []byte) {
	data := p
	if len(o.held) > 0 {
		data = append(o.held, p...)
		o.held = nil
	}
	buf := o.esc[:0]
	atStart := o.atLineStart || len(data) > len(p) // held bytes began a line
	for len(data) > 0 {
		if atStart {
			switch {
			case len(data) < len(logFraming) && bytes.HasPrefix(logFramingBytes, data):
				o.held = append(o.held[:0], data...) // the framing, maybe, cut short
				data = nil
				continue
			case bytes.HasPrefix(data, logFramingBytes):
				buf = append(buf, ' ')
			}
		}
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			buf, data, atStart = append(buf, data...), nil, false
			break
		}
		buf, data, atStart = append(buf, data[:i+1]...), data[i+1:], true
	}
	o.esc = buf
	if len(buf) > 0 {
		o.s.writeLog(buf)
	}
}

// flushHeld writes what logOut held back: the session has ended.
func (o *sessionOutput) flushHeld() {
	if len(o.held) > 0 {
		o.s.writeLog(o.held)
		o.held = nil
	}
}

func (o *sessionOutput) Write(p []byte) (int, error) {
	o.s.lastOut.Store(time.Now().UnixNano())
	keep := p
	if limit := o.s.maxLog; limit > 0 && o.written+int64(len(p)) > limit {
		keep = p[:max(limit-o.written, 0)]
		o.dropped += int64(len(p) - len(keep))
		defer o.pace(len(p) - len(keep)) // after this chunk's parsing
	}
	if len(keep) > 0 {
		o.logOut(keep)
		o.written += int64(len(keep))
		o.atLineStart = keep[len(keep)-1] == '\n'
	}
	// Parsing goes on past the cap: the result record and the usage come
	// last, and a session whose log was cut must still be classified.
	if o.lines != nil {
		_, _ = o.lines.Write(p)
	}
	if o.keepTail {
		if len(o.tail)+len(p) > 2*TailBytes {
			keep := max(TailBytes-len(p), 0)
			o.tail = append(o.tail[:0], o.tail[len(o.tail)-min(keep, len(o.tail)):]...)
			p = p[max(len(p)-TailBytes, 0):]
		}
		o.tail = append(o.tail, p...)
	}
	return len(p), nil
}

// TailBytes is how much of a command or scripted session's output, from its
// end, becomes its result text: the done and fail signals are looked for on
// its last line, and a bound keeps a chatty command from costing memory.
const TailBytes = 4 << 10

// tailText is the output's tail without the result record a scripted
// session prints last, cut at a line start.
func (o *sessionOutput) tailText() string {
	t := o.tail
	if len(t) >= TailBytes {
		t = t[len(t)-TailBytes:]
		if i := bytes.IndexByte(t, '\n'); i >= 0 {
			t = t[i+1:]
		}
	}
	lines := bytes.Split(bytes.TrimRight(t, "\n"), []byte("\n"))
	for len(lines) > 0 && bytes.HasPrefix(bytes.TrimSpace(lines[len(lines)-1]), []byte(`{"type":"result"`)) {
		lines = lines[:len(lines)-1]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// IsDiskFull reports whether err comes from a full disk or an exhausted
// quota: the agent that hit it can retry later; nothing is wrong with it.
func IsDiskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// diskFull makes a session whose log could not be written an error: its
// output is lost, and the agent should back off until there is room.
func diskFull(r *Result, err error) {
	r.DiskFull = err.Error()
	if r.Outcome == OutcomeSuccess {
		r.Outcome, r.Reason = OutcomeError, "disk full: "+err.Error()+" (the session itself exited 0)"
		return
	}
	r.Reason += "; disk full: " + err.Error()
}
