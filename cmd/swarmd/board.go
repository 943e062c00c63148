package main

import (
	"github.com/swarmd/swarmd/internal/config"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// openTaskBoard is the task board in db, as the daemon and every `swarmd
// task` process use it. Nothing merges work yet, so a DONE task that no
// reviewer holds is CLOSED at once. reviewerOf may be nil (a process that
// claims for no configured agent).
func openTaskBoard(db *mailbox.DB, reviewerOf func(agent string) (string, int)) *taskboard.Board {
	return taskboard.New(db, taskboard.Options{AutoClose: true, ReviewerOf: reviewerOf})
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
