package store

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
)

// SpendTally gives what Spend gives, on both engines, as sessions begin and
// settle, and keeps each agent's settled prefix so that the next read
// starts after it.
func TestSpendTallyIsSpend(t *testing.T) {
	eachEngine(t, "tally", func(t *testing.T, db *DB) {
		ctx := context.Background()
		exec := func(q string, args ...any) { t.Helper(); mustExec(t, db, q, args...) }
		begin := func(agent string, seq int) {
			exec(`INSERT INTO sessions (session_id, agent, seq, started_at) VALUES (?, ?, ?, ?)`,
				fmt.Sprint(agent, "-", seq), agent, seq, FormatTime(t0))
		}
		settle := func(agent string, seq int, tokens int64, cost float64, commits int) {
			exec(`UPDATE sessions SET ended_at = ?, outcome = ?, tokens_in = ?, tokens_out = ?, cost_usd = ?, commits = ?,
					settled_at = ? WHERE session_id = ?`, FormatTime(t0), OutcomeSuccess, tokens, 2*tokens, cost, commits,
				FormatTime(t0), fmt.Sprint(agent, "-", seq))
		}
		var tally SpendTally
		check := func(when string) {
			t.Helper()
			want, err := db.spendSum(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tally.Spend(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%s: tally %+v, Spend %+v", when, got, want)
			}
			for name, w := range want {
				g := got[name]
				if g.Agent != w.Agent || g.Sessions != w.Sessions || g.TokensIn != w.TokensIn || g.TokensOut != w.TokensOut ||
					g.Commits != w.Commits || math.Abs(g.CostUSD-w.CostUSD) > 1e-9 {
					t.Errorf("%s: %s's tally %+v, Spend %+v", when, name, g, w)
				}
			}
		}
		check("no sessions")
		for seq := 1; seq <= 3; seq++ {
			begin("alice", seq)
			settle("alice", seq, 10, 0.25, 1)
		}
		begin("alice", 4) // running
		begin("bob", 1)
		settle("bob", 1, 5, 0.5, 0)
		begin("bob", 2) // not settled, with a settled one after it
		begin("bob", 3)
		settle("bob", 3, 7, 0.125, 2)
		check("first read")
		if a, b := tally.agents["alice"].upTo, tally.agents["bob"].upTo; a != 3 || b != 1 {
			t.Fatalf("final sums up to alice %d, bob %d; want 3 and 1", a, b)
		}
		check("read again, nothing changed")
		settle("alice", 4, 1, 1, 0)
		begin("alice", 5)
		settle("bob", 2, 3, 0.5, 1)
		begin("carol", 1)
		check("after more settled")
		if a, b := tally.agents["alice"].upTo, tally.agents["bob"].upTo; a != 4 || b != 3 {
			t.Fatalf("final sums up to alice %d, bob %d; want 4 and 3", a, b)
		}

		// Saved, the prefixes are where the next tally (a command's, the
		// next start's) begins; Spend is such a tally.
		if err := tally.Save(ctx, db); err != nil {
			t.Fatal(err)
		}
		fresh := func(when string) {
			t.Helper()
			tally = SpendTally{}
			check(when)
			if a, b := tally.agents["alice"].upTo, tally.agents["bob"].upTo; a != 4 || b != 3 {
				t.Fatalf("%s: began at alice %d, bob %d; want 4 and 3", when, a, b)
			}
		}
		fresh("a new tally after a save")
		got, err := db.Spend(ctx)
		if want, _ := db.spendSum(ctx); err != nil || got["alice"].Sessions != want["alice"].Sessions || got["bob"].TokensIn != want["bob"].TokensIn {
			t.Fatalf("Spend = %+v, %v; want %+v", got, err, want)
		}
		// A save behind what is there changes nothing.
		behind := SpendTally{agents: map[string]*tallied{"alice": {upTo: 1, sum: Spend{Agent: "alice", Sessions: 1}}}, moved: true}
		if err := behind.Save(ctx, db); err != nil {
			t.Fatal(err)
		}
		fresh("a new tally after a save behind")

		// The migration that added the table made the prefixes from the
		// sessions as they were: its statement again gives the same.
		name, migrations := "migrations/0040_spend_settled.sql", migrationFS
		if db.drv.name() == "postgres" {
			name, migrations = "migrations/postgres/0040_spend_settled.sql", pgMigrationFS
		}
		text, err := migrations.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		_, insert, ok := strings.Cut(string(text), "INSERT INTO spend_settled")
		if !ok {
			t.Fatalf("%s makes no prefixes", name)
		}
		exec(`DELETE FROM spend_settled`)
		exec(`INSERT INTO spend_settled` + insert)
		fresh("a new tally after the migration's statement")
	})
}

// BenchmarkSpendHistory: the dashboards' spend read once a swarm has a
// history (20 agents, each with one session running), by Spend (every
// session each time) and by a SpendTally read before (the sessions since).
func BenchmarkSpendHistory(b *testing.B) {
	for _, history := range []int{1_000, 20_000} {
		ctx := context.Background()
		db := openTest(b, "", Options{})
		if _, err := db.SQL().ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ? - 1)
			INSERT INTO sessions (session_id, agent, seq, started_at, ended_at, outcome, tokens_in, tokens_out, cost_usd, settled_at)
			SELECT 'a' || (i % 20) || '-' || (i / 20 + 1), 'a' || (i % 20), i / 20 + 1, ?, ?, 'success', 100, 200, 0.01,
				CASE WHEN i >= ? - 20 THEN NULL ELSE ? END FROM n`, history, FormatTime(t0), FormatTime(t0), history, FormatTime(t0)); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("history=%d/spend", history), func(b *testing.B) {
			for b.Loop() {
				if _, err := db.spendSum(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("history=%d/unsaved", history), func(b *testing.B) {
			for b.Loop() {
				if _, err := db.Spend(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		var tally SpendTally
		if _, err := tally.Spend(ctx, db); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("history=%d/tally", history), func(b *testing.B) {
			for b.Loop() {
				if _, err := tally.Spend(ctx, db); err != nil {
					b.Fatal(err)
				}
			}
		})
		// A command's read (swarmd status): a new tally from the saved
		// prefixes.
		if err := tally.Save(ctx, db); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("history=%d/saved", history), func(b *testing.B) {
			for b.Loop() {
				if _, err := db.Spend(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
