package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// The chaos tests run a real swarm (real daemons, real git, real sessions
// that commit, report their tasks and mail each other with the swarmd CLI)
// through a backlog while faults land at random moments: kill -9 of a
// daemon and its restart, SIGSTOP and SIGCONT of a daemon (on PostgreSQL
// sometimes past lease_timeout), SIGTERM and a restart, and on PostgreSQL
// `pg_ctl restart -m immediate` of the server. Then the swarm drains and
// the promises are checked from the store's tables, the git repository and
// /proc (check): every session one row, settled or orphaned, never both,
// its transitions logged once; every task DONE once by a session shown it,
// CLOSED and merged once; every message delivered once, by a completed
// session shown it, shown to no other completed session; no agent stopped
// for good; nothing of the swarm left running.
//
// SWARMD_CHAOS_SEED sets the seed (the log prints it; a failure names it):
// it decides the backlog, the mail and the faults, their kinds and
// moments; what the processes make of them still varies from run to run.
// SWARMD_CHAOS_FAULTS how long faults are injected (default 20s): the
// run takes about that plus the drain, well under a minute in all;
// SWARMD_CHAOS_KEEP=DIR copies a failed run's logs there.

// chaosScript is every agent's session. It keeps its prompt (what it was
// shown: its task, its mail) in $SEEN/<session>.prompt, works a random
// moment, and on a task: appends its session to t<N>.txt and commits it,
// mails a peer now and then (each message's body a unique token, the
// command's exit status kept in $SEEN/<session>.mail), reports the task
// done with `swarmd task done` and says DONE.
const chaosScript = `p=$(cat)
printf '%s\n' "$p" > "$SEEN/$SWARM_SESSION_ID.prompt"
r() { od -An -N1 -tu1 /dev/urandom | tr -d ' \n'; }
sleep "0.$(r)"
n=$(printf '%s\n' "$p" | sed -n -E 's/^(Your task: #|Continue your task #)([0-9]+).*/\2/p' | head -1)
if [ -z "$n" ]; then echo DONE; exit 0; fi
echo "$SWARM_SESSION_ID" >> "t$n.txt"
git add "t$n.txt" && git commit -q -m "task $n by $SWARM_SESSION_ID" || exit 1
k=$(r)
if [ $((k % 3)) -eq 0 ]; then
  set -- $PEERS; shift $((k % $#)); u=""
  if [ $((k % 2)) -eq 0 ]; then u=--urgent; fi
  tok="mail-$SWARM_SESSION_ID-$n"
  swarmd mail send --to "$1" $u --subject "about $n" "$tok" > /dev/null 2>&1
  echo "$tok $?" >> "$SEEN/$SWARM_SESSION_ID.mail"
fi
sleep "0.$(r)"
swarmd task done --summary "task $n" > /dev/null 2>&1
echo "task $n $?" >> "$SEEN/$SWARM_SESSION_ID.done"
echo DONE
`

// chaosRun is one chaos run: its daemons, its faults, what it checks.
type chaosRun struct {
	t      *testing.T
	t0     time.Time // the run's start, for the log's times
	rng    *rand.Rand
	seed   uint64
	dir    string // the run's directory: the seen dir, the daemons' logs
	seen   string
	dbURL  string // the store: swarm.db's path or a postgres:// URL
	remote string // the bare repository merges reach ("": the one repository's main)
	ds     []*chaosDaemon
	tasks  []int64 // the backlog's ids (PostgreSQL's sequences skip some after a crash)
	faults map[string]int
	mail   map[string]bool // the test's messages by body: whether its send said it was sent
	adds   int             // task adds attempted
	// outcomes is the outcome record each session log had when its daemon
	// last stopped (the next start archives the logs), by the log's path.
	outcomes map[string][]byte
}

// chaosDaemon is one daemon of the run, restarted by the run as systemd
// would.
type chaosDaemon struct {
	name, cfg, repo, stateDir, logPath string
	cmd                                *exec.Cmd
	done                               chan struct{}
	starts                             int
}

