package merge

import (
	"context"
	"testing"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
)

// TestPauseResumeOnPostgres: `swarmd merge pause` and `resume` on a
// shared store. The flag's column is an INTEGER, which PostgreSQL's driver
// refused a Go bool for ("unable to encode true into binary format for
// int8"): the queue of a swarm on PostgreSQL could not be paused.
func TestPauseResumeOnPostgres(t *testing.T) {
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "pause")
	ctx := context.Background()
	db, err := store.Open(ctx, srv.URL(dbName), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := NewStore(db, nil)
	if err := s.Pause(ctx, "operator"); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if st, err := s.Status(ctx, 0); err != nil || !st.Paused || st.PausedBy != "operator" {
		t.Fatalf("status after pause = %+v, %v; want paused by operator", st, err)
	}
	if err := s.Resume(ctx, "operator"); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if st, err := s.Status(ctx, 0); err != nil || st.Paused {
		t.Fatalf("status after resume = %+v, %v; want running", st, err)
	}
}
