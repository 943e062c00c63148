package main

import (
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// openTaskBoard is the task board in db, as the daemon and every `swarmd
// task` process use it. Nothing reviews or merges work yet, so a DONE task
// is CLOSED at once.
func openTaskBoard(db *mailbox.DB) *taskboard.Board {
	return taskboard.New(db, taskboard.Options{AutoClose: true})
}