func chaosSeed(t *testing.T) uint64 {
	if s := os.Getenv("SWARMD_CHAOS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SWARMD_CHAOS_SEED=%q: %v", s, err)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

func chaosFaultsFor() time.Duration {
	if s := os.Getenv("SWARMD_CHAOS_FAULTS"); s != "" {
		if d, err := time.ParseDuration(s); err == nil {
			return d
		}
	}
	return 20 * time.Second
}

func newChaosRun(t *testing.T) *chaosRun {
	seed := chaosSeed(t)
	t.Logf("chaos seed %d (SWARMD_CHAOS_SEED=%d reruns it)", seed, seed)
	dir := t.TempDir()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		t.Logf("chaos seed was %d", seed)
		if keep := os.Getenv("SWARMD_CHAOS_KEEP"); keep != "" {
			// The daemons' logs and what the sessions kept, for a look.
			_ = os.MkdirAll(keep, 0o755)
			if out, err := exec.Command("cp", "-a", dir, filepath.Join(keep, fmt.Sprintf("%s-%d", t.Name(), seed))).CombinedOutput(); err != nil {
				t.Logf("keep the run: %v %s", err, out)
			}
		}
	})
	c := &chaosRun{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), seed: seed, dir: dir,
		seen: filepath.Join(dir, "seen"), faults: map[string]int{}, outcomes: map[string][]byte{}, mail: map[string]bool{}}
	if err := os.Mkdir(c.seen, 0o755); err != nil {
		t.Fatal(err)
	}
	return c
}

// config writes a daemon's swarmd.yaml: agents on the chaos script, each
// peer of every agent in peers, with extra (store, lease, remote) added.
func (c *chaosRun) config(repo string, agents, peers []string, extra string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `listen: ""
sandbox: {writable: [%[1]q]}
%[3]s
merge: {into: main, gate: ["true"]}
defaults:
  backend: work
  min_session_interval: 0s
  grace_period: 1s
  env: {SEEN: %[1]q, PEERS: %[2]q}
backends:
  work: {type: command, command: sh, args: [-c, %[4]q]}
agents:
`, c.seen, strings.Join(peers, " "), extra, chaosScript)
	for _, a := range agents {
		fmt.Fprintf(&b, "  - {name: %s, role: works}\n", a)
	}
	return writeConfig(c.t, repo, b.String())
}

func (c *chaosRun) addDaemon(name, repo, cfg string) *chaosDaemon {
	d := &chaosDaemon{name: name, cfg: cfg, repo: repo, stateDir: filepath.Join(repo, ".swarm"),
		logPath: filepath.Join(c.dir, name+".log")}
	c.ds = append(c.ds, d)
	c.start(d)
	c.t.Cleanup(func() {
		if d.cmd != nil && d.running() {
			_ = d.cmd.Process.Signal(syscall.SIGCONT)
			_ = d.cmd.Process.Kill()
			<-d.done
		}
		killTreeProcesses(d.stateDir)
	})
	return d
}

