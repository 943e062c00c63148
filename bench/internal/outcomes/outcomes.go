// Package outcomes is the load test of outcomes recorded exactly: a real swarmd with many
// agents (command backend) working through a task board while mail arrives
// (some urgent, interrupting sessions), killed with SIGKILL and restarted
// several times, then stopped. Afterwards it checks, from swarm.db and from
// what each session itself recorded seeing, that every outcome was
// recorded exactly once: every task DONE by exactly one session that saw
// it, every message acknowledged by one completed session that showed it,
// no seq used twice, one row per started session, no process left. It also
// measures settlement: from a session's end to its outcome committed.
package outcomes

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/swarmd/swarmd/bench/internal/harness"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// Options size the run.
type Options struct {
	Bin      string        // the swarmd binary
	Agents   int           // agents, a1..aN
	Tasks    int           // tasks added before the start
	MailRate float64       // messages per second while tasks remain
	Urgent   float64       // the share of urgent messages
	Kills    int           // SIGKILL and restart cycles, spread over the tasks
	Work     time.Duration // how long each session works (sleeps) before DONE; 0 is 200ms
	Timeout  time.Duration // the whole run
	Parent   string        // where the repository goes ("": the temporary directory)
	Log      io.Writer     // progress lines (nil: none)
	// Store is a postgres:// URL for the swarm's store ("": the SQLite
	// file in the state dir).
	Store string
	// StoreRestarts times, spread over the tasks, RestartStore is called
	// while the daemon runs (a server restart, an outage).
	StoreRestarts int
	RestartStore  func() error
	// SessionNice, if set, is the config's limits.session_nice (nil: its
	// default).
	SessionNice *int
	// Keep leaves the repository, its state dir and daemon.log in place
	// for a look afterwards (Log says where).
	Keep bool
}

// Report is what the run found.
type Report struct {
	Tasks, Messages, Sessions, Seen int
	Kills, StoreRestarts            int
	Recovered                       int // sessions whose outcome a restart applied from their logs
	Orphaned                        int // sessions cut off by a kill
	Wall                            time.Duration
	SettleP50, SettleP99, SettleMax time.Duration // session end -> outcome committed, by the daemon that ran it
	StoreWait                       time.Duration // summed swarmd_settle_store_wait_seconds_total
	Survivors                       int
	Violations                      []string // every broken promise; empty when all held
}

func (r Report) String() string {
	return fmt.Sprintf("tasks=%d messages=%d sessions=%d kills=%d store-restarts=%d recovered-from-log=%d orphaned=%d wall=%.1fs "+
		"settle p50=%v p99=%v max=%v store-wait=%v survivors=%d violations=%d",
		r.Tasks, r.Messages, r.Sessions, r.Kills, r.StoreRestarts, r.Recovered, r.Orphaned, r.Wall.Seconds(),
		r.SettleP50.Round(10*time.Microsecond), r.SettleP99.Round(10*time.Microsecond), r.SettleMax.Round(10*time.Microsecond),
		r.StoreWait.Round(time.Millisecond), r.Survivors, len(r.Violations))
}

// script is every agent's session: it records what its prompt showed (its
// task, its mail) in $SEEN/<session id>, works a moment, and says DONE.
const script = `p=$(cat); printf '%s\n' "$p" | grep -oE '^(Your task: #|Continue your task #)[0-9]+|^### #[0-9]+' > "$SEEN/$SWARM_SESSION_ID"; sleep "$WORK"; echo DONE`

