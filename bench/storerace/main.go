// Command storerace measures the store under many processes at once, on
// SQLite (a file) and on PostgreSQL (a pgtest server it starts and stops),
// alternated in one run: mail throughput (each message sent, claimed for a
// prompt and acknowledged) and task claim throughput (each task claimed,
// started and done), with -procs processes racing, as the store contract's
// MailExactlyOnceAcrossProcesses and ClaimsAtomicAcrossProcesses do. Every
// race is checked afterwards: nothing lost, nothing doubled.
//
// The racing processes are this program re-executed with -child.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/swarmd/swarmd/bench/internal/harness"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

const (
	roleMail   = "mail"
	roleClaims = "claims"
)

// recipients is how many agents get the racing mail: several processes run
// sessions of each, so their claims on one recipient's mail race.
const recipients = 4

func recipient(i int) string { return fmt.Sprint("r", i%recipients) }

func main() {
	procs := flag.Int("procs", 20, "racing processes")
	reps := flag.Int("reps", 3, "repetitions (each runs both engines, order alternated)")
	each := flag.Int("mail", 50, "messages each process sends")
	tasks := flag.Int("tasks", 1000, "tasks on the board for the claim race")
	child := flag.String("child", "", "internal: run as a racing process of this role")
	target := flag.String("target", "", "internal: the child's store")
	agent := flag.String("agent", "", "internal: the child's agent name")
	delay := flag.Duration("delay", 0, "added to every PostgreSQL connection of the racing processes each way, by a proxy in this program, as a network between the daemons and the server would (a round trip takes twice it more)")
	engines := flag.String("engines", "sqlite,postgres", "the engines raced, comma-separated")
	flag.Parse()
	// An interrupt ends the run through its cleanup: children killed, the
	// PostgreSQL server stopped.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if *child != "" {
		err = runChild(ctx, *child, *target, *agent, *each)
	} else {
		err = run(ctx, options{procs: *procs, reps: *reps, each: *each, tasks: *tasks, delay: *delay, engines: strings.Split(*engines, ",")})
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "storerace:", err)
		os.Exit(1)
	}
}

// result is one race: how many operations in how long.
type result struct {
	n       int
	elapsed time.Duration
}

func (r result) rate() float64 { return float64(r.n) / r.elapsed.Seconds() }

// options are the parent's flags.
type options struct {
	procs, reps, each, tasks int
	delay                    time.Duration
	engines                  []string
}

func run(ctx context.Context, o options) (err error) {
	procs, reps, each, tasks := o.procs, o.reps, o.each, o.tasks
	for _, e := range o.engines {
		if e != "sqlite" && e != "postgres" {
			return fmt.Errorf("-engines: unknown engine %q (sqlite, postgres)", e)
		}
	}
	srv, err := pgtest.Start()
	if err != nil {
		return fmt.Errorf("start PostgreSQL: %w", err)
	}
	defer func() {
		if cerr := srv.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("stop PostgreSQL: %w", cerr)
		}
	}()
	dir, err := os.MkdirTemp("", "swarmd-storerace-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(dir)

	// The racers reach PostgreSQL through a delaying proxy with -delay;
	// the setup and the checks go straight to it.
	racer := func(target string) (string, error) { return target, nil }
	if o.delay > 0 {
		via, report, stop, err := harness.Delayed(ctx, srv.URL("postgres"), o.delay)
		if err != nil {
			return err
		}
		defer stop()
		racer = func(target string) (string, error) {
			if !store.IsPostgres(target) {
				return target, nil
			}
			return via(target)
		}
		fmt.Println("PostgreSQL " + report)
	}
	fresh := map[string]func(name string) (string, error){
		"sqlite": func(name string) (string, error) { return filepath.Join(dir, name+".db"), nil },
		"postgres": func(name string) (string, error) {
			if err := srv.CreateDB(name); err != nil {
				return "", err
			}
			return srv.URL(name), nil
		},
	}
	mail := map[string][]result{}
	claims := map[string][]result{}
	fmt.Printf("%d processes; mail: %d messages each (%d); claims: %d tasks; %d repetitions\n",
		procs, each, procs*each, tasks, reps)
	for rep := range reps {
		order := slices.Clone(o.engines)
		if rep%2 == 1 {
			slices.Reverse(order)
		}
		for _, engine := range order {
			name := fmt.Sprintf("race%d", rep)
			target, err := fresh[engine](name + "_mail")
			if err != nil {
				return fmt.Errorf("%s: fresh store: %w", engine, err)
			}
			m, err := mailRace(ctx, target, racer, procs, each)
			if err != nil {
				return fmt.Errorf("%s mail race %d: %w", engine, rep+1, err)
			}
			if target, err = fresh[engine](name + "_claims"); err != nil {
				return fmt.Errorf("%s: fresh store: %w", engine, err)
			}
			c, err := claimRace(ctx, target, racer, procs, tasks)
			if err != nil {
				return fmt.Errorf("%s claim race %d: %w", engine, rep+1, err)
			}
			mail[engine] = append(mail[engine], m)
			claims[engine] = append(claims[engine], c)
			fmt.Printf("rep %d %-8s  mail %7.0f messages/s (%v)  claims %7.0f claims/s (%v)  checked: 0 lost, 0 doubled\n",
				rep+1, engine, m.rate(), m.elapsed.Round(time.Millisecond), c.rate(), c.elapsed.Round(time.Millisecond))
		}
	}
	report("mail (send+claim+ack)", "messages/s", mail)
	report("claims (claim+start+done)", "claims/s", claims)
	return nil
}

