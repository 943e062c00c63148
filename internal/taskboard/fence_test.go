package taskboard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/review"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/store/storetest"
	"github.com/swarmd/swarmd/internal/task"
)

// A claim is fenced by the agent's lease on a shared store: a daemon that
// does not hold it (any more) claims nothing, and the refused claim leaves
// the task OPEN with no event; with nothing to claim, ClaimNext says so
// rather than refusing; at the lease's epoch the claim goes through, with
// its event row. On both engines.
func TestClaimNextFencedByLease(t *testing.T) {
	storetest.Engines(t, "claimfence", func(t *testing.T, fresh func(t *testing.T) string) {
		ctx := context.Background()
		db := storetest.OpenTarget(t, fresh(t))
		b := New(db, Options{})
		db.Fence("d1")

		if _, ok, err := b.ClaimNext(ctx, "alice", "s0"); err != nil || ok {
			t.Fatalf("ClaimNext on an empty board, fenced = %v, %v; want nothing, no error", ok, err)
		}
		tk, err := b.Add(ctx, NewTask{Title: "t"})
		if err != nil {
			t.Fatal(err)
		}
		_, ok, err := b.ClaimNext(ctx, "alice", "s1")
		if !errors.Is(err, store.ErrFenced) || ok {
			t.Fatalf("ClaimNext without the lease = %v, %v; want ErrFenced", ok, err)
		}
		got, err := b.Get(ctx, tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.StateName != "OPEN" || got.Claimant != "" {
			t.Fatalf("after the fenced claim: %s, claimant %q; want OPEN, nobody", got.StateName, got.Claimant)
		}
		if h, err := b.History(ctx, tk.ID); err != nil || len(h) != 1 {
			t.Fatalf("events after the fenced claim: %d, %v; want only the task's creation", len(h), err)
		}

		now := time.Now()
		held, _, err := db.AcquireLeases(ctx, store.Lease{Daemon: "d1", Host: "h", PID: 1}, []string{"alice"}, now, time.Minute)
		if err != nil || len(held) != 1 {
			t.Fatalf("AcquireLeases = %v, %v", held, err)
		}
		db.SetFence("alice", held[0].Epoch)
		claimed, ok, err := b.ClaimNext(ctx, "alice", "s2")
		if err != nil || !ok || claimed.ID != tk.ID || claimed.Claimant != "alice" || claimed.ClaimSession != "s2" {
			t.Fatalf("ClaimNext at the lease's epoch = %+v, %v, %v; want task %d for alice, s2", claimed, ok, err, tk.ID)
		}
		// The claim's event row, written with it.
		h, err := b.History(ctx, tk.ID)
		if err != nil || len(h) != 2 {
			t.Fatalf("events after the claim: %d, %v; want 2", len(h), err)
		}
		e := h[1]
		if e.From != "OPEN" || e.To != "CLAIMED" || e.Actor != "agent:alice" || e.Reason != "claimed" || e.Session != "s2" {
			t.Fatalf("the claim's event = %+v; want OPEN -> CLAIMED by agent:alice, claimed, session s2", e)
		}
	})
}

// Claimable counts anyone's tasks up to atMost, every agent's own, and
// none whose dependency is open, nor a task whose dependency closed counts
// until it is OPEN; claims then take the best claimable task by priority,
// skipping one whose dependency is open. On both engines.
func TestClaimableCountsUpToAtMost(t *testing.T) {
	storetest.Engines(t, "claimable", func(t *testing.T, fresh func(t *testing.T) string) {
		ctx := context.Background()
		db := storetest.OpenTarget(t, fresh(t))
		b := New(db, Options{})
		gate, err := b.Add(ctx, NewTask{Title: "gate", Assignee: "nobody"})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			if _, err := b.Add(ctx, NewTask{Title: "open", Priority: i}); err != nil {
				t.Fatal(err)
			}
		}
		// The best by priority, OPEN but waiting on the gate.
		waiting, err := b.Add(ctx, NewTask{Title: "waiting", Priority: 9, After: []int64{gate.ID}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Requeue(ctx, waiting.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Add(ctx, NewTask{Title: "bob's", Assignee: "bob"}); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ atMost, want int }{{3, 3}, {5, 5}, {50, 5}, {0, 0}} {
			anyone, mine, err := b.Claimable(ctx, c.atMost)
			if err != nil {
				t.Fatal(err)
			}
			if anyone != c.want || mine["bob"] != 1 || mine["nobody"] != 1 || len(mine) != 2 {
				t.Errorf("Claimable(%d) = %d, %v; want %d, bob and nobody 1 each", c.atMost, anyone, mine, c.want)
			}
		}
		tk, ok, err := b.ClaimNext(ctx, "alice", "alice-1")
		if err != nil || !ok || tk.Title != "open" || tk.Priority != 4 {
			t.Fatalf("ClaimNext = %+v, %v, %v; want the open task of priority 4, not the waiting one", tk, ok, err)
		}
	})
}

// OpenVersion moves with every write that can give an idle agent work: a
// task put into or changed in the set idle agents are woken for (OPEN, or
// DONE awaiting review), a task CLOSED that another depends on. It stays
// put for a claim, for writes to tasks outside the set, and for a close
// nobody waits for: the router runs its claimable count only when it
// moved. On both engines.
func TestOpenVersionFollowsTheOpenSet(t *testing.T) {
	storetest.Engines(t, "openversion", func(t *testing.T, fresh func(t *testing.T) string) {
		ctx := context.Background()
		db := storetest.OpenTarget(t, fresh(t))
		b := New(db, Options{AutoClose: true, ReviewerOf: func(agent string) (string, int) {
			if agent == "alice" {
				return "rita", 2
			}
			return "", 0
		}})
		last, err := b.OpenVersion(ctx)
		if err != nil {
			t.Fatal(err)
		}
		step := func(what string, moved bool, f func() error) {
			t.Helper()
			if err := f(); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			v, err := b.OpenVersion(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if (v != last) != moved {
				t.Errorf("%s: version %q -> %q; want moved = %v", what, last, v, moved)
			}
			last = v
		}
		var reviewed, solo Task
		step("add an OPEN task", true, func() (err error) {
			reviewed, err = b.Add(ctx, NewTask{Title: "reviewed"})
			return err
		})
		step("add a task behind it (BLOCKED)", false, func() (err error) {
			solo, err = b.Add(ctx, NewTask{Title: "solo", After: []int64{reviewed.ID}})
			return err
		})
		step("claim it (it leaves OPEN: no work for anyone)", false, func() error {
			_, err := b.Claim(ctx, reviewed.ID, "alice", "a-1")
			return err
		})
		step("DONE, waiting for rita's review", true, func() error {
			_, err := b.Done(ctx, reviewed.ID, Holder{Agent: "alice"}, "done")
			return err
		})
		step("PASS closes it, which the task behind it waited for", true, func() error {
			_, err := b.Verdict(ctx, reviewed.ID, "rita", "", true, "good")
			return err
		})
		step("claim the second", false, func() error {
			_, err := b.Claim(ctx, solo.ID, "bob", "b-1")
			return err
		})
		step("start the claimed task", false, func() error {
			_, err := b.Start(ctx, solo.ID, Holder{Agent: "bob"})
			return err
		})
		if got := wantState(t, b, solo.ID, task.InProgress); got.Claimant != "bob" {
			t.Fatalf("solo = %+v", got)
		}
		step("done and closed, nobody waiting for it", false, func() error {
			_, err := b.Done(ctx, solo.ID, Holder{Agent: "bob"}, "done")
			return err
		})
		wantState(t, b, solo.ID, task.Closed)

		// A task OPEN while its dependency is not CLOSED (requeued, or
		// approved from PLANNED) becomes claimable by its dependency's
		// close alone, its own row untouched.
		var gate, waiting Task
		step("add a gate", true, func() (err error) {
			gate, err = b.Add(ctx, NewTask{Title: "gate", Assignee: "bob"})
			return err
		})
		step("add a task behind the gate", false, func() (err error) {
			waiting, err = b.Add(ctx, NewTask{Title: "waiting", After: []int64{gate.ID}})
			return err
		})
		step("requeue it: OPEN, its dependency open", true, func() error {
			_, err := b.Requeue(ctx, waiting.ID)
			return err
		})
		step("claim the gate", false, func() error {
			_, err := b.Claim(ctx, gate.ID, "bob", "b-2")
			return err
		})
		step("close the gate, which the OPEN task waits for", true, func() error {
			_, err := b.Done(ctx, gate.ID, Holder{Agent: "bob"}, "open")
			return err
		})
		wantState(t, b, gate.ID, task.Closed)
	})
}

// A close that opens many tasks moves OpenVersion, and on PostgreSQL by
// one: its triggers move the version once a transaction, where a bump per
// task opened made every update of the one row walk the versions the
// transaction had left of it. A rolled-back savepoint takes its bump with
// it, and the next open in the transaction bumps again. On both engines.
func TestOpenVersionMovesOnceATransaction(t *testing.T) {
	storetest.Engines(t, "versiononce", func(t *testing.T, fresh func(t *testing.T) string) {
		ctx := context.Background()
		target := fresh(t)
		db := storetest.OpenTarget(t, target)
		b := New(db, Options{AutoClose: true})
		gate := add(t, b, NewTask{Title: "gate"})
		const n = 30
		for range n {
			add(t, b, NewTask{Title: "behind the gate", After: []int64{gate.ID}})
		}
		if _, err := b.Claim(ctx, gate.ID, "bob", "b-1"); err != nil {
			t.Fatal(err)
		}
		version := func() int64 {
			t.Helper()
			v, err := b.OpenVersion(ctx)
			if err != nil {
				t.Fatal(err)
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		before := version()
		if _, err := b.Done(ctx, gate.ID, Holder{Agent: "bob"}, "open them"); err != nil {
			t.Fatal(err)
		}
		openState := task.Open
		open, err := b.List(ctx, Filter{State: &openState})
		if err != nil || len(open) != n {
			t.Fatalf("OPEN after the gate closed: %d tasks, %v; want %d", len(open), err, n)
		}
		moved := version() - before
		if moved < 1 || (store.IsPostgres(target) && moved != 1) {
			t.Errorf("the close that opened %d tasks moved the version by %d; want 1 on PostgreSQL, at least 1 on SQLite", n, moved)
		}

		before = version()
		err = db.InTx(ctx, "savepoint", func(tx *sql.Tx) error {
			insert := `INSERT INTO tasks (title, state, created_by, created_at, updated_at) VALUES ('t', 'OPEN', 'test', 'x', 'x')`
			for _, s := range []string{`SAVEPOINT one`, insert, `ROLLBACK TO SAVEPOINT one`, insert} {
				if _, err := tx.ExecContext(ctx, s); err != nil {
					return fmt.Errorf("%s: %w", s, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if moved := version() - before; moved != 1 {
			t.Errorf("an open after a rolled-back one moved the version by %d, want 1", moved)
		}
	})
}

// A task's dependencies come with its row, sorted, from Get and List. On
// both engines (group_concat is string_agg on PostgreSQL).
func TestDepsComeWithTheTask(t *testing.T) {
	storetest.Engines(t, "deps", func(t *testing.T, fresh func(t *testing.T) string) {
		ctx := context.Background()
		b := New(storetest.OpenTarget(t, fresh(t)), Options{})
		var ids []int64
		for range 3 {
			d, err := b.Add(ctx, NewTask{Title: "dep"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, d.ID)
		}
		tk, err := b.Add(ctx, NewTask{Title: "after", After: []int64{ids[2], ids[0], ids[1]}})
		if err != nil {
			t.Fatal(err)
		}
		got, err := b.Get(ctx, tk.ID)
		if err != nil || !slices.Equal(got.Deps, ids) {
			t.Fatalf("Get: deps %v, %v; want %v", got.Deps, err, ids)
		}
		all, err := b.List(ctx, Filter{})
		if err != nil || len(all) != 4 || !slices.Equal(all[3].Deps, ids) || all[0].Deps != nil {
			t.Fatalf("List = %+v, %v; want the last with deps %v, the first with none", all, err, ids)
		}
	})
}

// Claims that wait for the writer's turn together commit in one
// transaction: each takes its own task (each sees the claims before it;
// on PostgreSQL the claimed rows say one transaction wrote them, xmin),
// and one whose agent lost its lease is refused alone, its task left for
// the others. On both engines.
func TestClaimsWaitingTogetherCommitTogether(t *testing.T) {
	storetest.Engines(t, "claimgroup", func(t *testing.T, fresh func(t *testing.T) string) {
		ctx := context.Background()
		target := fresh(t)
		db := storetest.OpenTarget(t, target)
		b := New(db, Options{})
		agents := []string{"ann", "bob", "cal", "dan", "eve", "fay", "gus"}
		for _, a := range agents {
			if _, err := b.Add(ctx, NewTask{Title: "for anyone, " + a}); err != nil {
				t.Fatal(err)
			}
		}
		held := storetest.HoldLeases(t, db, "host1:/srv", agents...)
		tasks := map[int64]string{}
		claim := func(agents []string, fenced string) {
			t.Helper()
			hold, err := db.Begin(ctx) // another writer's turn: the claims queue behind it
			if err != nil {
				t.Fatal(err)
			}
			type claimed struct {
				agent string
				tk    Task
				ok    bool
				err   error
			}
			out := make(chan claimed, len(agents))
			for _, a := range agents {
				go func() {
					tk, ok, err := b.ClaimNext(ctx, a, a+"-1")
					out <- claimed{a, tk, ok, err}
				}()
			}
			deadline := time.Now().Add(10 * time.Second)
			for b.claims.Queued() < len(agents) {
				if time.Now().After(deadline) {
					t.Fatalf("%d claims queued after 10 s, want %d", b.claims.Queued(), len(agents))
				}
				time.Sleep(time.Millisecond)
			}
			trips := db.WriteRoundTrips()
			_ = hold.Rollback()
			for range agents {
				c := <-out
				switch {
				case c.agent == fenced && (!errors.Is(c.err, store.ErrFenced) || c.ok):
					t.Errorf("%s's claim = %v, %v; want ErrFenced (its lease is lost)", c.agent, c.ok, c.err)
				case c.agent != fenced && (c.err != nil || !c.ok):
					t.Errorf("%s's claim = %v, %v; want a task", c.agent, c.ok, c.err)
				case c.agent != fenced:
					if other, dup := tasks[c.tk.ID]; dup {
						t.Errorf("task %d claimed by %s and %s", c.tk.ID, other, c.agent)
					}
					tasks[c.tk.ID] = c.agent
				}
			}
			trips = db.WriteRoundTrips() - trips
			// The batch's claims go to the server together, then their
			// events with the COMMIT; waited for one by one, a round trip
			// each. A fenced claim fails the first try: the batch is
			// applied again, a savepoint each.
			if strings.HasPrefix(target, "postgres") && fenced == "" && trips != 2 {
				t.Errorf("%d claims took %d write round trips, want 2", len(agents), trips)
			}
		}

		claim(agents[:4], "")
		if strings.HasPrefix(target, "postgres") {
			var txs int
			if err := db.ReadSQL().QueryRowContext(ctx, `SELECT COUNT(DISTINCT xmin::text) FROM tasks WHERE state = 'CLAIMED'`).Scan(&txs); err != nil {
				t.Fatal(err)
			}
			if txs != 1 {
				t.Errorf("the 4 claims were written by %d transactions, want 1", txs)
			}
		}

		db.SetFence("gus", held[6].Epoch+1) // gus's lease is another epoch's now
		claim(agents[4:], "gus")
		openState := task.Open
		open, err := b.List(ctx, Filter{State: &openState})
		if err != nil || len(open) != 1 || len(tasks) != 6 {
			t.Fatalf("after the claims: %d OPEN (%v), %d claimed; want 1 (gus's) and 6", len(open), err, len(tasks))
		}
	})
}

// A move in the caller's transaction (a session's start, its settlement)
// reads the task's row once and does not read it back, and a task that
// nothing depends on closes without looking for dependents to unblock: on
// PostgreSQL the row's read is the transaction's one round trip before its
// commit, in the writers' turn. The row as stored says what the moves set,
// and a task that waited for the closed one opens. On both engines.
func TestTxMovesReadTheRowOnce(t *testing.T) {
	storetest.Engines(t, "txmoves", func(t *testing.T, fresh func(t *testing.T) string) {
		ctx := context.Background()
		target := fresh(t)
		db := storetest.OpenTarget(t, target)
		b := New(db, Options{AutoClose: true})
		tk, err := b.Add(ctx, NewTask{Title: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Claim(ctx, tk.ID, "alice", "s1"); err != nil {
			t.Fatal(err)
		}
		h := Holder{Agent: "alice", Session: "s1"}
		moves := []struct {
			name string
			move func(tx *sql.Tx) error
			want task.State
		}{
			{"start", func(tx *sql.Tx) error { return b.StartTx(ctx, tx, tk.ID, h) }, task.InProgress},
			// DONE, then CLOSED (AutoClose), in one transaction.
			{"done", func(tx *sql.Tx) error { return b.DoneTx(ctx, tx, tk.ID, h, "did it", "abc123") }, task.Closed},
		}
		for _, m := range moves {
			before := db.WriteRoundTrips()
			if err := db.InTx(ctx, m.name, m.move); err != nil {
				t.Fatalf("%s: %v", m.name, err)
			}
			if store.IsPostgres(target) {
				// BEGIN, the lock and the row's read; then the update, its
				// event, the notification and COMMIT.
				if got, want := db.WriteRoundTrips()-before, int64(2); got != want {
					t.Errorf("%s: round trips = %d, want %d", m.name, got, want)
				}
			}
			got := wantState(t, b, tk.ID, m.want)
			if got.ClaimSession != "s1" {
				t.Errorf("%s: claim session = %q, want s1", m.name, got.ClaimSession)
			}
		}
		if got, err := b.Get(ctx, tk.ID); err != nil || got.Result != "did it" || got.Head != "abc123" {
			t.Errorf("after done: result %q, head %q, %v; want did it, abc123", got.Result, got.Head, err)
		}

		// A task that waits for another: the other's close opens it.
		first, err := b.Add(ctx, NewTask{Title: "first"})
		if err != nil {
			t.Fatal(err)
		}
		then, err := b.Add(ctx, NewTask{Title: "then", After: []int64{first.ID}})
		if err != nil {
			t.Fatal(err)
		}
		wantState(t, b, then.ID, task.Blocked)
		if _, err := b.Claim(ctx, first.ID, "alice", "s2"); err != nil {
			t.Fatal(err)
		}
		h = Holder{Agent: "alice", Session: "s2"}
		for _, move := range []func(tx *sql.Tx) error{
			func(tx *sql.Tx) error { return b.StartTx(ctx, tx, first.ID, h) },
			func(tx *sql.Tx) error { return b.DoneTx(ctx, tx, first.ID, h, "did it", "") },
		} {
			if err := db.InTx(ctx, "test", move); err != nil {
				t.Fatal(err)
			}
		}
		wantState(t, b, first.ID, task.Closed)
		wantState(t, b, then.ID, task.Open)
	})
}

// The board's reads that run for every prompt, claim and change of the
// database find their rows through an index of those rows alone, on both
// engines and in PostgreSQL's generic plan of a prepared statement too,
// without reading the tasks done before: what an agent holds (every prompt
// and claim asks it), and the DONE tasks ready to merge (the merge feeder
// asks after every change). Indexes over every task ever claimed, or none,
// made those reads the board's whole history.
func TestBoardReadsUseTheirIndexes(t *testing.T) {
	storetest.Engines(t, "indexes", func(t *testing.T, fresh func(t *testing.T) string) {
		ctx := context.Background()
		target := fresh(t)
		db := storetest.OpenTarget(t, target)
		b := New(db, Options{AutoClose: true})
		for i := range 5 {
			add(t, b, NewTask{Title: "done before"})
			h := Holder{Agent: "alice", Session: "s" + strconv.Itoa(i)}
			tk, ok, err := b.ClaimNext(ctx, h.Agent, h.Session)
			if err != nil || !ok {
				t.Fatalf("claim %d = %v, %v", i, ok, err)
			}
			if _, err := b.Start(ctx, tk.ID, h); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Done(ctx, tk.ID, h, "did it"); err != nil {
				t.Fatal(err)
			}
		}
		held := add(t, b, NewTask{Title: "held"})
		if _, err := b.Claim(ctx, held.ID, "alice", "s9"); err != nil {
			t.Fatal(err)
		}
		if got, ok, err := b.Held(ctx, "alice"); err != nil || !ok || got.ID != held.ID {
			t.Fatalf("Held(alice) = %d, %v, %v; want %d", got.ID, ok, err, held.ID)
		}
		conn, err := db.SQL().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if store.IsPostgres(target) {
			if _, err := conn.ExecContext(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
				t.Fatal(err)
			}
		}
		for i, c := range []struct{ name, query, arg, index string }{
			{"held", `SELECT id FROM tasks WHERE ` + holding, "alice", "tasks_held"},
			{"ready to merge", readyToMergeSQL, review.Complete.String(), "tasks_done"},
		} {
			var plan []string
			if store.IsPostgres(target) {
				name := "q" + strconv.Itoa(i)
				if _, err := conn.ExecContext(ctx, `PREPARE `+name+` (text) AS `+strings.Replace(c.query, "?", "$1", 1)); err != nil {
					t.Fatalf("%s: prepare: %v", c.name, err)
				}
				plan = explain(t, conn, `EXPLAIN ANALYZE EXECUTE `+name+` ('`+c.arg+`')`)
				// Read: the rows wanted alone, none of alice's five done tasks.
				if p := strings.Join(plan, "\n"); strings.Contains(p, "Removed by") {
					t.Errorf("%s: the read reads tasks it does not want:\n%s", c.name, p)
				}
			} else {
				plan = explain(t, conn, `EXPLAIN QUERY PLAN `+c.query, c.arg)
			}
			if !strings.Contains(strings.Join(plan, "\n"), c.index) {
				t.Errorf("%s: planned without %s:\n%s", c.name, c.index, strings.Join(plan, "\n"))
			}
		}
	})
}

// explain returns the last column of each row of an EXPLAIN: PostgreSQL's
// plan lines, SQLite's query plan details.
func explain(t *testing.T, conn *sql.Conn, query string, args ...any) []string {
	t.Helper()
	rows, err := conn.QueryContext(context.Background(), query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, fmt.Sprint(vals[len(vals)-1]))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}