func (d *chaosDaemon) running() bool {
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

func (c *chaosRun) start(d *chaosDaemon) {
	c.t.Helper()
	f, err := os.OpenFile(d.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	fmt.Fprintf(f, "=== chaos: start %d\n", d.starts)
	cmd := exec.Command(swarmdBin, "run", "--config", d.cfg, "--log-format", "json", "--log-level", "debug")
	cmd.Dir = d.repo
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	d.cmd, d.done = cmd, make(chan struct{})
	d.starts++
	done := d.done
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
}

// wait waits for d's daemon to exit; false after limit.
func (d *chaosDaemon) wait(limit time.Duration) bool {
	select {
	case <-d.done:
		return true
	case <-time.After(limit):
		return false
	}
}

func (c *chaosRun) logTail(d *chaosDaemon, n int) string {
	b, _ := os.ReadFile(d.logPath)
	lines := strings.Split(string(b), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// alive restarts, as systemd's Restart=on-failure does, a daemon that
// failed during its start (exit 1 before "swarmd running": its store away
// for the moment, say), and fails the test for any other exit no fault
// made.
func (c *chaosRun) alive() {
	c.t.Helper()
	for _, d := range c.ds {
		if d.running() {
			continue
		}
		if d.cmd.ProcessState.ExitCode() == 1 && !c.ranSince(d) && c.faults["start-failed"] < 5 {
			c.faults["start-failed"]++
			c.t.Logf("%6.1fs %s failed during its start; restarted: %s", time.Since(c.t0).Seconds(), d.name, c.logTail(d, 2))
			c.start(d)
			continue
		}
		c.t.Fatalf("seed %d: %s exited by itself (%v); log tail:\n%s", c.seed, d.name, d.cmd.ProcessState, c.logTail(d, 40))
	}
}

// termBeforeStart reports whether d's daemon was ended by SIGTERM before
// it wrote anything to its log since its last start.
func (c *chaosRun) termBeforeStart(d *chaosDaemon) bool {
	ws, ok := d.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		return false
	}
	b, _ := os.ReadFile(d.logPath)
	i := bytes.LastIndex(b, []byte("=== chaos: start"))
	if i < 0 {
		return false
	}
	_, rest, _ := bytes.Cut(b[i:], []byte("\n"))
	return len(bytes.TrimSpace(rest)) == 0
}

// ranSince reports whether d's log says it was running since its last
// start.
func (c *chaosRun) ranSince(d *chaosDaemon) bool {
	b, _ := os.ReadFile(d.logPath)
	i := bytes.LastIndex(b, []byte("=== chaos: start"))
	return i >= 0 && bytes.Contains(b[i:], []byte(`"msg":"swarmd running"`))
}

// between is a random duration in [lo, hi).
func (c *chaosRun) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(c.rng.Int64N(int64(hi-lo)))
}

// fault is one random fault on one daemon (or the server, restartStore not
// nil), injected and recovered from before it returns.
func (c *chaosRun) fault(restartStore func(down time.Duration) error, leaseTimeout time.Duration) {
	c.t.Helper()
	d := c.ds[c.rng.IntN(len(c.ds))]
	kinds := []string{"kill", "kill", "stop", "stop", "term"}
	if restartStore != nil {
		kinds = append(kinds, "pg-restart", "stop-past-lease")
	}
	kind := kinds[c.rng.IntN(len(kinds))]
	c.faults[kind]++
	c.t.Logf("%6.1fs fault %s on %s", time.Since(c.t0).Seconds(), kind, map[bool]string{true: "the server", false: d.name}[kind == "pg-restart"])
	switch kind {
	case "kill":
		_ = d.cmd.Process.Signal(syscall.SIGKILL)
		if !d.wait(10 * time.Second) {
			c.t.Fatalf("seed %d: %s still running 10s after SIGKILL", c.seed, d.name)
		}
		c.snapshot(d)
		time.Sleep(c.between(0, time.Second)) // a random moment before systemd restarts it
		c.start(d)
	case "stop", "stop-past-lease":
		_ = d.cmd.Process.Signal(syscall.SIGSTOP)
		if kind == "stop" {
			time.Sleep(c.between(100*time.Millisecond, 1500*time.Millisecond))
		} else {
			time.Sleep(c.between(leaseTimeout+500*time.Millisecond, 2*leaseTimeout))
		}
		_ = d.cmd.Process.Signal(syscall.SIGCONT)
	case "term":
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		if !d.wait(30 * time.Second) {
			c.t.Fatalf("seed %d: %s still running 30s after SIGTERM; log tail:\n%s", c.seed, d.name, c.logTail(d, 60))
		}
		if code := d.cmd.ProcessState.ExitCode(); code != 0 && c.termBeforeStart(d) {
			// The kernel's default: the signal came before the daemon
			// caught signals (its first log line comes after), a few ms
			// after its exec, which left nothing started.
			c.t.Logf("%6.1fs %s ended by SIGTERM before it caught signals (nothing logged since its start)", time.Since(c.t0).Seconds(), d.name)
		} else if code != 0 {
			c.t.Errorf("seed %d: %s exited %d (%v) after SIGTERM; log tail:\n%s", c.seed, d.name, code, d.cmd.ProcessState, c.logTail(d, 40))
		}
		c.snapshot(d)
		c.start(d)
	case "pg-restart":
		if err := restartStore(c.between(200*time.Millisecond, 3*time.Second)); err != nil {
			c.t.Fatalf("restart the server: %v", err)
		}
	}
}

// run adds the backlog, sends mail and injects faults for the fault
// phase, then lets the swarm drain, stops it and checks it.
func (c *chaosRun) run(ctx context.Context, agents []string, restartStore func(time.Duration) error, leaseTimeout time.Duration) {
	t := c.t
	c.t0 = time.Now()
	db := chaosOpen(t, c.dbURL)
	defer db.Close()
	mb, err := mailbox.New(ctx, db, mailbox.Options{Agents: agents})
	if err != nil {
		t.Fatal(err)
	}
	board := taskboard.New(db, taskboard.Options{})
	addTask := func() {
		c.adds++
		// Retries beyond what the faults can use up: a task whose sessions
		// the faults cut off (each a restart's orphan, a retry) more than 3
		// times would fail by the retry policy, which is not what this
		// run checks.
		tk, err := board.Add(ctx, taskboard.NewTask{Title: fmt.Sprintf("chaos work %d", c.adds), MaxRetries: 1000})
		if err != nil {
			t.Logf("add a task (the store may be restarting): %v", err)
			return
		}
		c.tasks = append(c.tasks, tk.ID)
	}
	for range 8 {
		addTask()
	}
	// Faults and mail for the fault phase.
	phase := chaosFaultsFor()
	end := time.Now().Add(phase)
	nextMail := time.Now()
	for time.Now().Before(end) {
		c.alive()
		if !time.Now().Before(nextMail) {
			to := agents[c.rng.IntN(len(agents))]
			urgent := c.rng.IntN(4) == 0
			body := fmt.Sprintf("operator-%d", len(c.mail))
			_, err := mb.Send(ctx, mailbox.Draft{From: "operator", To: to, Subject: "chaos", Body: body, Urgent: urgent})
			if err != nil {
				t.Logf("send mail (the store may be restarting): %v", err)
			}
			c.mail[body] = err == nil
			nextMail = time.Now().Add(c.between(100*time.Millisecond, 900*time.Millisecond))
		}
		if c.rng.IntN(3) == 0 {
			addTask()
		}
		if c.rng.IntN(4) == 0 {
			c.fault(restartStore, leaseTimeout)
		}
		time.Sleep(c.between(50*time.Millisecond, 700*time.Millisecond))
	}
	// The drain: every task closed, every message delivered.
	t.Logf("%6.1fs faults over (%v); draining", time.Since(c.t0).Seconds(), c.faults)
	deadline := time.Now().Add(90 * time.Second)
	for {
		c.alive()
		open := chaosCount(db, `SELECT COUNT(*) FROM tasks WHERE state <> 'CLOSED'`)
		pending := chaosCount(db, `SELECT COUNT(*) FROM messages WHERE delivered_at IS NULL`)
		if open == 0 && pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			rows, _ := db.ReadSQL().QueryContext(ctx, `SELECT id, state, claimant, claim_session FROM tasks WHERE state <> 'CLOSED'`)
			var left []string
			for rows != nil && rows.Next() {
				var id int64
				var state, who, sess string
				_ = rows.Scan(&id, &state, &who, &sess)
				left = append(left, fmt.Sprintf("#%d %s %s %s", id, state, who, sess))
			}
			if rows != nil {
				rows.Close()
			}
			for _, d := range c.ds {
				t.Logf("%s log tail:\n%s", d.name, c.logTail(d, 80))
			}
			c.dumpRows(db, `SELECT id, sender, recipient, urgency, created_at, COALESCE(claimed_session, ''), COALESCE(shown_note, '') FROM messages WHERE delivered_at IS NULL`)
			c.dumpRows(db, `SELECT name, state, stop_kind FROM agents`)
			c.dumpRows(db, `SELECT task_id, at, actor, from_state, to_state, session_id, reason FROM events
				WHERE task_id IN (SELECT id FROM tasks WHERE state <> 'CLOSED') ORDER BY id`)
			c.dumpRows(db, `SELECT agent, actor, reason FROM pauses`)
			if rows, err := db.ReadSQL().QueryContext(ctx, `SELECT task_id, agent, head, state, result, detail FROM merge_queue ORDER BY id`); err == nil {
				for rows.Next() {
					var id int64
					var agent, head, state, result, detail string
					_ = rows.Scan(&id, &agent, &head, &state, &result, &detail)
					t.Logf("merge_queue: task %d %s %s %s %s %q", id, agent, head, state, result, detail)
				}
				rows.Close()
			}
			t.Fatalf("seed %d: not drained 90s after the faults: %d tasks not CLOSED (%v), %d messages pending", c.seed, open, left, pending)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%6.1fs drained; stopping", time.Since(c.t0).Seconds())
	for _, d := range c.ds {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, d := range c.ds {
		if !d.wait(30 * time.Second) {
			t.Fatalf("seed %d: %s still running 30s after the final SIGTERM; log tail:\n%s", c.seed, d.name, c.logTail(d, 60))
		}
		if code := d.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("seed %d: %s exited %d at the final stop; log tail:\n%s", c.seed, d.name, code, c.logTail(d, 40))
		}
	}
	for _, d := range c.ds {
		c.snapshot(d)
	}
	c.check(ctx, db)
	t.Logf("%6.1fs seed %d: %d tasks, %d operator messages, faults %v", time.Since(c.t0).Seconds(), c.seed, len(c.tasks), len(c.mail), c.faults)
}

// dumpRows logs the rows of q (text columns), for a failure's report.
func (c *chaosRun) dumpRows(db *store.DB, q string) {
	rows, err := db.ReadSQL().QueryContext(context.Background(), q)
	if err != nil {
		c.t.Logf("%s: %v", q, err)
		return
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			c.t.Logf("%s: %v", q, err)
			return
		}
		c.t.Logf("%s: %v", strings.Fields(q)[len(strings.Fields(q))-1], vals)
	}
}

func chaosOpen(t *testing.T, url string) *store.DB {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		db, err := store.Open(context.Background(), url, store.Options{NoCreate: !store.IsPostgres(url)})
		if err == nil {
			return db
		}
		if time.Now().After(deadline) {
			t.Fatalf("open the store: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func chaosCount(db *store.DB, q string) int {
	var n int
	if err := db.ReadSQL().QueryRowContext(context.Background(), q).Scan(&n); err != nil {
		return -1
	}
	return n
}

var (
	chaosSeenTask = regexp.MustCompile(`(?m)^(?:Your task: #|Continue your task #)([0-9]+)`)
	chaosSeenMail = regexp.MustCompile(`(?m)^### #([0-9]+) `)
)

// chaosSession is what one session recorded of itself.
type chaosSession struct {
	tasks, mail map[int64]bool
	sent        map[string]int // token: the send's exit status
}

func (c *chaosRun) readSeen() map[string]*chaosSession {
	ents, err := os.ReadDir(c.seen)
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[string]*chaosSession{}
	for _, e := range ents {
		id, ext, _ := strings.Cut(e.Name(), ".")
		s := out[id]
		if s == nil {
			s = &chaosSession{tasks: map[int64]bool{}, mail: map[int64]bool{}, sent: map[string]int{}}
			out[id] = s
		}
		b, err := os.ReadFile(filepath.Join(c.seen, e.Name()))
		if err != nil {
			c.t.Fatal(err)
		}
		switch ext {
		case "prompt":
			for _, m := range chaosSeenTask.FindAllStringSubmatch(string(b), -1) {
				n, _ := strconv.ParseInt(m[1], 10, 64)
				s.tasks[n] = true
			}
			for _, m := range chaosSeenMail.FindAllStringSubmatch(string(b), -1) {
				n, _ := strconv.ParseInt(m[1], 10, 64)
				s.mail[n] = true
			}
		case "mail":
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				// A session killed as its shell appended the line leaves it
				// empty or cut: what its send did is then unknown, as if
				// the line had never been begun.
				tok, code, _ := strings.Cut(l, " ")
				if n, err := strconv.Atoi(code); err == nil && tok != "" {
					s.sent[tok] = n
				}
			}
		}
	}
	return out
}

// check verifies every promise after the drain and the final stop.
func (c *chaosRun) check(ctx context.Context, db *store.DB) {
	t := c.t
	bad := func(format string, args ...any) {
		t.Errorf("seed %d: "+format, append([]any{c.seed}, args...)...)
	}
	r := db.ReadSQL()
	saw := c.readSeen()

	// No process of the swarm is left: no session's, no lease guard.
	for _, d := range c.ds {
		if left := treeProcesses(d.stateDir); len(left) > 0 {
			bad("processes of %s's sessions left after its stop: %v", d.name, left)
		}
	}
	if left := chaosProcesses(c.dir, c.ds); len(left) > 0 {
		bad("processes of the run left: %v", left)
	}

	// Sessions: one row per session that ran, seqs unique, every row
	// settled; an outcome in its log and an orphaned row never both.
	type sess struct {
		agent, outcome, logPath string
		settled                 bool
	}
	sessions := map[string]sess{}
	rows, err := r.QueryContext(ctx, `SELECT session_id, agent, seq, outcome, settled_at IS NOT NULL, log_path FROM sessions`)
	if err != nil {
		t.Fatal(err)
	}
	bySeq := map[string]string{}
	for rows.Next() {
		var id string
		var s sess
		var seq int64
		if err := rows.Scan(&id, &s.agent, &seq, &s.outcome, &s.settled, &s.logPath); err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("%s/%d", s.agent, seq)
		if other, ok := bySeq[key]; ok {
			bad("seq %s used by sessions %s and %s", key, other, id)
		}
		bySeq[key] = id
		sessions[id] = s
	}
	rows.Close()
	givenUp := 0
	for id, s := range sessions {
		if !s.settled || s.outcome == "" {
			bad("session %s (%s) not settled: outcome %q", id, s.agent, s.outcome)
		}
		rec, ok := c.outcomes[s.logPath]
		switch {
		case ok && s.outcome == store.OutcomeOrphaned && store.IsPostgres(c.dbURL):
			// A daemon that lost the agent's lease (paused past it) gives
			// its outcome up: the daemon that reaped the lease closed the
			// session as orphaned, and that row is the one record.
			givenUp++
		case ok && s.outcome == store.OutcomeOrphaned:
			bad("session %s is closed as orphaned, and its log has its outcome: %s", id, rec)
		case ok && !bytes.Contains(rec, []byte(`"`+s.outcome+`"`)):
			bad("session %s recorded %q, its log's outcome says otherwise: %s", id, s.outcome, rec)
		}
	}
	for id := range saw {
		if _, ok := sessions[id]; !ok {
			bad("session %s ran (it kept its prompt) but has no row", id)
		}
	}

	// A session's own transitions are each in the event log once.
	rows, err = r.QueryContext(ctx, `SELECT session_id, event, from_state, to_state, COUNT(*) FROM events
		WHERE session_id <> '' AND task_id IS NULL GROUP BY session_id, event, from_state, to_state HAVING COUNT(*) > 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, ev, from, to string
		var n int
		if err := rows.Scan(&id, &ev, &from, &to, &n); err != nil {
			t.Fatal(err)
		}
		bad("session %s: event %s %s->%s recorded %d times", id, ev, from, to, n)
	}
	rows.Close()

	// Tasks: each add there once (an add that failed in doubt at most
	// once), every one CLOSED, DONE once by a session that was shown it,
	// merged once.
	rows, err = r.QueryContext(ctx, `SELECT id, title FROM tasks`)
	if err != nil {
		t.Fatal(err)
	}
	titles := map[string]int{}
	for rows.Next() {
		var id int64
		var title string
		if err := rows.Scan(&id, &title); err != nil {
			t.Fatal(err)
		}
		if titles[title]++; titles[title] > 1 {
			bad("task %q added more than once (#%d)", title, id)
		}
		if !slices.Contains(c.tasks, id) {
			c.tasks = append(c.tasks, id) // its add failed in doubt, and was committed
		}
	}
	rows.Close()
	if n := chaosCount(db, `SELECT COUNT(*) FROM tasks WHERE state <> 'CLOSED'`); n != 0 {
		bad("%d tasks not CLOSED", n)
	}
	done := map[int64]int{}
	closed := map[int64]int{}
	rows, err = r.QueryContext(ctx, `SELECT task_id, to_state, session_id FROM events WHERE task_id IS NOT NULL AND to_state IN ('DONE', 'CLOSED')`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		var to, sid string
		if err := rows.Scan(&id, &to, &sid); err != nil {
			t.Fatal(err)
		}
		if to == "CLOSED" {
			closed[id]++
			continue
		}
		done[id]++
		if s := saw[sid]; s == nil || !s.tasks[id] {
			bad("task %d DONE by session %q, which was never shown it", id, sid)
		}
	}
	rows.Close()
	for _, id := range c.tasks {
		if done[id] != 1 || closed[id] != 1 {
			bad("task %d: DONE %d times, CLOSED %d times; want once each", id, done[id], closed[id])
		}
	}
	c.checkGit(saw)

	// Mail: every message delivered once, by a completed session that was
	// shown it or by a read, and shown to no other completed session; every
	// send that said it sent is there once.
	shownOK := map[int64][]string{}
	for id, s := range saw {
		if sessions[id].outcome != store.OutcomeSuccess {
			continue
		}
		for m := range s.mail {
			shownOK[m] = append(shownOK[m], id)
		}
	}
	bodies := map[string]int{}
	rows, err = r.QueryContext(ctx, `SELECT id, body, COALESCE(delivered_at, ''), COALESCE(acked_by, ''), COALESCE(claimed_session, '') FROM messages`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		var body, delivered, acked, by string
		if err := rows.Scan(&id, &body, &delivered, &acked, &by); err != nil {
			t.Fatal(err)
		}
		bodies[body]++
		switch {
		case delivered == "":
			bad("message %d never delivered", id)
		case acked == mailbox.AckRead:
		case acked != mailbox.AckSession:
			bad("message %d acknowledged by %q", id, acked)
		case saw[by] == nil || !saw[by].mail[id]:
			bad("message %d acknowledged by session %s, which was never shown it", id, by)
		case sessions[by].outcome != store.OutcomeSuccess:
			bad("message %d acknowledged by session %s, which ended %q", id, by, sessions[by].outcome)
		}
		if len(shownOK[id]) > 1 {
			sort.Strings(shownOK[id])
			bad("message %d shown to %d completed sessions: %v", id, len(shownOK[id]), shownOK[id])
		}
	}
	rows.Close()
	sent := 0
	for id, s := range saw {
		for tok, code := range s.sent {
			if n := bodies[tok]; n > 1 || (code == 0 && n != 1) {
				bad("session %s's message %s (send exit %d) is in the store %d times", id, tok, code, n)
			}
			sent++
		}
	}
	for body, ok := range c.mail {
		if n := bodies[body]; n > 1 || (ok && n != 1) {
			bad("operator message %s (sent: %v) is in the store %d times", body, ok, n)
		}
	}
	// Agents: none stopped for good by what the faults did (a fatal stop
	// waits for the operator's swarmd start, its mail and tasks with it).
	rows, err = r.QueryContext(ctx, `SELECT name, stop_kind FROM agents WHERE stop_kind = 'fatal'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name, kind string
		if err := rows.Scan(&name, &kind); err != nil {
			t.Fatal(err)
		}
		bad("agent %s was stopped for good (%s)", name, kind)
	}
	rows.Close()
	outcomes := map[string]int{}
	for _, s := range sessions {
		outcomes[s.outcome]++
	}
	t.Logf("checked: %d sessions (%d ran a prompt; outcomes %v; %d outcomes given up with a lost lease), %d messages (%d sent by sessions)",
		len(sessions), len(saw), outcomes, givenUp, len(bodies), sent)
}

// checkGit checks the merge target: every task merged once, its file there,
// and each merge exactly its task's work: it brings t<N>.txt alone, whose
// every line is a session that was shown task N.
func (c *chaosRun) checkGit(saw map[string]*chaosSession) {
	repo := c.remote
	if repo == "" {
		repo = c.ds[0].repo
	}
	git := func(args ...string) string {
		out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).Output()
		if err != nil {
			c.t.Fatalf("git %v: %v", args, err)
		}
		return string(out)
	}
	// Every merge in main's history, on its first-parent line or not (a
	// task line started on a merge of another task carries it).
	merged := map[int64]int{}
	for _, l := range strings.Fields(git("log", "--format=%(trailers:key=Swarmd-Task,valueonly)", "main")) {
		n, _ := strconv.ParseInt(l, 10, 64)
		merged[n]++
	}
	// Each commit of main's first-parent line as "@HASH TASK" (TASK its
	// trailer's, empty without one), then the files it changed from its
	// first parent.
	var task int64
	for _, l := range strings.Split(git("log", "--first-parent", "--diff-merges=first-parent", "--name-only",
		"--format=@%H %(trailers:key=Swarmd-Task,valueonly,separator=)", "main"), "\n") {
		if l == "" {
			continue
		}
		if h, id, ok := strings.Cut(l, " "); ok && strings.HasPrefix(h, "@") {
			task, _ = strconv.ParseInt(strings.TrimSpace(id), 10, 64)
			continue
		}
		if want := fmt.Sprintf("t%d.txt", task); task == 0 || l != want {
			c.t.Errorf("seed %d: main's commit of task %d brings %s, not that task's work alone", c.seed, task, l)
		}
	}
	for _, id := range c.tasks {
		if merged[id] != 1 {
			c.t.Errorf("seed %d: task %d merged into main %d times", c.seed, id, merged[id])
		}
		if err := exec.Command("git", "-C", repo, "cat-file", "-e", fmt.Sprintf("main:t%d.txt", id)).Run(); err != nil {
			c.t.Errorf("seed %d: main has no t%d.txt", c.seed, id)
		}
	}
	// main:tN.txt:SESSION, a line each.
	for _, l := range strings.Split(strings.TrimSpace(git("grep", "-e", "", "main", "--", "t*.txt")), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) != 3 {
			continue
		}
		id, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(parts[1], "t"), ".txt"), 10, 64)
		if err != nil {
			continue
		}
		if s := saw[parts[2]]; s == nil || !s.tasks[id] {
			c.t.Errorf("seed %d: main's t%d.txt has work of session %q, which was never shown task %d", c.seed, id, parts[2], id)
		}
	}
}