// report prints each engine's rates and the PostgreSQL/SQLite ratio of each
// repetition (both measured in it) with their medians.
func report(what, unit string, rs map[string][]result) {
	rates := func(engine string) []float64 {
		var vs []float64
		for _, r := range rs[engine] {
			vs = append(vs, r.rate())
		}
		return vs
	}
	sq, pg := rates("sqlite"), rates("postgres")
	switch {
	case len(sq) == 0:
		fmt.Printf("%s: postgres %s %s (median %.0f)\n", what, list(pg, "%.0f"), unit, median(pg))
	case len(pg) == 0:
		fmt.Printf("%s: sqlite %s %s (median %.0f)\n", what, list(sq, "%.0f"), unit, median(sq))
	default:
		ratio := make([]float64, len(sq))
		for i := range sq {
			ratio[i] = pg[i] / sq[i]
		}
		fmt.Printf("%s: sqlite %s %s (median %.0f); postgres %s (median %.0f); PG/SQLite %s (median %.2fx)\n",
			what, list(sq, "%.0f"), unit, median(sq), list(pg, "%.0f"), median(pg), list(ratio, "%.2fx"), median(ratio))
	}
}

func list(vs []float64, format string) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmt.Sprintf(format, v)
	}
	return strings.Join(s, " / ")
}

