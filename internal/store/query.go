package store

import (
	"context"
	"database/sql"
	"strings"
	"time"
)

// TimeLayout is how every table stores a time: UTC, microseconds, fixed
// width, so that text order is time order in SQL.
const TimeLayout = "2006-01-02T15:04:05.000000Z"

// noLimit is LIMIT's argument for "all rows" in both dialects (SQLite's
// -1 is an error in PostgreSQL).
const noLimit = 1 << 62

// FormatTime is t as a column value (TimeLayout).
func FormatTime(t time.Time) string { return t.UTC().Format(TimeLayout) }

// ParseTime reads a column written with FormatTime.
func ParseTime(s string) (time.Time, error) { return time.Parse(TimeLayout, s) }

// ParseNullTime reads a nullable time column: nil for NULL.
func ParseNullTime(ns sql.NullString) (*time.Time, error) {
	if !ns.Valid {
		return nil, nil
	}
	t, err := ParseTime(ns.String)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// Scanner is a row: *sql.Row or *sql.Rows.
type Scanner interface{ Scan(...any) error }

// Querier runs a query: *sql.DB, *sql.Tx, *sql.Conn.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// QueryAll runs query and scans every row with scan.
func QueryAll[T any](ctx context.Context, q Querier, scan func(Scanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// AndIn is " AND col IN (?, …)" with vals as its arguments, to scope a
// query to some agents; "" and no arguments when vals is nil (no scope).
// An empty, non-nil vals matches nothing.
func AndIn(col string, vals []string) (string, []any) {
	if vals == nil {
		return "", nil
	}
	if len(vals) == 0 {
		return " AND 1 = 0", nil
	}
	args := make([]any, len(vals))
	for i, v := range vals {
		args[i] = v
	}
	return " AND " + col + " IN (?" + strings.Repeat(", ?", len(vals)-1) + ")", args
}
