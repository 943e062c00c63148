package daemon

import (
	"context"
	"testing"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// TestTaskBoardOfAStoreAwayIsAnError: whether a merge queue closes the
// tasks is the setting the daemon recorded; a read of it that the store
// cut short is an error, not a board without a merge queue, which would
// close a reported task unmerged (`swarmd task done` while the server
// restarts).
func TestTaskBoardOfAStoreAwayIsAnError(t *testing.T) {
	srv := pgtest.Require(t)
	if err := srv.CreateDB("board"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	db, err := store.Open(ctx, srv.URL("board"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.SetSetting(ctx, SettingMergeInto, "main"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop("fast"); err != nil {
		t.Fatal(err)
	}
	b, err := OpenTaskBoard(ctx, db, nil)
	if serr := srv.Serve(); serr != nil {
		t.Fatal(serr)
	}
	if err == nil || !store.Transient(err) {
		t.Fatalf("OpenTaskBoard with the server down = %v, %v; want an error the store's return ends", b != nil, err)
	}
	db2, err := store.Open(ctx, srv.URL("board"), store.Options{}) // connections of its own since the restart
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	b, err = OpenTaskBoard(ctx, db2, nil)
	if err != nil {
		t.Fatalf("OpenTaskBoard with the server back: %v", err)
	}
	tk, err := b.Add(ctx, taskboard.NewTask{Title: "work", Assignee: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Claim(ctx, tk.ID, "alice", "alice-1"); err != nil {
		t.Fatal(err)
	}
	got, err := b.DoneAt(ctx, tk.ID, taskboard.Holder{Agent: "alice", Session: "alice-1"}, "did it", "0123456789012345678901234567890123456789")
	if err != nil {
		t.Fatal(err)
	}
	if got.StateName != "DONE" {
		t.Errorf("a task done under a merge queue is %s, want DONE (the queue closes it once merged)", got.StateName)
	}
}
