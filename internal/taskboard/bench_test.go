package taskboard

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
)

// BenchmarkClaims: claims per second with 20 concurrent claimants, through
// the board (a claim with its event, in one transaction) and, as the
// baseline, a raw `UPDATE tasks SET state = 'CLAIMED' ... WHERE state =
// 'OPEN'` loop on the same kind of file, in two shapes: one-store, the
// claimants sharing one store (a daemon's agents: the board commits the
// claims that wait together in one transaction), and own-stores, each with
// its own connections (separate processes). b.N tasks are claimed in all;
// ns/op is per claim.
func BenchmarkClaims(b *testing.B) {
	const claimants = 20
	for _, shape := range []string{"own-stores", "one-store"} {
		for _, mode := range []string{"board", "raw-update"} {
			b.Run(shape+"/"+mode, func(b *testing.B) {
				ctx := context.Background()
				path := filepath.Join(b.TempDir(), "swarm.db")
				seed, err := store.Open(ctx, path, store.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer seed.Close()
				board := New(seed, Options{})
				for i := range b.N {
					if _, err := board.Add(ctx, NewTask{Title: fmt.Sprint("t", i)}); err != nil {
						b.Fatal(err)
					}
				}
				dbs := make([]*store.DB, claimants)
				for i := range dbs {
					if shape == "one-store" {
						dbs[i] = seed
						continue
					}
					if dbs[i], err = store.Open(ctx, path, store.Options{}); err != nil {
						b.Fatal(err)
					}
					defer dbs[i].Close()
				}
				boards := make([]*Board, claimants)
				for i := range boards {
					boards[i] = New(dbs[i], Options{})
					if shape == "one-store" {
						boards[i] = board
					}
				}
				var claimed atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				for c := range claimants {
					wg.Go(func() {
						agent := fmt.Sprint("c", c)
						mine := boards[c]
						for i := 0; ; i++ {
							var ok bool
							var err error
							if mode == "board" {
								_, ok, err = mine.ClaimNext(ctx, agent, fmt.Sprint(agent, "-", i, "-s"))
							} else {
								ok, err = rawClaim(ctx, dbs[c].SQL(), agent)
							}
							if err != nil {
								b.Error(err)
								return
							}
							if !ok {
								return
							}
							claimed.Add(1)
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				if got := claimed.Load(); got != int64(b.N) {
					b.Fatalf("%d claims for %d tasks", got, b.N)
				}
			})
		}
	}
}

func rawClaim(ctx context.Context, db *sql.DB, agent string) (bool, error) {
	res, err := db.ExecContext(ctx, `UPDATE tasks SET state = 'CLAIMED', claimant = ?
		WHERE id = (SELECT id FROM tasks WHERE state = 'OPEN' ORDER BY priority DESC, id LIMIT 1)`, agent)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// BenchmarkMovesBehindAGate: a task's claim, start and DONE (auto-closed)
// on PostgreSQL, with a backlog of BLOCKED tasks waiting for one gate task
// and the server's statistics fresh (ANALYZE), against the same moves on a
// board with no backlog, in the same run. ns/op is per task. A close asks
// whether anyone waits for the task; asked with an EXISTS on task_deps, the
// generic plan of a prepared statement read all of task_deps (every row
// names the gate), so each move grew with the backlog.
func BenchmarkMovesBehindAGate(b *testing.B) {
	for _, backlog := range []int{0, 1000, 10000} {
		b.Run(fmt.Sprint("backlog=", backlog), func(b *testing.B) {
			ctx := context.Background()
			srv := pgtest.Require(b)
			name := fmt.Sprint("gate", backlog, "_", b.N)
			if err := srv.CreateDB(name); err != nil {
				b.Fatal(err)
			}
			db, err := store.Open(ctx, srv.URL(name), store.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			board := New(db, Options{AutoClose: true})
			if backlog > 0 {
				gate, err := board.Add(ctx, NewTask{Title: "gate", Assignee: "nobody"})
				if err != nil {
					b.Fatal(err)
				}
				for _, q := range []string{
					fmt.Sprintf(`INSERT INTO tasks (title, state, created_by, created_at, updated_at)
						SELECT 'behind ' || g, 'BLOCKED', 'bench', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z' FROM generate_series(1, %d) g`, backlog),
					fmt.Sprintf(`INSERT INTO task_deps (task_id, dep_id) SELECT id, %d FROM tasks WHERE state = 'BLOCKED'`, gate.ID),
					`ANALYZE`,
				} {
					if _, err := db.SQL().ExecContext(ctx, q); err != nil {
						b.Fatal(err)
					}
				}
			}
			ids := make([]int64, b.N)
			for i := range ids {
				t, err := board.Add(ctx, NewTask{Title: fmt.Sprint("t", i), Assignee: "a"})
				if err != nil {
					b.Fatal(err)
				}
				ids[i] = t.ID
			}
			b.ResetTimer()
			for i, id := range ids {
				session := fmt.Sprint("s", i)
				if _, err := board.Claim(ctx, id, "a", session); err != nil {
					b.Fatal(err)
				}
				h := Holder{Agent: "a", Session: session}
				if _, err := board.Start(ctx, id, h); err != nil {
					b.Fatal(err)
				}
				if _, err := board.Done(ctx, id, h, "done"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReadyToMerge: the merge feeder's read, asked after every change
// of the database, on a board of 10,000 CLOSED tasks and 3 DONE ones: it
// should cost what the DONE tasks cost, not the board's history.
func BenchmarkReadyToMerge(b *testing.B) {
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(b.TempDir(), "swarm.db"), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	err = db.InTx(ctx, "history", func(tx *sql.Tx) error {
		for i := range 10_003 {
			state := "CLOSED"
			if i%5000 == 0 {
				state = "DONE"
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO tasks (title, state, claimant, created_by, created_at, updated_at)
				VALUES ('t', ?, 'alice', 'bench', 'x', 'x')`, state); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	board := New(db, Options{})
	b.ResetTimer()
	for b.Loop() {
		ready, err := board.ReadyToMerge(ctx, nil)
		if err != nil || len(ready) != 3 {
			b.Fatalf("ReadyToMerge = %d tasks, %v; want 3", len(ready), err)
		}
	}
}

// BenchmarkBoardHistory: the dashboards' read of the board (Board) against
// reading every task (List, what they read before), on a board of 50 tasks
// not over and a history of CLOSED ones. Board's cost should stay flat as
// the history grows; List's grows with it.
func BenchmarkBoardHistory(b *testing.B) {
	for _, history := range []int{1_000, 20_000, 200_000} {
		ctx := context.Background()
		db, err := store.Open(ctx, filepath.Join(b.TempDir(), "swarm.db"), store.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		// The history written straight: a board's own path to CLOSED is
		// a claim, a report and a close a task, minutes for 20,000.
		if _, err := db.SQL().ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
			INSERT INTO tasks (title, body, state, result, created_by, created_at, updated_at)
			SELECT 'done ' || i, 'a body of a task, as long as a short one is', 'CLOSED', 'what was done', 'operator', '2026-01-01T00:00:00Z',
				'2026-01-01T00:00:00Z' FROM n`, history); err != nil {
			b.Fatal(err)
		}
		board := New(db, Options{})
		for i := range 50 {
			if _, err := board.Add(ctx, NewTask{Title: fmt.Sprint("open ", i)}); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("history=%d/board", history), func(b *testing.B) {
			for b.Loop() {
				if _, _, _, err := board.Board(ctx, 20); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("history=%d/list-all", history), func(b *testing.B) {
			for b.Loop() {
				if _, err := board.List(ctx, Filter{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
