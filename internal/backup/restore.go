package backup

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/merge"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// Repo is what a restore reads of the repository, and keeps there.
type Repo interface {
	// Lines are the task lines, task to head.
	Lines(ctx context.Context) (map[int64]string, error)
	// FirstParentTrailers are the tasks named by trailer key along rev's
	// first parents, task to commit.
	FirstParentTrailers(ctx context.Context, rev, key string) (map[int64]string, error)
	// KeepRef points ref at head.
	KeepRef(ctx context.Context, ref, head, why string) error
	// TrailedSince reports whether every commit along to's first parents
	// after from carries trailer key (from being to's ancestor), and to.
	TrailedSince(ctx context.Context, from, to, key string) (tip string, ok bool, err error)
}

// Restore is one restore of a backup in place of a swarm's store. The
// caller holds the state dir's lock: no daemon runs on it meanwhile.
type Restore struct {
	From     string      // the backup
	StateDir string      // the store is StateDir/swarm.db
	Logs     *logs.Store // the state dir's session and gate logs
	Repo     Repo        // nil: the repository could not be read (Report.NoRepo)
	Into     string      // the merge queue's target ("": none)
	Now      func() time.Time
}

// Floor is a numbering a restore raised past what the backup had.
type Floor struct {
	Agent  string // an agent, or merge.LogName for the gate runs
	Backup uint32 // the backup's highest
	Logs   uint32 // the logs' highest: the next is after it
}

// Merged is a task the target holds a merge of, which the backup has not
// closed.
type Merged struct {
	Task   int64
	Commit string
	State  string
}

// Kept is a task line that moved after the backup: its head is kept
// under Ref, since the task's next session starts from where the board
// says and would move the branch.
type Kept struct {
	Task      int64
	Head, Ref string
	Recorded  string // where the board has the line ("": nowhere yet)
}

// Report is what a restore did and found.
type Report struct {
	Store   string    // the store restored
	TakenAt time.Time // zero: the file does not say (not made by swarmd backup)
	Aside   string    // where the store it replaced went ("": there was none)
	Floors  []Floor
	// Reserved are the task ids made after the backup, which the
	// repository names (a line, a merge): kept as CANCELLED placeholders.
	Reserved []int64
	Merged   []Merged
	Kept     []Kept
	// Target is where the merge target stands, when the backup knew it
	// at an earlier commit and only the queue's merges moved it since
	// (the store knows it there now: no move someone else made is
	// recorded at the next start); "" otherwise.
	Target, TargetWas string
	NoRepo            bool // the repository was not read: task ids were not checked
}

// ErrNotBackup: the file given is not one a restore takes.
var ErrNotBackup = errors.New("not a backup")

// restoring is the name, in the state dir, of the copy being prepared.
// A restore that fails removes it; one killed leaves it, and CutShort
// finds it.
const restoring = "swarm.db.restoring"

// CutShort reports a restore into stateDir that was killed before it
// ended: the store may be missing (moved aside, the copy not yet in
// place), and a daemon must not start, which would make a new, empty
// one. A second restore of the same backup finishes it.
func CutShort(stateDir string) error {
	p := filepath.Join(stateDir, restoring)
	if _, err := os.Lstat(p); err != nil {
		return nil
	}
	return fmt.Errorf("%s is there: a restore was cut short, and the store may be missing; run swarmd restore again", p)
}

// Run restores r.From as the store. It prepares a copy beside the store
// (checked, migrated, its numberings raised past what the logs and the
// repository hold), moves the store it replaces, with its WAL, into a
// directory of its own in the state dir, and renames the copy into place.
// Until that rename the store is as it was; a restore cut short leaves
// the prepared copy, which the next restore removes.
func (r *Restore) Run(ctx context.Context) (Report, error) {
	rep, err := r.run(ctx)
	if err != nil {
		return rep, fmt.Errorf("restore %s: %w", r.From, err)
	}
	return rep, nil
}