// Run runs the load test.
func Run(ctx context.Context, o Options) (Report, error) {
	var rep Report
	var err error
	logf := func(format string, args ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, format+"\n", args...)
		}
	}
	if o.Bin, err = filepath.Abs(o.Bin); err != nil { // the daemon runs in the repository
		return rep, err
	}
	work, err := harness.RepoIn(o.Parent, "swarmd-outcomes")
	if err != nil {
		return rep, err
	}
	if o.Keep {
		logf("outcomes: the run is kept in %s", work)
	} else {
		defer os.RemoveAll(work)
	}
	seen := filepath.Join(work, "seen")
	if err := os.Mkdir(seen, 0o755); err != nil {
		return rep, err
	}
	addr, err := harness.FreeAddr()
	if err != nil {
		return rep, err
	}
	head := fmt.Sprintf(`sandbox: {writable: [%[1]q]}
defaults:
  backend: work
  min_session_interval: 0s
  grace_period: 2s
  env: {SEEN: %[1]q, WORK: %[2]q}
backends:
  work: {type: command, command: sh, args: [-c, %[3]q]}
`, seen, strconv.FormatFloat(cmp.Or(o.Work, 200*time.Millisecond).Seconds(), 'f', 3, 64), script)
	if o.Store != "" {
		head += fmt.Sprintf("store: %q\n", o.Store)
	}
	if o.SessionNice != nil {
		head += fmt.Sprintf("limits: {session_nice: %d}\n", *o.SessionNice)
	}
	config, names, err := harness.Swarm(work, head, o.Agents)
	if err != nil {
		return rep, err
	}
	// harness.Swarm writes no listener; this run scrapes the store wait.
	b, err := os.ReadFile(config)
	if err != nil {
		return rep, err
	}
	if err := os.WriteFile(config, bytes.Replace(b, []byte(`listen: ""`), []byte(fmt.Sprintf("listen: %q", addr)), 1), 0o644); err != nil {
		return rep, err
	}
	dbPath := cmp.Or(o.Store, filepath.Join(work, ".swarm", "swarm.db"))
	start := time.Now()
	deadline := start.Add(o.Timeout)
	d, err := startDaemon(o.Bin, config, work)
	if err != nil {
		return rep, err
	}
	defer func() { d.Kill() }()
	db, err := waitDB(dbPath, deadline)
	if err != nil {
		return rep, err
	}
	defer db.Close()
	mb, err := mailbox.New(ctx, db, mailbox.Options{Agents: names})
	if err != nil {
		return rep, err
	}
	board := taskboard.New(db, taskboard.Options{AutoClose: true})
	for i := range o.Tasks {
		if _, err := board.Add(ctx, taskboard.NewTask{Title: fmt.Sprintf("task %d", i+1)}); err != nil {
			return rep, fmt.Errorf("add task: %w", err)
		}
	}
	rep.Tasks = o.Tasks
	logf("outcomes: %d agents, %d tasks added in %.1fs", o.Agents, o.Tasks, time.Since(start).Seconds())

	// Mail at MailRate until the tasks are done, SIGKILL and restart at
	// evenly spread shares of the tasks closed.
	rng := rand.New(rand.NewPCG(1, 2))
	tick := time.NewTicker(time.Duration(float64(time.Second) / max(o.MailRate, 0.001)))
	defer tick.Stop()
	killAt := func(k int) int { return o.Tasks * (k + 1) / (o.Kills + 1) }
	var killTimes []time.Time
	for {
		closed, err := count(db, `SELECT COUNT(*) FROM tasks WHERE state = 'CLOSED'`)
		if err != nil {
			return rep, err
		}
		if closed >= o.Tasks {
			break
		}
		if rep.StoreRestarts < o.StoreRestarts && closed >= o.Tasks*(rep.StoreRestarts+1)/(o.StoreRestarts+1) {
			logf("outcomes: %d/%d tasks closed: the store restarts", closed, o.Tasks)
			if err := o.RestartStore(); err != nil {
				return rep, fmt.Errorf("restart the store: %w", err)
			}
			rep.StoreRestarts++
		}
		if rep.Kills < o.Kills && closed >= killAt(rep.Kills) {
			rep.StoreWait += d.storeWait(addr)
			logf("outcomes: %d/%d tasks closed: kill -9 and restart", closed, o.Tasks)
			killTimes = append(killTimes, time.Now())
			d.Kill()
			if d, err = startDaemon(o.Bin, config, work); err != nil {
				return rep, err
			}
			rep.Kills++
		}
		if time.Now().After(deadline) {
			return rep, fmt.Errorf("timed out with %d of %d tasks closed", closed, o.Tasks)
		}
		select {
		case <-tick.C:
			from, to := names[rng.IntN(len(names))], names[rng.IntN(len(names))]
			if from == to {
				continue
			}
			urgent := rng.Float64() < o.Urgent
			if _, err := mb.Send(ctx, mailbox.Draft{From: from, To: to, Subject: "load", Body: "a message", Urgent: urgent}); err != nil {
				return rep, fmt.Errorf("send mail: %w", err)
			}
			rep.Messages++
		case <-ctx.Done():
			return rep, ctx.Err()
		}
	}
	// The last mail is delivered by the sessions it wakes.
	for {
		pending, err := count(db, `SELECT COUNT(*) FROM messages WHERE delivered_at IS NULL`)
		if err != nil {
			return rep, err
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			return rep, fmt.Errorf("timed out with %d messages pending", pending)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rep.StoreWait += d.storeWait(addr)
	if err := d.Stop(60 * time.Second); err != nil {
		return rep, err
	}
	rep.Wall = time.Since(start)
	rep.Survivors = harness.Survivors(work)
	if rep.Survivors > 0 {
		rep.Violations = append(rep.Violations, fmt.Sprintf("%d processes of the swarm left running", rep.Survivors))
	}
	logf("outcomes: all done in %.1fs; checking", rep.Wall.Seconds())
	return rep, check(ctx, db, seen, work, killTimes, &rep)
}

// check verifies the promises and fills in the figures.
func check(ctx context.Context, db *store.DB, seenDir, work string, kills []time.Time, rep *Report) error {
	r := db.ReadSQL()
	saw, err := readSeen(seenDir)
	if err != nil {
		return err
	}
	rep.Seen = len(saw)
	bad := func(format string, args ...any) {
		if len(rep.Violations) < 50 {
			rep.Violations = append(rep.Violations, fmt.Sprintf(format, args...))
		}
	}
	// Sessions: one row per started session, seqs unique, all settled.
	type sess struct {
		agent, outcome     string
		seq                int64
		ended, settled     time.Time
		endedOK, settledOK bool
	}
	rows, err := r.QueryContext(ctx, `SELECT session_id, agent, seq, outcome, COALESCE(ended_at, ''), COALESCE(settled_at, '') FROM sessions`)
	if err != nil {
		return err
	}
	sessions := map[string]sess{}
	bySeq := map[string]string{}
	for rows.Next() {
		var id, ended, settled string
		var s sess
		if err := rows.Scan(&id, &s.agent, &s.seq, &s.outcome, &ended, &settled); err != nil {
			rows.Close()
			return err
		}
		if _, dup := sessions[id]; dup {
			bad("session %s has two rows", id)
		}
		key := s.agent + "/" + strconv.FormatInt(s.seq, 10)
		if other, ok := bySeq[key]; ok {
			bad("seq %s used by %s and %s", key, other, id)
		}
		bySeq[key] = id
		s.ended, s.endedOK = parse(ended)
		s.settled, s.settledOK = parse(settled)
		if !s.settledOK {
			bad("session %s was never settled", id)
		}
		sessions[id] = s
	}
	rows.Close()
	rep.Sessions = len(sessions)
	for id := range saw {
		if _, ok := sessions[id]; !ok {
			bad("session %s ran (it recorded what it saw) but has no row", id)
		}
	}
	// Settlement latency, of the sessions settled by the daemon that ran
	// them (a kill between end and settlement leaves it to recovery).
	var lat []time.Duration
	for _, s := range sessions {
		if !s.endedOK || !s.settledOK {
			continue
		}
		if s.outcome == store.OutcomeOrphaned {
			rep.Orphaned++
			continue
		}
		crossed := false
		for _, k := range kills {
			if s.ended.Before(k) && s.settled.After(k) {
				crossed = true
			}
		}
		if crossed {
			rep.Recovered++
			continue
		}
		lat = append(lat, s.settled.Sub(s.ended))
	}
	rep.SettleP50, rep.SettleP99, rep.SettleMax = harness.Percentile(lat, 0.5), harness.Percentile(lat, 0.99), harness.Percentile(lat, 1)

	// Tasks: every one CLOSED, DONE exactly once, by a session that saw it.
	var open int
	if err := r.QueryRowContext(ctx, `SELECT COUNT(*) FROM tasks WHERE state <> 'CLOSED'`).Scan(&open); err != nil {
		return err
	}
	if open > 0 {
		bad("%d tasks not CLOSED", open)
	}
	rows, err = r.QueryContext(ctx, `SELECT task_id, session_id FROM events WHERE task_id IS NOT NULL AND to_state = 'DONE'`)
	if err != nil {
		return err
	}
	done := map[int64]int{}
	for rows.Next() {
		var task int64
		var id string
		if err := rows.Scan(&task, &id); err != nil {
			rows.Close()
			return err
		}
		done[task]++
		if !saw[id].tasks[task] {
			bad("task %d DONE by session %s, which never saw it", task, id)
		}
	}
	rows.Close()
	for task, n := range done {
		if n != 1 {
			bad("task %d DONE %d times", task, n)
		}
	}
	if len(done) != rep.Tasks {
		bad("%d tasks DONE, want %d", len(done), rep.Tasks)
	}
	// Agents: the store's restarts and the kills are not the agents'
	// errors; nobody stopped.
	rows, err = r.QueryContext(ctx, `SELECT name, state, total_errors, stop_kind FROM agents`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var name, state, kind string
		var errs int
		if err := rows.Scan(&name, &state, &errs, &kind); err != nil {
			rows.Close()
			return err
		}
		if errs != 0 || kind == "fatal" {
			bad("agent %s: %d errors counted, state %s (stop: %q)", name, errs, state, kind)
		}
	}
	rows.Close()
	// Mail: every message acknowledged, by one completed session that
	// showed it.
	rows, err = r.QueryContext(ctx, `SELECT id, COALESCE(delivered_at, ''), COALESCE(acked_by, ''), COALESCE(claimed_session, '') FROM messages`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id int64
		var delivered, acked, by string
		if err := rows.Scan(&id, &delivered, &acked, &by); err != nil {
			rows.Close()
			return err
		}
		switch {
		case delivered == "":
			bad("message %d never delivered", id)
		case acked == mailbox.AckRead:
		case acked != mailbox.AckSession:
			bad("message %d acknowledged by %q", id, acked)
		case !saw[by].mail[id]:
			bad("message %d acknowledged by session %s, which never showed it", id, by)
		case sessions[by].outcome != store.OutcomeSuccess:
			bad("message %d acknowledged by session %s, which ended %q", id, by, sessions[by].outcome)
		}
	}
	rows.Close()
	return nil
}

// seenBy is what one session's prompt showed.
type seenBy struct {
	tasks map[int64]bool
	mail  map[int64]bool
}

var seenLine = regexp.MustCompile(`^(Your task: #|Continue your task #|### #)([0-9]+)$`)

func readSeen(dir string) (map[string]seenBy, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make(map[string]seenBy, len(ents))
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		s := seenBy{tasks: map[int64]bool{}, mail: map[int64]bool{}}
		for _, l := range strings.Split(string(b), "\n") {
			m := seenLine.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			n, _ := strconv.ParseInt(m[2], 10, 64)
			if m[1] == "### #" {
				s.mail[n] = true
			} else {
				s.tasks[n] = true
			}
		}
		out[e.Name()] = s
	}
	return out, nil
}

func parse(s string) (time.Time, bool) {
	if s == "" {
		return time.Time{}, false
	}
	t, err := time.Parse(store.TimeLayout, s)
	return t, err == nil
}

func count(db *store.DB, q string) (int, error) {
	var n int
	err := db.ReadSQL().QueryRowContext(context.Background(), q).Scan(&n)
	return n, err
}

func waitDB(path string, deadline time.Time) (*store.DB, error) {
	for {
		db, err := store.Open(context.Background(), path, store.Options{NoCreate: !store.IsPostgres(path)})
		if err == nil {
			return db, nil
		}
		if time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// daemon is one running swarmd.
type daemon struct{ *harness.Process }

func startDaemon(bin, config, work string) (*daemon, error) {
	cmd := exec.Command(bin, "run", "--config", config, "--log-format", "json")
	cmd.Dir = work
	p, err := harness.StartProcess(cmd, filepath.Join(work, "daemon.log"))
	if err != nil {
		return nil, err
	}
	return &daemon{p}, nil
}

func (d *daemon) storeWait(addr string) time.Duration {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "swarmd_settle_store_wait_seconds_total "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return time.Duration(f * float64(time.Second))
		}
	}
	return 0
}
