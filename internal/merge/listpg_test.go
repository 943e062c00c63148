package merge

import (
	"context"
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
)

// TestListAllOnPostgres: List with no limit (swarmd merge list --limit 0)
// lists every entry on PostgreSQL too, which refuses a negative LIMIT.
func TestListAllOnPostgres(t *testing.T) {
	srv := pgtest.Shared(t)
	dbName := srv.NewDB(t, "listall")
	ctx := context.Background()
	db, err := store.Open(ctx, srv.URL(dbName), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st := NewStore(db, nil)
	for task := int64(1); task <= 3; task++ {
		if _, err := st.Enqueue(ctx, task, "w", "swarm/w/work", strings.Repeat("a", 40)); err != nil {
			t.Fatal(err)
		}
	}
	for _, limit := range []int{0, -1} {
		if es, err := st.List(ctx, limit); err != nil || len(es) != 3 || es[0].Task != 1 {
			t.Errorf("List(%d) = %d entries, %v; want all 3, oldest first", limit, len(es), err)
		}
	}
	if es, err := st.List(ctx, 2); err != nil || len(es) != 2 || es[0].Task != 2 {
		t.Errorf("List(2) = %+v, %v; want tasks 2 and 3", es, err)
	}
}