// snapshot keeps the outcome records of d's session logs, which its next
// start archives.
func (c *chaosRun) snapshot(d *chaosDaemon) {
	paths, _ := filepath.Glob(filepath.Join(d.stateDir, "logs", "*", "*.log"))
	for _, p := range paths {
		rec, ok, err := logs.ReadOutcome(p)
		if err != nil {
			c.t.Errorf("read the outcome of %s: %v", p, err)
		}
		if ok {
			c.outcomes[p] = rec
		}
	}
}

// chaosProcesses lists live processes that name the run's directories on
// their command line or in their environment (lease guards, sessions,
// daemons), besides this test.
func chaosProcesses(dir string, ds []*chaosDaemon) []string {
	needles := [][]byte{[]byte(dir)}
	for _, d := range ds {
		needles = append(needles, []byte(d.stateDir), []byte(d.cfg))
	}
	var out []string
	for _, pid := range otherPids() {
		cmdline, _ := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
		env, _ := os.ReadFile(filepath.Join("/proc", pid, "environ"))
		for _, n := range needles {
			if bytes.Contains(cmdline, n) || bytes.Contains(env, n) {
				out = append(out, pid+":"+strings.ReplaceAll(string(cmdline), "\x00", " "))
				break
			}
		}
	}
	return out
}