func median(vs []float64) float64 {
	s := slices.Sorted(slices.Values(vs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// mailRace: procs processes each send each messages and, after each, run a
// session of their own recipient (claim its mail for a prompt, ack it).
// Timed from the go signal to the last process done; then whatever arrived
// after its recipient's last session is drained (untimed) and every message
// must have been acknowledged exactly once.
func mailRace(ctx context.Context, target string, racer func(string) (string, error), procs, each int) (result, error) {
	// Open first, so the schema exists before the children race.
	db, err := store.Open(ctx, target, store.Options{})
	if err != nil {
		return result{}, fmt.Errorf("open store: %w", err)
	}
	defer db.Close()
	mb, err := mailbox.New(ctx, db, mailbox.Options{})
	if err != nil {
		return result{}, fmt.Errorf("open mailbox: %w", err)
	}
	defer mb.Close()
	outs, elapsed, err := race(ctx, target, racer, roleMail, procs, each)
	if err != nil {
		return result{}, err
	}
	acked := 0
	for i, out := range outs {
		n, err := strconv.Atoi(out)
		if err != nil {
			return result{}, fmt.Errorf("process %d reported %q: %w", i, out, err)
		}
		acked += n
	}
	for i := range recipients {
		r := recipient(i)
		n, err := session(ctx, mb, r, r+"-final")
		if err != nil {
			return result{}, fmt.Errorf("final session of %s: %w", r, err)
		}
		acked += n
	}
	var total, pending int
	if err := db.ReadSQL().QueryRowContext(ctx, `SELECT COUNT(*), COUNT(CASE WHEN delivered_at IS NULL THEN 1 END) FROM messages`).Scan(&total, &pending); err != nil {
		return result{}, fmt.Errorf("count messages: %w", err)
	}
	if want := procs * each; total != want || pending != 0 || acked != total {
		return result{}, fmt.Errorf("%d messages stored, %d still pending, %d acknowledgements; want %d stored, each acknowledged once", total, pending, acked, want)
	}
	return result{n: total, elapsed: elapsed}, nil
}

// claimRace: tasks on the board (added untimed), procs processes claim,
// start and finish them until none is left. Every task must have been
// claimed by exactly one process and be CLOSED.
func claimRace(ctx context.Context, target string, racer func(string) (string, error), procs, tasks int) (result, error) {
	db, err := store.Open(ctx, target, store.Options{})
	if err != nil {
		return result{}, fmt.Errorf("open store: %w", err)
	}
	defer db.Close()
	board := taskboard.New(db, taskboard.Options{AutoClose: true})
	for i := range tasks {
		if _, err := board.Add(ctx, taskboard.NewTask{Title: fmt.Sprint("task ", i), CreatedBy: "operator"}); err != nil {
			return result{}, fmt.Errorf("add task: %w", err)
		}
	}
	outs, elapsed, err := race(ctx, target, racer, roleClaims, procs, 0)
	if err != nil {
		return result{}, err
	}
	seen := map[int64]int{}
	for i, out := range outs {
		for _, f := range strings.Fields(out) {
			id, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return result{}, fmt.Errorf("process %d reported %q: %w", i, f, err)
			}
			if prev, dup := seen[id]; dup {
				return result{}, fmt.Errorf("task %d claimed twice: by p%d and p%d", id, prev, i)
			}
			seen[id] = i
		}
	}
	if len(seen) != tasks {
		return result{}, fmt.Errorf("%d tasks claimed, want %d", len(seen), tasks)
	}
	ts, err := board.List(ctx, taskboard.Filter{})
	if err != nil {
		return result{}, fmt.Errorf("list tasks: %w", err)
	}
	for _, tk := range ts {
		if tk.StateName != "CLOSED" {
			return result{}, fmt.Errorf("task %d is %s, want CLOSED", tk.ID, tk.StateName)
		}
	}
	return result{n: tasks, elapsed: elapsed}, nil
}

// child is one racing process and its output.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines *bufio.Scanner
}

// race starts procs children of role on target, waits until each has its
// store open ("ready"), releases them at once ("go") and times until the
// last has reported ("done ..."). It returns each child's report. Children
// are killed on any failure, and die with this process.
func race(ctx context.Context, target string, racer func(string) (string, error), role string, procs, each int) (outs []string, elapsed time.Duration, err error) {
	if target, err = racer(target); err != nil {
		return nil, 0, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, 0, fmt.Errorf("find own binary: %w", err)
	}
	kids := make([]*child, 0, procs)
	defer func() {
		for _, k := range kids {
			if err != nil {
				_ = k.cmd.Process.Kill()
			}
			_ = k.stdin.Close()
			if werr := k.cmd.Wait(); werr != nil && err == nil {
				err = fmt.Errorf("%s process: %w", role, werr)
			}
		}
	}()
	for i := range procs {
		cmd := exec.Command(self, "-child", role, "-target", target, "-agent", fmt.Sprint("p", i), "-mail", strconv.Itoa(each))
		cmd.Stderr = os.Stderr
		// A child must not outlive the benchmark, whatever happens to it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		in, err := cmd.StdinPipe()
		if err != nil {
			return nil, 0, fmt.Errorf("stdin pipe: %w", err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, 0, fmt.Errorf("stdout pipe: %w", err)
		}
		if err := cmd.Start(); err != nil {
			return nil, 0, fmt.Errorf("start %s process: %w", role, err)
		}
		kids = append(kids, &child{cmd: cmd, stdin: in, lines: bufio.NewScanner(out)})
	}
	// Interrupted: kill them, which ends the reads below with an error.
	defer context.AfterFunc(ctx, func() {
		for _, k := range kids {
			_ = k.cmd.Process.Kill()
		}
	})()
	for i, k := range kids {
		if line, err := k.line(); err != nil || line != "ready" {
			return nil, 0, fmt.Errorf("process %d not ready: %q, %w", i, line, err)
		}
	}
	start := time.Now()
	for i, k := range kids {
		if _, err := io.WriteString(k.stdin, "go\n"); err != nil {
			return nil, 0, fmt.Errorf("release process %d: %w", i, err)
		}
	}
	outs = make([]string, procs)
	for i, k := range kids {
		line, err := k.line()
		rest, ok := strings.CutPrefix(line, "done")
		if ctx.Err() != nil {
			return nil, 0, fmt.Errorf("%s race: %w", role, ctx.Err())
		}
		if err != nil || !ok {
			return nil, 0, fmt.Errorf("process %d did not finish: %q, %w", i, line, err)
		}
		outs[i] = strings.TrimSpace(rest)
	}
	return outs, time.Since(start), nil
}

func (k *child) line() (string, error) {
	if k.lines.Scan() {
		return k.lines.Text(), nil
	}
	if err := k.lines.Err(); err != nil {
		return "", err
	}
	return "", io.ErrUnexpectedEOF
}

// runChild is a racing process: it opens the store, says ready, waits for
// go on stdin, does its share and reports it on stdout.
func runChild(ctx context.Context, role, target, agent string, each int) error {
	db, err := store.Open(ctx, target, store.Options{NoCreate: true})
	if err != nil {
		return fmt.Errorf("child %s: open store: %w", agent, err)
	}
	defer db.Close()
	var work func() (string, error)
	switch role {
	case roleMail:
		mb, err := mailbox.New(ctx, db, mailbox.Options{})
		if err != nil {
			return fmt.Errorf("child %s: open mailbox: %w", agent, err)
		}
		defer mb.Close()
		work = func() (string, error) { return childMail(ctx, mb, agent, each) }
	case roleClaims:
		work = func() (string, error) { return childClaims(ctx, db, agent) }
	default:
		return fmt.Errorf("child: unknown role %q", role)
	}
	fmt.Println("ready")
	// The parent's go, or EOF when it died: then there is nothing to do.
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || line != "go\n" {
		return errors.New("child: no go from the parent")
	}
	out, err := work()
	if err != nil {
		return fmt.Errorf("child %s: %w", agent, err)
	}
	fmt.Println("done", out)
	return nil
}

// childMail sends each messages to the next recipient and, after each, runs
// a session of its own recipient's; it reports how many it acknowledged.
func childMail(ctx context.Context, mb *mailbox.Mailbox, agent string, each int) (string, error) {
	i, _ := strconv.Atoi(strings.TrimPrefix(agent, "p"))
	mine, theirs := recipient(i), recipient(i+1)
	acked := 0
	for k := range each {
		if _, err := mb.Send(ctx, mailbox.Draft{From: agent, To: theirs, Body: fmt.Sprint(agent, " ", k)}); err != nil {
			return "", fmt.Errorf("send: %w", err)
		}
		n, err := session(ctx, mb, mine, fmt.Sprint(agent, "-", k))
		if err != nil {
			return "", err
		}
		acked += n
	}
	return strconv.Itoa(acked), nil
}

// session is one session's mail: claimed for its prompt, acknowledged when
// it completes. It returns how many messages it acknowledged.
func session(ctx context.Context, mb *mailbox.Mailbox, agent, id string) (int, error) {
	if _, err := mb.ConsumeForPrompt(ctx, agent, id); err != nil {
		return 0, fmt.Errorf("consume for prompt: %w", err)
	}
	now := time.Now()
	n, err := mb.Ack(ctx, store.SessionRecord{SessionID: id, Agent: agent, Seq: 1, Started: now, Ended: &now})
	if err != nil {
		return 0, fmt.Errorf("ack: %w", err)
	}
	return n, nil
}

// childClaims claims, starts and finishes tasks until none is left; it
// reports the ids it claimed.
func childClaims(ctx context.Context, db *store.DB, agent string) (string, error) {
	board := taskboard.New(db, taskboard.Options{AutoClose: true})
	var ids []string
	for k := 0; ; k++ {
		session := fmt.Sprint(agent, "-", k)
		tk, ok, err := board.ClaimNext(ctx, agent, session)
		if err != nil {
			return "", fmt.Errorf("claim: %w", err)
		}
		if !ok {
			return strings.Join(ids, " "), nil
		}
		ids = append(ids, strconv.FormatInt(tk.ID, 10))
		h := taskboard.Holder{Agent: agent, Session: session}
		if _, err := board.Start(ctx, tk.ID, h); err != nil {
			return "", fmt.Errorf("start task %d: %w", tk.ID, err)
		}
		if _, err := board.Done(ctx, tk.ID, h, "done"); err != nil {
			return "", fmt.Errorf("finish task %d: %w", tk.ID, err)
		}
	}
}
