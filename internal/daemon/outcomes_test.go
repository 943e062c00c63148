package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/agent"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// TestLockedStoreDelaysTheOutcome: a real daemon on the real SQLite file,
// a real session. While the only session that saw task 1 ends with FAIL,
// another client holds swarm.db's write lock for 14 s. The agent waits on
// the store where it is and says so (its health, /readyz), starts no other
// session, and once the lock goes the outcome lands exactly: task 1 FAILED
// by that session, its mail acknowledged once by it, one row per session.
func TestLockedStoreDelaysTheOutcome(t *testing.T) {
	flags := t.TempDir()
	flag := filepath.Join(flags, "go")
	cfgPath := repo(t, fmt.Sprintf(`listen: ""
sandbox: {readable: [%q]}
defaults: {backend: w, min_session_interval: 0s}
backends:
  w: {type: command, command: sh, args: [-c, "cat >/dev/null; while [ ! -e %s ]; do sleep 0.05; done; echo 'the build is broken upstream'; echo FAIL"]}
agents:
  - {name: alice, role: x}
`, flags, flag))
	d := open(t, cfgPath)
	ctx := context.Background()
	tk, err := d.tasks.Add(ctx, taskboard.NewTask{Title: "task one"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.mail.Send(ctx, mailbox.Draft{From: mailbox.Operator, To: "alice", Subject: "hi", Body: "see task one"}); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	r := &running{Daemon: d, cancel: cancel, errc: make(chan error, 1)}
	go func() { r.errc <- d.Run(runCtx) }()
	t.Cleanup(func() { r.stop(t) })
	waitFor(t, "the daemon ready", func() bool { return d.run.ready.Load() })
	alice := func() agentView {
		rn, err := d.reg.Runner("alice")
		if err != nil {
			t.Fatal(err)
		}
		s := rn.Snapshot()
		return agentView{s.State.Kind, s.Seq, s.StoreWait}
	}
	waitFor(t, "alice's first session running", func() bool { a := alice(); return a.state == agent.Running && a.seq == 1 })

	other, err := store.Open(ctx, mustLoad(t, cfgPath).DBPath(), store.Options{NoCreate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	lock, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := time.Now()
	writeFile(t, flag, "")
	waitFor(t, "alice waiting on the store", func() bool { return alice().storeWait != "" })
	if why := d.readiness(); !strings.Contains(why, "waiting on the store") || !strings.Contains(why, "alice") {
		t.Errorf("/readyz while the outcome waits = %q", why)
	}
	for time.Since(held) < 14*time.Second {
		if a := alice(); a.seq != 1 || a.storeWait == "" {
			_ = lock.Rollback()
			t.Fatalf("while the store was locked alice moved on: %+v", a)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := lock.Rollback(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "task 1 FAILED", func() bool {
		got, err := d.tasks.Get(ctx, tk.ID)
		return err == nil && got.StateName == "FAILED"
	})
	got, _ := d.tasks.Get(ctx, tk.ID)
	if !strings.Contains(got.Result, "broken upstream") {
		t.Errorf("task 1's result %q", got.Result)
	}
	waitFor(t, "alice's wait cleared", func() bool { return alice().storeWait == "" })
	evs, err := d.db.Events(ctx, store.EventQuery{TaskID: tk.ID})
	if err != nil {
		t.Fatal(err)
	}
	var failedBy []string
	for _, e := range evs {
		if e.To == "FAILED" {
			failedBy = append(failedBy, e.SessionID)
		}
	}
	ss, err := d.db.Sessions(ctx, "alice", 10)
	if err != nil || len(ss) == 0 {
		t.Fatalf("sessions %+v, %v", ss, err)
	}
	first := ss[len(ss)-1] // newest first
	if first.Seq != 1 || len(failedBy) != 1 || failedBy[0] != first.SessionID {
		t.Fatalf("task 1 FAILED by %v; want once, by session 1 (%s)", failedBy, first.SessionID)
	}
	ms, err := d.mail.Inbox(ctx, "alice", true)
	if err != nil || len(ms) != 1 || ms[0].DeliveredAt == nil || ms[0].ClaimedSession != first.SessionID {
		t.Fatalf("alice's mail %+v, %v; want acknowledged by %s", ms, err, first.SessionID)
	}
	seqs := map[uint32]bool{}
	for _, s := range ss {
		if seqs[s.Seq] {
			t.Errorf("seq %d twice", s.Seq)
		}
		seqs[s.Seq] = true
	}
}

type agentView struct {
	state     agent.StateKind
	seq       uint32
	storeWait string
}
