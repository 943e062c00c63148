package taskboard

// Scratch: PostgreSQL generic-plan audit. Deleted after use.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store/storetest"
)

type zzQuery struct {
	Label string    `json:"label"`
	SQL   string    `json:"sql"`
	Args  []*string `json:"args"`
}

func TestZZPGAudit(t *testing.T) {
	dir := os.Getenv("ZZ_PGAUDIT")
	if dir == "" {
		t.Skip("ZZ_PGAUDIT unset")
	}
	ctx := context.Background()
	srv := pgtest.Shared(t)
	target := srv.URL(srv.NewDB(t, "zzaudit"))
	db := storetest.OpenTarget(t, target)
	_ = db
	conn, err := pgx.Connect(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	fill, err := os.ReadFile(dir + "/fill.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, string(fill)); err != nil {
		t.Fatalf("fill: %v", err)
	}
	if _, err := conn.Exec(ctx, "ANALYZE"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SET jit = off"); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(dir + "/q.json")
	if err != nil {
		t.Fatal(err)
	}
	var qs []zzQuery
	if err := json.Unmarshal(raw, &qs); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, q := range qs {
		for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
			fmt.Fprintf(&out, "=== %s [%s]\n", q.Label, mode)
			lines, err := zzExplain(ctx, conn, mode, q)
			if err != nil {
				fmt.Fprintf(&out, "ERROR %v\n", err)
				continue
			}
			for _, l := range lines {
				out.WriteString(l + "\n")
			}
		}
	}
	if err := os.WriteFile(dir+"/plans.txt", []byte(out.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if extra, err := os.ReadFile(dir + "/extra.sql"); err == nil && len(extra) > 0 {
		// statements whose output goes to extra.txt (fix checks)
		var eo strings.Builder
		for _, stmt := range strings.Split(string(extra), "\n;;\n") {
			stmt = strings.TrimSpace(stmt)
			if stmt == "" {
				continue
			}
			fmt.Fprintf(&eo, "### %s\n", stmt)
			rows, err := conn.Query(ctx, stmt, pgx.QueryExecModeSimpleProtocol)
			if err != nil {
				fmt.Fprintf(&eo, "ERROR %v\n", err)
				continue
			}
			for rows.Next() {
				vals, _ := rows.Values()
				for i, v := range vals {
					if i > 0 {
						eo.WriteString(" | ")
					}
					fmt.Fprint(&eo, v)
				}
				eo.WriteString("\n")
			}
			if err := rows.Err(); err != nil {
				fmt.Fprintf(&eo, "ERROR %v\n", err)
			}
			rows.Close()
		}
		os.WriteFile(dir+"/extra.txt", []byte(eo.String()), 0o644)
	}
}

func zzExplain(ctx context.Context, conn *pgx.Conn, mode string, q zzQuery) ([]string, error) {
	simple := pgx.QueryExecModeSimpleProtocol
	if _, err := conn.Exec(ctx, "DEALLOCATE ALL", simple); err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode, simple); err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "PREPARE zzq AS "+q.SQL, simple); err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	lits := make([]string, len(q.Args))
	for i, a := range q.Args {
		if a == nil {
			lits[i] = "NULL"
		} else {
			lits[i] = "'" + strings.ReplaceAll(*a, "'", "''") + "'"
		}
	}
	exec := "EXECUTE zzq"
	if len(lits) > 0 {
		exec += "(" + strings.Join(lits, ", ") + ")"
	}
	if _, err := conn.Exec(ctx, "BEGIN", simple); err != nil {
		return nil, err
	}
	defer conn.Exec(ctx, "ROLLBACK", simple)
	lines, err := zzLines(ctx, conn, "EXPLAIN (ANALYZE, BUFFERS) "+exec)
	if err != nil {
		conn.Exec(ctx, "ROLLBACK", simple)
		conn.Exec(ctx, "BEGIN", simple)
		l2, err2 := zzLines(ctx, conn, "EXPLAIN "+exec)
		if err2 != nil {
			return nil, fmt.Errorf("analyze: %v; explain: %w", err, err2)
		}
		return append([]string{"(no ANALYZE: " + err.Error() + ")"}, l2...), nil
	}
	return lines, nil
}

func zzLines(ctx context.Context, conn *pgx.Conn, sql string) ([]string, error) {
	rows, err := conn.Query(ctx, sql, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
