package mailbox

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/store"
)

var benchBody = strings.Repeat("status: tests pass on my branch, please merge. ", 5) // ~240 bytes

// BenchmarkSend is the whole Send path: validation, clock, the INSERT that
// assigns id and thread, the commit.
func BenchmarkSend(b *testing.B) {
	ctx := context.Background()
	db := openTest(b, "", Options{Agents: testAgents})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := db.Send(ctx, Draft{From: "alice", To: "bob", Subject: "status", Body: benchBody}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawInsert is the floor Send is measured against: a plain INSERT
// through database/sql into the same schema, with the same DSN (pragmas,
// _txlock) and pool size, on the same kind of file. "prepared" prepares it
// once, as Send does, which isolates what Send itself adds.
func BenchmarkRawInsert(b *testing.B) {
	ctx := context.Background()
	const q = `INSERT INTO messages (thread_id, sender, recipient, subject, body, urgency, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`
	// The store's own write pool: the same DSN, pragmas and schema.
	open := func(b *testing.B) *sql.DB { return openTest(b, "", Options{}).Store().SQL() }
	args := func(i int) []any {
		return []any{i, "alice", "bob", "status", benchBody, "normal", time.Now().UTC().Format(store.TimeLayout)}
	}
	b.Run("plain", func(b *testing.B) {
		raw := open(b)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			if _, err := raw.ExecContext(ctx, q, args(i)...); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("prepared", func(b *testing.B) {
		stmt, err := open(b).PrepareContext(ctx, q)
		if err != nil {
			b.Fatal(err)
		}
		defer stmt.Close()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			if _, err := stmt.ExecContext(ctx, args(i)...); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkConsumeForPrompt: "empty" is the common case (a prompt with no
// mail); "10" reads and marks ten messages, among 10k delivered ones.
func BenchmarkConsumeForPrompt(b *testing.B) {
	ctx := context.Background()
	for _, pending := range []int{0, 10} {
		b.Run(fmt.Sprintf("pending=%d", pending), func(b *testing.B) {
			db := openTest(b, "", Options{Agents: testAgents})
			fill := func(n int) {
				tx, err := db.Store().SQL().BeginTx(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				defer tx.Rollback()
				for range n {
					if _, err := db.insert(ctx, tx, db.draftMessage(Draft{From: "alice", To: "bob", Body: benchBody})); err != nil {
						b.Fatal(err)
					}
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
			}
			fill(10000)
			if _, err := db.ConsumeForPrompt(ctx, "bob", "warm-up"); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if pending > 0 {
					b.StopTimer()
					fill(pending)
					b.StartTimer()
				}
				i++
				ms, err := db.ConsumeForPrompt(ctx, "bob", fmt.Sprint("s", i))
				if err != nil || len(ms) != pending {
					b.Fatalf("consumed %d, %v; want %d", len(ms), err, pending)
				}
			}
		})
	}
}

func BenchmarkDataVersion(b *testing.B) {
	ctx := context.Background()
	db := openTest(b, "", Options{})
	if _, err := db.DataVersion(ctx); err != nil { // take the connection outside the loop
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := db.DataVersion(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSendParallel measures the single-connection write pool against a
// pool of four: with more write connections, in-process writers meet in
// SQLite's busy handler, which sleeps in millisecond steps, instead of
// queueing on the pool. Throughput and the latency tail are both reported.
func BenchmarkSendParallel(b *testing.B) {
	ctx := context.Background()
	for _, conns := range []int{1, 4} {
		b.Run(fmt.Sprintf("writeConns=%d", conns), func(b *testing.B) {
			db := openTest(b, "", Options{Agents: testAgents})
			db.Store().SQL().SetMaxOpenConns(conns)
			var mu sync.Mutex
			var lat []time.Duration
			b.SetParallelism(4)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var mine []time.Duration
				for pb.Next() {
					start := time.Now()
					if _, err := db.Send(ctx, Draft{From: "alice", To: "bob", Body: benchBody}); err != nil {
						b.Error(err)
						return
					}
					mine = append(mine, time.Since(start))
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			})
			if len(lat) == 0 {
				return
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-µs")
		})
	}
}

// BenchmarkSendOnceHistory is a send as `swarmd mail send` makes it (with
// Draft.At, stored once however often retried), urgent so that its calm
// check runs too, over a store holding 0 and 20,000 messages of other
// senders: what it reads to find an earlier attempt must not grow with the
// mail the swarm ever sent.
func BenchmarkSendOnceHistory(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{0, 20_000} {
		b.Run(fmt.Sprintf("messages=%d", n), func(b *testing.B) {
			db := openTest(b, "", Options{Agents: testAgents})
			for i := range n {
				if _, err := db.Send(ctx, Draft{From: "bob", To: "alice", Subject: "old", Body: benchBody + strconv.Itoa(i)}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := db.Send(ctx, Draft{From: "alice", To: "bob", Subject: "status", Body: benchBody, Urgent: true, At: time.Now()}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
