package daemon

import (
	"sync/atomic"

	"go.uber.org/zap"
)

// journalFaults logs the event log's failed writes once a fault, not once
// a retry (a full disk logged one a second), and the first commit after.
type journalFaults struct {
	log     *zap.Logger
	failing atomic.Bool
}

func (j *journalFaults) failed(err error) {
	if !j.failing.Swap(true) {
		j.log.Error("event log write: the records are kept and written again", zap.Error(err))
		return
	}
	j.log.Debug("event log write", zap.Error(err))
}

func (j *journalFaults) committed() {
	if j.failing.Swap(false) {
		j.log.Info("event log writes again")
	}
}
