package store

import (
	"context"
	"testing"
)

// The write connection keeps the statements it runs: a text run again is
// not prepared again, and a text run again while its rows are still being
// read (a query nested in its own loop) gets a statement of its own, so
// that neither run disturbs the other.
func TestWriteConnectionKeepsItsStatements(t *testing.T) {
	db := openTest(t, "", Options{})
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c"} {
		if err := db.SetSetting(ctx, k, "v"+k); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	const q = `SELECT key FROM settings WHERE key IN ('a', 'b', 'c') ORDER BY key`
	rows, err := tx.QueryContext(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	var outer, inner []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		outer = append(outer, k)
		// The same text, nested, while the outer rows are open.
		in, err := tx.QueryContext(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for in.Next() {
			n++
		}
		if err := in.Close(); err != nil {
			t.Fatal(err)
		}
		inner = append(inner, string(rune('0'+n)))
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	if got := len(outer); got != 3 || outer[0] != "a" || outer[2] != "c" {
		t.Fatalf("outer rows %v, want a b c", outer)
	}
	for _, n := range inner {
		if n != "3" {
			t.Fatalf("nested runs saw %v rows, want 3 each", inner)
		}
	}
	// Run again after both closed: the kept statement, reset, gives the
	// whole result again.
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM (`+q+`)`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("count = %d, %v", n, err)
	}
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM (`+q+`)`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("count again = %d, %v", n, err)
	}
}