func (r *Restore) run(ctx context.Context) (Report, error) {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	dbPath := filepath.Join(r.StateDir, "swarm.db")
	rep := Report{Store: dbPath}
	from, err := filepath.Abs(r.From)
	if err != nil {
		return rep, err
	}
	if fi, err := os.Stat(from); err != nil {
		return rep, err
	} else if !fi.Mode().IsRegular() {
		return rep, fmt.Errorf("%w: not a regular file", ErrNotBackup)
	}
	if same, err := sameFile(from, dbPath); err != nil {
		return rep, err
	} else if same {
		return rep, fmt.Errorf("%w: it is the store itself", ErrNotBackup)
	}
	if fi, err := os.Stat(from + "-wal"); err == nil && fi.Size() > 0 {
		// Without its WAL the file lacks what was written last; with it,
		// it is a live store, which a copy does not read consistently.
		return rep, fmt.Errorf("%w: %s-wal is beside it: it is a store in use or one that was not closed (take a backup with swarmd backup)", ErrNotBackup, from)
	}
	prep := filepath.Join(r.StateDir, restoring)
	for _, p := range []string{prep, prep + "-wal", prep + "-shm"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return rep, err
		}
	}
	if err := copyFile(from, prep); err != nil {
		return rep, fmt.Errorf("copy it into the state dir: %w", err)
	}
	placed := false
	defer func() {
		if !placed {
			for _, p := range []string{prep, prep + "-wal", prep + "-shm"} {
				_ = os.Remove(p)
			}
		}
	}()
	if err := r.prepare(ctx, prep, &rep, now()); err != nil {
		return rep, err
	}
	if _, err := syncFile(prep); err != nil {
		return rep, err
	}
	aside, err := moveAside(r.StateDir, dbPath, now())
	if err != nil {
		return rep, fmt.Errorf("move the store aside: %w", err)
	}
	rep.Aside = aside
	if err := os.Rename(prep, dbPath); err != nil {
		// The store is aside and the copy not in place: the copy stays,
		// so that no daemon starts on a new, empty store (CutShort).
		placed = true
		return rep, fmt.Errorf("%w (the store replaced is in %s)", err, aside)
	}
	placed = true
	return rep, syncDir(r.StateDir)
}

// prepare opens the copy at path (migrating it if it is older than this
// swarmd), checks it whole, and raises its numberings.
func (r *Restore) prepare(ctx context.Context, path string, rep *Report, now time.Time) (err error) {
	db, err := store.Open(ctx, path, store.Options{NoCreate: true})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := db.Close(); err == nil {
			err = cerr
		}
	}()
	if err := db.CheckIntegrity(ctx); err != nil {
		return err
	}
	if v, ok, err := db.Setting(ctx, takenAtKey); err != nil {
		return err
	} else if ok {
		rep.TakenAt, _ = time.Parse(time.RFC3339Nano, v)
	}
	if err := r.floorSeqs(ctx, db, rep); err != nil {
		return err
	}
	if err := r.reserveTasks(ctx, db, rep, now); err != nil {
		return err
	}
	if err := r.knowTarget(ctx, db, rep); err != nil {
		return err
	}
	return db.SetSetting(ctx, "backup/restored_at", now.UTC().Format(time.RFC3339Nano))
}

// floorSeqs raises each agent's session seq, and the gate runs', past the
// highest its logs hold.
func (r *Restore) floorSeqs(ctx context.Context, db *store.DB, rep *Report) error {
	names, err := r.Logs.Agents()
	if err != nil {
		return err
	}
	// Archives made before the backup hold no session after it; an hour's
	// margin for a clock that moved. A copy that does not say when it was
	// taken has every archive read.
	var since time.Time
	if !rep.TakenAt.IsZero() {
		since = rep.TakenAt.Add(-time.Hour)
	}
	ms := merge.NewStore(db, nil)
	for _, name := range names {
		hi, err := r.Logs.HighestSeq(name, since)
		if err != nil {
			return err
		}
		var had uint32
		if name == merge.LogName {
			if had, err = ms.GateSeq(ctx); err == nil && hi > had {
				err = ms.FloorGateSeq(ctx, hi)
			}
		} else if had, err = db.MaxSeq(ctx, name); err == nil && hi > had {
			err = db.SetSeqFloor(ctx, name, hi)
		}
		if err != nil {
			return err
		}
		if hi > had {
			rep.Floors = append(rep.Floors, Floor{Agent: name, Backup: had, Logs: hi})
		}
	}
	return nil
}

