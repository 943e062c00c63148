package backup

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/merge"
	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
	"github.com/swarmd/swarmd/internal/worktree"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(pgtest.Share())) }

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

func openStore(t *testing.T, path string) *store.DB {
	t.Helper()
	db, err := store.Open(context.Background(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestCopyIsOneMomentOfAStoreBeingWritten: a backup taken while a writer
// commits two tasks a transaction holds whole transactions only (an even
// count), passes the integrity check, says when it was taken, and is one
// file, the operator's alone.
func TestCopyIsOneMomentOfAStoreBeingWritten(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db := openStore(t, filepath.Join(dir, "swarm.db"))
	insertPair := func() error {
		return db.InTx(ctx, "pair", func(tx *sql.Tx) error {
			for range 2 {
				if _, err := tx.ExecContext(ctx, `INSERT INTO tasks (title, state, created_by, created_at, updated_at)
					VALUES ('t', 'OPEN', 'operator', 'x', 'x')`); err != nil {
					return err
				}
			}
			return nil
		})
	}
	for range 500 {
		if err := insertPair(); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var werr error
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := insertPair(); err != nil {
				werr = err
				return
			}
		}
	})
	var copies []string
	for i := range 3 {
		path := filepath.Join(dir, fmt.Sprintf("backup-%d.db", i))
		c, err := Copy(ctx, db, path, t0)
		if err != nil {
			close(stop)
			wg.Wait()
			t.Fatal(err)
		}
		if c.Bytes <= 0 || c.Path != path {
			t.Errorf("copied %+v", c)
		}
		copies = append(copies, path)
	}
	close(stop)
	wg.Wait()
	if werr != nil {
		t.Fatalf("the writer failed during the copies: %v", werr)
	}
	for _, path := range copies {
		for _, extra := range []string{"-wal", "-shm"} {
			if _, err := os.Stat(path + extra); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s%s beside the backup: %v", path, extra, err)
			}
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("backup mode %v: the store's mail is the operator's alone", fi.Mode().Perm())
		}
		c := openStore(t, path)
		var n int
		if err := c.ReadSQL().QueryRowContext(ctx, `SELECT COUNT(*) FROM tasks`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n < 1000 || n%2 != 0 {
			t.Errorf("%s holds %d tasks: want whole transactions of two, at least the 1000 before", path, n)
		}
		if err := c.CheckIntegrity(ctx); err != nil {
			t.Error(err)
		}
		v, ok, err := c.Setting(ctx, takenAtKey)
		if err != nil || !ok || v != t0.Format(time.RFC3339Nano) {
			t.Errorf("taken at = %q %v %v, want %s", v, ok, err, t0.Format(time.RFC3339Nano))
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".swarmd-backup-") {
			t.Errorf("%s left in the backup's directory", e.Name())
		}
	}
}

// TestCopyNeverReplacesAFile: a name in use is refused, its file as it was.
func TestCopyNeverReplacesAFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db := openStore(t, filepath.Join(dir, "swarm.db"))
	path := filepath.Join(dir, "taken.db")
	if err := os.WriteFile(path, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Copy(ctx, db, path, t0); !errors.Is(err, ErrExists) {
		t.Fatalf("copy over a file: %v, want ErrExists", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "precious" {
		t.Fatalf("the file is now %q", b)
	}
	if _, err := Copy(ctx, db, db.Path(), t0); err == nil {
		t.Fatal("a copy onto the store itself was made")
	}
}

// TestCopyCutShortLeavesNothing: an interrupted copy leaves no file at
// its name and no work directory beside it.
func TestCopyCutShortLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	db := openStore(t, filepath.Join(dir, "swarm.db"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	path := filepath.Join(dir, "cut.db")
	if _, err := Copy(ctx, db, path, t0); err == nil {
		t.Fatal("a copy with its context cancelled succeeded")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() == "cut.db" || strings.HasPrefix(e.Name(), ".swarmd-backup-") {
			t.Errorf("%s left behind", e.Name())
		}
	}
}

// TestCopyOfAServerIsRefused: PostgreSQL is copied with its own tools.
func TestCopyOfAServerIsRefused(t *testing.T) {
	srv := pgtest.Shared(t)
	db := openStore(t, srv.URL(srv.NewDB(t, "backup")))
	path := filepath.Join(t.TempDir(), "b.db")
	if _, err := Copy(context.Background(), db, path, t0); !errors.Is(err, store.ErrNotFile) {
		t.Fatalf("copy of a PostgreSQL store: %v, want ErrNotFile", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s made: %v", path, err)
	}
}

// git runs git in dir.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.invalid"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// swarm is a state dir with its store, logs and repository.
type swarm struct {
	repo, state string
	db          *store.DB
	board       *taskboard.Board
	logs        *logs.Store
	commits     int
}

func newSwarm(t *testing.T) *swarm {
	t.Helper()
	repo := t.TempDir()
	git(t, repo, "init", "-q", "-b", "main")
	git(t, repo, "commit", "-q", "--allow-empty", "-m", "init")
	state := filepath.Join(repo, ".swarm")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	s := &swarm{repo: repo, state: state, logs: logs.New(state, 0, 0, nil)}
	s.db = openStore(t, filepath.Join(state, "swarm.db"))
	s.board = taskboard.New(s.db, taskboard.Options{})
	return s
}

// session records session seq of agent, and writes its log.
func (s *swarm) session(t *testing.T, agent string, seq uint32) {
	t.Helper()
	ctx := context.Background()
	if err := s.db.BeginSession(ctx, store.SessionRecord{SessionID: fmt.Sprintf("%s-%d", agent, seq), Agent: agent, Seq: seq, Started: t0}); err != nil {
		t.Fatal(err)
	}
	s.log(t, agent, seq)
}

// log writes session seq's log alone (its row is in no store).
func (s *swarm) log(t *testing.T, agent string, seq uint32) {
	t.Helper()
	if err := os.MkdirAll(s.logs.LogDir(agent), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.logs.LogPath(agent, seq), []byte(fmt.Sprintf("session %d\n", seq)), 0o600); err != nil {
		t.Fatal(err)
	}
}

// task adds a task, with its line and, if merged, a merge commit on main
// with the queue's trailer.
func (s *swarm) task(t *testing.T, title string, merged bool) int64 {
	t.Helper()
	tk, err := s.board.Add(context.Background(), taskboard.NewTask{Title: title})
	if err != nil {
		t.Fatal(err)
	}
	s.line(t, tk.ID, merged)
	return tk.ID
}

// line makes task id's line (one commit off main) and, if merged, its
// merge on main.
func (s *swarm) line(t *testing.T, id int64, merged bool) string {
	t.Helper()
	branch := fmt.Sprintf("swarm/task/%d", id)
	git(t, s.repo, "branch", "-f", branch, "main")
	tree := git(t, s.repo, "rev-parse", "main^{tree}")
	s.commits++ // a message of its own: the same line made twice in a second is two commits
	head := git(t, s.repo, "commit-tree", "-p", branch, "-m", fmt.Sprintf("work of %d (%d)", id, s.commits), tree)
	git(t, s.repo, "update-ref", "refs/heads/"+branch, head)
	if merged {
		m := git(t, s.repo, "commit-tree", "-p", "main", "-p", head, "-m",
			fmt.Sprintf("Merge task %d\n\n%s: %d", id, merge.TaskTrailer, id), tree)
		git(t, s.repo, "update-ref", "refs/heads/main", m)
	}
	return head
}

func (s *swarm) restore(t *testing.T, from string) (Report, error) {
	t.Helper()
	ctx := context.Background()
	m, err := worktree.Open(ctx, worktree.Options{Repo: s.repo, StateDir: s.state, BaseRef: "main"})
	if err != nil {
		t.Fatal(err)
	}
	r := &Restore{From: from, StateDir: s.state, Logs: s.logs, Repo: m, Into: "main", Now: func() time.Time { return t0.Add(time.Hour) }}
	return r.Run(ctx)
}

// TestRestoreKeepsWhatCameAfterTheBackup: what the swarm did after the
// backup is not in it, and a restore keeps its traces apart from what
// comes next: sessions and gate runs are numbered after their logs (live
// and archived), the ids of the tasks the repository names are reserved,
// a line that moved is kept, a merge the backup has not closed is listed,
// and the store replaced is moved aside whole.
func TestRestoreKeepsWhatCameAfterTheBackup(t *testing.T) {
	ctx := context.Background()
	s := newSwarm(t)
	one := s.task(t, "merged before", true)
	two := s.task(t, "in progress at the backup", false)
	// The board as the queue and the session left them: one closed, two's
	// line where its last session kept it.
	if _, err := s.db.SQL().ExecContext(ctx, `UPDATE tasks SET state = 'CLOSED' WHERE id = ?`, one); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.SQL().ExecContext(ctx, `UPDATE tasks SET work_head = ? WHERE id = ?`,
		git(t, s.repo, "rev-parse", fmt.Sprintf("swarm/task/%d", two)), two); err != nil {
		t.Fatal(err)
	}
	s.session(t, "alice", 1)
	s.session(t, "alice", 2)
	if _, err := s.logs.Archive(ctx, "alice", t0); err != nil {
		t.Fatal(err)
	}
	s.session(t, "alice", 3)
	// Where the queue knew main at the backup; and a clone whose known tip
	// this repository does not hold (left as it is).
	atBackup := git(t, s.repo, "rev-parse", "main")
	if _, err := s.db.SQL().ExecContext(ctx, `INSERT INTO merge_target (clone, into_branch, tip, updated_at)
		VALUES ('here', 'main', ?, 'x'), ('elsewhere', 'main', ?, 'x')`, atBackup, strings.Repeat("e", 40)); err != nil {
		t.Fatal(err)
	}
	backupPath := filepath.Join(t.TempDir(), "b.db")
	if _, err := Copy(ctx, s.db, backupPath, t0); err != nil {
		t.Fatal(err)
	}

	// After the backup: alice's sessions 4 to 6 (4 and 5 archived), bob's
	// first, three gate runs, task two's line moved on and merged, two
	// tasks more (one merged), and a task added and never started.
	for seq := uint32(4); seq <= 6; seq++ {
		s.session(t, "alice", seq)
		if seq == 5 {
			if _, err := s.logs.Archive(ctx, "alice", t0.Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.session(t, "bob", 1)
	for seq := uint32(1); seq <= 3; seq++ {
		s.log(t, merge.LogName, seq)
	}
	moved := s.line(t, two, true)
	three := s.task(t, "after, merged", true)
	four := s.task(t, "after, a line only", false)
	if _, err := s.board.Add(ctx, taskboard.NewTask{Title: "after, no trace"}); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Close(); err != nil {
		t.Fatal(err)
	}

	rep, err := s.restore(t, backupPath)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.TakenAt.Equal(t0) {
		t.Errorf("taken at %v, want %v", rep.TakenAt, t0)
	}
	wantFloors := map[string][2]uint32{"alice": {3, 6}, "bob": {0, 1}, merge.LogName: {0, 3}}
	if len(rep.Floors) != len(wantFloors) {
		t.Errorf("floors %+v, want %v", rep.Floors, wantFloors)
	}
	for _, f := range rep.Floors {
		if w := wantFloors[f.Agent]; w != [2]uint32{f.Backup, f.Logs} {
			t.Errorf("floor of %s = %d → %d, want %d → %d", f.Agent, f.Backup, f.Logs, w[0], w[1])
		}
	}
	if fmt.Sprint(rep.Reserved) != fmt.Sprint([]int64{three, four}) {
		t.Errorf("reserved %v, want [%d %d]", rep.Reserved, three, four)
	}
	if len(rep.Merged) != 1 || rep.Merged[0].Task != two || rep.Merged[0].State != "OPEN" {
		t.Errorf("merged but open in the backup: %+v, want task %d", rep.Merged, two)
	}
	if len(rep.Kept) != 1 || rep.Kept[0].Task != two || rep.Kept[0].Head != moved {
		t.Fatalf("kept %+v, want task %d's line at %s", rep.Kept, two, moved)
	}
	if got := git(t, s.repo, "rev-parse", rep.Kept[0].Ref); got != moved {
		t.Errorf("%s = %s, want %s", rep.Kept[0].Ref, got, moved)
	}

	// The store replaced, with what it held, is aside; the restored one
	// numbers what comes next after the traces.
	if rep.Aside == "" {
		t.Fatal("no store moved aside")
	}
	old := openStore(t, filepath.Join(rep.Aside, "swarm.db"))
	var n int
	if err := old.ReadSQL().QueryRowContext(ctx, `SELECT COUNT(*) FROM tasks`).Scan(&n); err != nil || n != 5 {
		t.Errorf("the store aside holds %d tasks (%v), want the 5 it had", n, err)
	}
	db := openStore(t, filepath.Join(s.state, "swarm.db"))
	for agent, want := range map[string]uint32{"alice": 6, "bob": 1, "carol": 0} {
		if got, err := db.MaxSeq(ctx, agent); err != nil || got != want {
			t.Errorf("MaxSeq(%s) = %d, %v; want %d", agent, got, err, want)
		}
	}
	tips, err := merge.NewStore(db, nil).KnownTips(ctx, "main")
	if now := git(t, s.repo, "rev-parse", "main"); err != nil || tips["here"] != now || rep.Target != now || rep.TargetWas != atBackup {
		t.Errorf("known tips %v (%v), report %s from %s: want main's tip %s known, moved by the queue's merges alone", tips, err, rep.Target, rep.TargetWas, now)
	}
	if tips["elsewhere"] != strings.Repeat("e", 40) {
		t.Errorf("the other clone's known tip became %s", tips["elsewhere"])
	}
	if got, err := merge.NewStore(db, nil).GateSeq(ctx); err != nil || got != 3 {
		t.Errorf("gate seq = %d, %v; want 3", got, err)
	}
	board := taskboard.New(db, taskboard.Options{})
	next, err := board.Add(ctx, taskboard.NewTask{Title: "after the restore"})
	if err != nil {
		t.Fatal(err)
	}
	if next.ID != four+1 {
		t.Errorf("next task id %d, want %d (after the reserved ones)", next.ID, four+1)
	}
	r, err := board.Get(ctx, three)
	if err != nil || r.State != task.Cancelled || !strings.Contains(r.Result, "merged on main") {
		t.Errorf("task %d = %+v, %v; want CANCELLED saying where it was merged", three, r, err)
	}
	if got, _ := board.Get(ctx, one); got.Title != "merged before" {
		t.Errorf("task %d = %q", one, got.Title)
	}
	for _, extra := range []string{restoring, restoring + "-wal"} {
		if _, err := os.Stat(filepath.Join(s.state, extra)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left in the state dir", extra)
		}
	}
}

// TestRestoreRefusesWhatIsNoBackup: a store in use (its WAL beside it), a
// file that is no database, and a copy from a newer swarmd are refused,
// and the store stays where it was, untouched.
func TestRestoreRefusesWhatIsNoBackup(t *testing.T) {
	ctx := context.Background()
	s := newSwarm(t)
	s.task(t, "kept", false)
	dir := t.TempDir()

	live := filepath.Join(dir, "live.db")
	liveDB := openStore(t, live)
	if _, err := taskboard.New(liveDB, taskboard.Options{}).Add(ctx, taskboard.NewTask{Title: "x"}); err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(dir, "junk.db")
	if err := os.WriteFile(junk, []byte(strings.Repeat("not a database ", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	newer := filepath.Join(dir, "newer.db")
	if _, err := Copy(ctx, s.db, newer, t0); err != nil {
		t.Fatal(err)
	}
	nd, err := sql.Open("sqlite", newer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nd.Exec(`PRAGMA user_version = 100000`); err != nil {
		t.Fatal(err)
	}
	nd.Close()

	for _, c := range []struct {
		from string
		want string
	}{
		{live, "-wal is beside it"},
		{junk, "not a database"},
		{newer, store.ErrSchemaTooNew.Error()},
		{filepath.Join(dir, "missing.db"), "no such file"},
		{filepath.Join(s.state, "swarm.db"), "the store itself"},
	} {
		_, err := s.restore(t, c.from)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("restore of %s: %v, want one line saying %q", filepath.Base(c.from), err, c.want)
		}
	}
	entries, _ := os.ReadDir(s.state)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "before-restore-") {
			t.Errorf("%s: a refused restore moved the store", e.Name())
		}
		if strings.HasPrefix(e.Name(), restoring) {
			t.Errorf("%s: a refused restore left its copy (a daemon would refuse to start)", e.Name())
		}
	}
	if err := CutShort(s.state); err != nil {
		t.Errorf("after refused restores: %v", err)
	}
	if got, err := s.board.List(ctx, taskboard.Filter{}); err != nil || len(got) != 1 || got[0].Title != "kept" {
		t.Errorf("the store after refused restores: %v, %v", got, err)
	}
}

// TestRestoreLeavesAMoveSomeoneElseMade: a commit on the target without
// the queue's trailer since the backup is not taken as the queue's: the
// next start records it.
func TestRestoreLeavesAMoveSomeoneElseMade(t *testing.T) {
	ctx := context.Background()
	s := newSwarm(t)
	atBackup := git(t, s.repo, "rev-parse", "main")
	if _, err := s.db.SQL().ExecContext(ctx, `INSERT INTO merge_target (clone, into_branch, tip, updated_at) VALUES ('here', 'main', ?, 'x')`, atBackup); err != nil {
		t.Fatal(err)
	}
	backupPath := filepath.Join(t.TempDir(), "b.db")
	if _, err := Copy(ctx, s.db, backupPath, t0); err != nil {
		t.Fatal(err)
	}
	s.task(t, "merged by the queue", true)
	git(t, s.repo, "commit", "-q", "--allow-empty", "-m", "a push by hand")
	s.task(t, "merged by the queue again", true)
	s.db.Close()
	rep, err := s.restore(t, backupPath)
	if err != nil {
		t.Fatal(err)
	}
	db := openStore(t, filepath.Join(s.state, "swarm.db"))
	tips, err := merge.NewStore(db, nil).KnownTips(ctx, "main")
	if err != nil || tips["here"] != atBackup || rep.Target != "" {
		t.Fatalf("known tip %s (%v), report %q: want the backup's %s kept", tips["here"], err, rep.Target, atBackup)
	}
}
