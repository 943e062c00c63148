package daemon

import (
	"github.com/swarmd/swarmd/internal/history"
	"github.com/swarmd/swarmd/internal/service"
)

// pruneHistory is the history's pruner as a service: the agent events and
// tool calls older than history.max_age, as the daemon started with,
// deleted hourly (package history).
func (d *Daemon) pruneHistory() service.Service {
	cfg, _ := d.current()
	p := &history.Pruner{DB: d.db, MaxAge: cfg.History.MaxAge, Log: d.log.Named("history")}
	return service.Loop(p.Run)
}