// reserveTasks keeps the ids of the tasks the repository names and the
// backup has not (made after it) from new tasks, finds the merges the
// backup has not closed, and keeps the heads of lines that moved.
func (r *Restore) reserveTasks(ctx context.Context, db *store.DB, rep *Report, now time.Time) error {
	if r.Repo == nil {
		rep.NoRepo = true
		return nil
	}
	lines, err := r.Repo.Lines(ctx)
	if err != nil {
		return err
	}
	merges := map[int64]string{}
	if r.Into != "" {
		if merges, err = r.Repo.FirstParentTrailers(ctx, r.Into, merge.TaskTrailer); err != nil {
			return err
		}
	}
	ids := slices.Sorted(maps.Keys(lines))
	for id := range merges {
		if _, ok := lines[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	board := taskboard.New(db, taskboard.Options{Now: func() time.Time { return now }})
	stamp := now.UTC().Format("20060102T150405Z")
	for _, id := range ids {
		t, err := board.Get(ctx, id)
		switch {
		case errors.Is(err, taskboard.ErrNotFound):
			why := fmt.Sprintf("made after the backup this board was restored from; its line %s", lineWhere(id, lines[id], merges[id], r.Into))
			if _, err := board.Reserve(ctx, id, why); err != nil {
				return err
			}
			rep.Reserved = append(rep.Reserved, id)
			continue
		case err != nil:
			return err
		}
		if c, ok := merges[id]; ok && t.State != task.Closed {
			rep.Merged = append(rep.Merged, Merged{Task: id, Commit: c, State: t.State.String()})
		}
		head, ok := lines[id]
		if !ok || head == t.WorkHead || head == t.Head || t.State.IsTerminal() {
			continue
		}
		ref := fmt.Sprintf("refs/swarmd/restored/%s/task/%d", stamp, id)
		if err := r.Repo.KeepRef(ctx, ref, head, fmt.Sprintf("task %d's line as it stood at a restore", id)); err != nil {
			return err
		}
		rep.Kept = append(rep.Kept, Kept{Task: id, Head: head, Ref: ref, Recorded: cmpOr(t.WorkHead, t.Head)})
	}
	return nil
}

// knowTarget makes the merge target's tip the one the store knows, where
// the queue's merges alone moved it since the backup's.
func (r *Restore) knowTarget(ctx context.Context, db *store.DB, rep *Report) error {
	if r.Repo == nil || r.Into == "" {
		return nil
	}
	ms := merge.NewStore(db, nil)
	tips, err := ms.KnownTips(ctx, r.Into)
	if err != nil {
		return err
	}
	for _, clone := range slices.Sorted(maps.Keys(tips)) {
		was := tips[clone]
		cur, ok, err := r.Repo.TrailedSince(ctx, was, r.Into, merge.TaskTrailer)
		if err != nil {
			return err
		}
		if !ok || cur == was {
			continue
		}
		if err := ms.SetKnownTip(ctx, clone, r.Into, cur); err != nil {
			return err
		}
		rep.Target, rep.TargetWas = cur, was
	}
	return nil
}

// lineWhere says where the repository has task id's work.
func lineWhere(id int64, head, commit, into string) string {
	switch {
	case head != "" && commit != "":
		return fmt.Sprintf("swarm/task/%d is at %.12s, merged on %s as %.12s", id, head, into, commit)
	case head != "":
		return fmt.Sprintf("swarm/task/%d is at %.12s", id, head)
	default:
		return fmt.Sprintf("was merged on %s as %.12s", into, commit)
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// moveAside moves the store at dbPath, with its WAL and shared memory,
// into a new directory of the state dir, and returns it ("" when there
// was no store).
func moveAside(stateDir, dbPath string, now time.Time) (string, error) {
	if _, err := os.Stat(dbPath); errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	dir := filepath.Join(stateDir, "before-restore-"+now.UTC().Format("20060102T150405Z"))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		err := os.Rename(dbPath+suffix, filepath.Join(dir, "swarm.db"+suffix))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
	}
	return dir, syncDir(stateDir)
}

// sameFile reports whether a and b are one file (b may not exist).
func sameFile(a, b string) (bool, error) {
	fa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	fb, err := os.Stat(b)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(fa, fb), nil
}