// TestChaosSQLite: one daemon on SQLite, four agents, a backlog and mail,
// with kill -9, SIGSTOP/SIGCONT and SIGTERM of the daemon at random
// moments; every promise holds after the drain.
func TestChaosSQLite(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of faults on a real swarm")
	}
	c := newChaosRun(t)
	repo := gitRepo(t)
	agents := []string{"a1", "a2", "a3", "a4"}
	cfg := c.config(repo, agents, agents, "")
	c.dbURL = filepath.Join(repo, ".swarm", "swarm.db")
	c.addDaemon("d1", repo, cfg)
	c.run(context.Background(), agents, nil, 0)
}

// TestChaosPostgres: two daemons, each with its own clone, share a
// PostgreSQL store; besides the daemons' faults, the server restarts
// (immediate: every connection cut) and daemons stay SIGSTOPped past
// lease_timeout, so that the other one reaps their leases.
func TestChaosPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of faults on a real swarm")
	}
	srv := pgtest.RequireDurable(t)
	if err := srv.CreateDB("chaos"); err != nil {
		t.Fatal(err)
	}
	c := newChaosRun(t)
	c.dbURL = srv.URL("chaos")
	c.remote = filepath.Join(c.dir, "remote.git")
	seed := gitRepo(t)
	for _, args := range [][]string{{"init", "-q", "--bare", "-b", "main", c.remote}, {"-C", seed, "push", "-q", c.remote, "main"}} {
		if b, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, b)
		}
	}
	const lease = 2 * time.Second
	all := []string{"a1", "a2", "b1", "b2"}
	for i, agents := range [][]string{{"a1", "a2"}, {"b1", "b2"}} {
		repo := filepath.Join(t.TempDir(), "clone")
		if b, err := exec.Command("git", "clone", "-q", c.remote, repo).CombinedOutput(); err != nil {
			t.Fatalf("git clone: %v\n%s", err, b)
		}
		cfg := c.config(repo, agents, all, fmt.Sprintf("store: %q\nlease_timeout: %v\nremote: origin", c.dbURL, lease))
		c.addDaemon(fmt.Sprintf("d%d", i+1), repo, cfg)
	}
	c.run(context.Background(), all, func(down time.Duration) error { return srv.Restart("immediate", down) }, lease)
}
