// Command outcomes is the load test of outcomes recorded exactly
// (docs/decisions.md): a real swarmd with 200 agents on the command backend, 2,000
// tasks, mail at 5/s with 10% urgent, three SIGKILL and restart cycles. It
// prints what it measured (settlement p50/p99 from a session's end to its
// outcome committed, the time agents waited on the store) and every
// promise that broke; it exits 1 if any did.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/swarmd/swarmd/bench/internal/outcomes"
)

func main() {
	var o outcomes.Options
	flag.StringVar(&o.Bin, "bin", "bin/swarmd", "swarmd binary")
	flag.IntVar(&o.Agents, "agents", 200, "agents")
	flag.IntVar(&o.Tasks, "tasks", 2000, "tasks")
	flag.Float64Var(&o.MailRate, "mail-rate", 5, "messages per second while tasks remain")
	flag.Float64Var(&o.Urgent, "urgent", 0.1, "share of urgent messages")
	flag.IntVar(&o.Kills, "kills", 3, "SIGKILL and restart cycles")
	flag.DurationVar(&o.Work, "work", 200*time.Millisecond, "how long each session works before it says DONE")
	flag.DurationVar(&o.Timeout, "timeout", 20*time.Minute, "the whole run")
	flag.BoolVar(&o.Keep, "keep", false, "leave the run's repository, state dir and daemon.log in place")
	nice := flag.Int("session-nice", 19, "limits.session_nice: 19 as on a host given to the swarm (-1: the config's default, 0)")
	flag.Parse()
	if *nice >= 0 {
		o.SessionNice = nice
	}
	o.Parent, o.Log = os.Getenv("TMPDIR"), os.Stderr
	rep, err := outcomes.Run(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "outcomes:", err)
		os.Exit(1)
	}
	fmt.Println("outcomes:", rep)
	for _, v := range rep.Violations {
		fmt.Println("  VIOLATION:", v)
	}
	if len(rep.Violations) > 0 {
		os.Exit(1)
	}
}
