package main

import (
	"context"

	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// settingMergeInto records the daemon's merge.into in swarm.db ("" : no
// merge queue), so that every process's board agrees on who closes a DONE
// task: the merge queue, once the work is merged, or the board at once.
const settingMergeInto = "merge.into"

// openTaskBoard is the task board in db, as the daemon and every `swarmd
// task` process use it. Without a merge queue a DONE task that no reviewer
// holds is CLOSED at once; with one, the queue closes it once merged.
// reviewerOf may be nil (a process that claims for no configured agent).
func openTaskBoard(db *mailbox.DB, reviewerOf func(agent string) (string, int)) *taskboard.Board {
	into, _, _ := db.Setting(context.Background(), settingMergeInto)
	return taskboard.New(db, taskboard.Options{AutoClose: into == "", ReviewerOf: reviewerOf})
}

// reviewerOf is what cfg's agents say about reviewing their tasks.
func reviewerOf(cfg func() *config.Config) func(agent string) (string, int) {
	return func(agent string) (string, int) {
		a, ok := cfg().Agent(agent)
		if !ok {
			return "", 0
		}
		return a.Reviewer, a.MaxIterations
	}
}
