package daemon

import (
	"context"
	"fmt"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// SettingMergeInto records the daemon's merge.into in swarm.db ("" : no
// merge queue), so that every process's board agrees on who closes a DONE
// task: the merge queue, once the work is merged, or the board at once.
// On a shared store each daemon also records it as its own
// (store.DB.SetDaemonSetting), under this key.
const SettingMergeInto = "merge.into"

// OpenTaskBoard is the task board in db, as the daemon and every `swarmd
// task` process use it. Without a merge queue a DONE task that no reviewer
// holds is CLOSED at once; with one, the queue closes it once merged.
// p may be nil (a process that claims for no configured agent). Which of
// the two it is, the setting the daemon recorded says: a read of it the
// store cut short is an error, never taken for no merge queue, which
// would close a DONE task unmerged.
func OpenTaskBoard(ctx context.Context, db *store.DB, p *ReviewPolicy) (*taskboard.Board, error) {
	into, _, err := db.Setting(ctx, SettingMergeInto)
	if err != nil {
		return nil, fmt.Errorf("read whether a merge queue closes the tasks (setting %s): %w", SettingMergeInto, err)
	}
	return newTaskBoard(db, into, p), nil
}

// newTaskBoard is the task board in db under merge target into ("": no
// merge queue).
func newTaskBoard(db *store.DB, into string, p *ReviewPolicy) *taskboard.Board {
	opts := taskboard.Options{AutoClose: into == "", FrozenHead: into != ""}
	if p != nil {
		opts.ReviewerOf, opts.ReviewOnly = p.ReviewerOf, p.ReviewOnly
	}
	return taskboard.New(db, opts)
}

// ConfigReviewPolicy is what cfg's agents say about reviews (cfg is read
// at each use: a reload applies at once).
func ConfigReviewPolicy(cfg func() *config.Config) *ReviewPolicy {
	return &ReviewPolicy{
		ReviewerOf: func(agent string) (string, int) {
			a, ok := cfg().Agent(agent)
			if !ok {
				return "", 0
			}
			return a.Reviewer, a.MaxIterations
		},
		ReviewOnly: func(agent string) bool { return cfg().ReviewOnly(agent) },
	}
}
