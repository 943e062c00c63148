// Package storetest is the store's contract: one suite of behaviours every
// database driver must have, run by each driver's tests against a real
// server or file (River's driver tests are the model). A driver passes
// when Run passes against it; the SQLite driver runs it in package store.
package storetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/store"
)

// Harness is what a driver's test gives the suite.
type Harness struct {
	// Fresh makes a new, empty database and returns its target (a path, a
	// URL): every test starts from its own.
	Fresh func(t *testing.T) string
	// Open opens target. Called more than once for one target, it returns
	// independent handles on the same database, as separate processes have.
	Open func(t testing.TB, target string) *store.DB
	// Notifies: the driver signals commits through DB.Changes.
	Notifies bool
	// ChildTest names the test function of the driver's package that calls
	// Child, so that the suite can race real processes; "" skips that test.
	ChildTest string
}

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// Run runs the contract against h.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		f    func(*testing.T, Harness)
	}{
		{"SettingsSharedAcrossHandles", testSettings},
		{"JournalRoundTrip", testJournalRoundTrip},
		{"JournalBatchesOfEverySize", testJournalBatchSizes},
		{"EventQueries", testEventQueries},
		{"RecoveryClosesOrphans", testRecovery},
		{"ResetAgent", testResetAgent},
		{"PausesAndBudgets", testPausesAndBudgets},
		{"DataVersionSeesOtherHandles", testDataVersion},
		{"ChangesSignalled", testChanges},
		{"LeasesUniqueAndExpire", testLeases},
		{"MembersPerDaemon", testMembers},
		{"ForgetMembers", testForgetMembers},
		{"ClaimDaemonSetting", testClaimDaemonSetting},
		{"ClaimDaemonSettingRaced", testClaimDaemonSettingRaced},
		{"ConcurrentHandles", testConcurrentHandles},
		{"ConcurrentProcesses", testConcurrentProcesses},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.f(t, h) })
	}
}

func testSettings(t *testing.T, h Harness) {
	ctx := context.Background()
	target := h.Fresh(t)
	a, b := h.Open(t, target), h.Open(t, target)
	if _, ok, err := b.Setting(ctx, "k"); err != nil || ok {
		t.Fatalf("Setting before any = ok %v, %v", ok, err)
	}
	for _, v := range []string{"one", "two"} {
		if err := a.SetSetting(ctx, "k", v); err != nil {
			t.Fatal(err)
		}
		if got, ok, err := b.Setting(ctx, "k"); err != nil || !ok || got != v {
			t.Fatalf("other handle reads %q, %v, %v; want %q", got, ok, err, v)
		}
	}
}

// testMembers: each daemon's list of agents is its own, replaced whole by
// its next SetMembers; another daemon's list is left as it was, and every
// handle reads the lists with their review settings.
func testMembers(t *testing.T, h Harness) {
	ctx := context.Background()
	target := h.Fresh(t)
	a, b := h.Open(t, target), h.Open(t, target)
	if ms := must(b.Members(ctx))(t); len(ms) != 0 {
		t.Fatalf("Members before any = %+v, want none", ms)
	}
	if err := a.SetMembers(ctx, "host1:/a", []store.Member{{Agent: "alice", Reviewer: "rita", MaxIterations: 4}, {Agent: "rita", ReviewOnly: true}, {Agent: "zed"}}, t0); err != nil {
		t.Fatal(err)
	}
	if err := b.SetMembers(ctx, "host2:/b", []store.Member{{Agent: "bob"}, {Agent: "zed", Reviewer: "bob"}}, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	// host1's reload drops zed: host2's zed stays.
	if err := a.SetMembers(ctx, "host1:/a", []store.Member{{Agent: "alice", Reviewer: "rita", MaxIterations: 4}, {Agent: "rita", ReviewOnly: true}}, t0.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range must(b.Members(ctx))(t) {
		got = append(got, fmt.Sprintf("%s@%s reviewer=%q max=%d only=%v at=%s", m.Agent, m.Daemon, m.Reviewer, m.MaxIterations, m.ReviewOnly,
			m.Recorded.Sub(t0)))
	}
	want := []string{
		`alice@host1:/a reviewer="rita" max=4 only=false at=2s`,
		`bob@host2:/b reviewer="" max=0 only=false at=1s`,
		`rita@host1:/a reviewer="" max=0 only=true at=2s`,
		`zed@host2:/b reviewer="bob" max=0 only=false at=1s`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Members =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func testJournalRoundTrip(t *testing.T, h Harness) {
	ctx := context.Background()
	target := h.Fresh(t)
	db := h.Open(t, target)
	j := startJournal(t, db)
	end := t0.Add(90 * time.Second)
	j.Agent(store.AgentRecord{Name: "alice", State: "Running", Seq: 1, UpdatedAt: t0})
	j.SessionStarted(store.SessionRecord{SessionID: "alice-1", Agent: "alice", Seq: 1, Started: t0, LogPath: "/l/1"})
	j.Event(store.EventRecord{At: t0, Agent: "alice", From: "Starting", Event: "SessionStarted", To: "Running", Actor: "runner", SessionID: "alice-1", Seq: 1})
	j.SessionEnded(store.SessionRecord{SessionID: "alice-1", Agent: "alice", Seq: 1, Started: t0, Ended: &end,
		Outcome: store.OutcomeSuccess, Duration: 90 * time.Second, TokensIn: 10, TokensOut: 20, CostUSD: 0.5, Commits: 2})
	j.Agent(store.AgentRecord{Name: "alice", State: "Stopped", Seq: 2, StopKind: store.StopOperator, StopReason: "done", UpdatedAt: end})
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	other := h.Open(t, target) // what a restarted daemon reads
	ags, err := other.Agents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a := ags["alice"]; a.State != "Stopped" || a.Seq != 2 || a.StopKind != store.StopOperator || !a.UpdatedAt.Equal(end) {
		t.Fatalf("agent = %+v; want the last record", a)
	}
	ss, err := other.Sessions(ctx, "alice", 0)
	if err != nil || len(ss) != 1 {
		t.Fatalf("Sessions = %+v, %v", ss, err)
	}
	s := ss[0]
	if s.Outcome != store.OutcomeSuccess || s.Ended == nil || !s.Ended.Equal(end) || s.CostUSD != 0.5 || s.TokensOut != 20 || s.Commits != 2 || s.LogPath != "/l/1" {
		t.Fatalf("session = %+v", s)
	}
	if seq, err := other.MaxSeq(ctx, "alice"); err != nil || seq != 1 {
		t.Fatalf("MaxSeq = %d, %v; want 1", seq, err)
	}
	sp, err := other.Spend(ctx)
	if err != nil || sp["alice"].CostUSD != 0.5 {
		t.Fatalf("Spend = %+v, %v", sp, err)
	}
}

// testJournalBatchSizes: a batch of n events goes in multi-row statements
// of 32, 16, … 1 rows; for every n up to past two full statements, every
// event is written once, in the order enqueued, and of several rows of one
// agent the latest wins.
func testJournalBatchSizes(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.Open(t, h.Fresh(t))
	j := startJournal(t, db)
	var seq uint32
	for n := range 70 {
		first := seq
		for range n {
			j.Event(store.EventRecord{At: t0, Agent: "alice", Event: "E", Seq: seq})
			seq++
		}
		// n agents' rows, each twice: the second must win.
		for i := range n {
			for v := range uint32(2) {
				j.Agent(store.AgentRecord{Name: fmt.Sprint("a", i), State: "Idle", Seq: uint32(n)*2 + v, UpdatedAt: t0})
			}
		}
		if err := j.Flush(ctx); err != nil {
			t.Fatalf("batch of %d: %v", n, err)
		}
		evs, err := db.Events(ctx, store.EventQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != int(seq) {
			t.Fatalf("after a batch of %d: %d events, want %d", n, len(evs), seq)
		}
		for i, e := range evs[first:] {
			if e.Seq != first+uint32(i) {
				t.Fatalf("batch of %d: event %d has seq %d, want %d (ids out of the enqueued order)", n, i, e.Seq, first+uint32(i))
			}
		}
		ags, err := db.Agents(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if a := ags[fmt.Sprint("a", i)]; a.Seq != uint32(n)*2+1 {
				t.Fatalf("batch of %d: agent a%d at seq %d, want the latest row (%d)", n, i, a.Seq, n*2+1)
			}
		}
	}
}

func testEventQueries(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.Open(t, h.Fresh(t))
	j := startJournal(t, db)
	for i, who := range []string{"alice", "bob", "alice", "bob", "alice"} {
		j.Event(store.EventRecord{At: t0.Add(time.Duration(i) * time.Second), Agent: who, Event: fmt.Sprint("E", i), Seq: uint32(i)})
	}
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	all, err := db.Events(ctx, store.EventQuery{})
	if err != nil || len(all) != 5 {
		t.Fatalf("Events = %d, %v; want 5", len(all), err)
	}
	for i, e := range all {
		if e.Event != fmt.Sprint("E", i) || (i > 0 && e.ID <= all[i-1].ID) {
			t.Fatalf("event %d = %+v: not in write order", i, e)
		}
	}
	last, err := db.LastEventID(ctx)
	if err != nil || last != all[4].ID {
		t.Fatalf("LastEventID = %d, %v; want %d", last, err, all[4].ID)
	}
	alice, err := db.Events(ctx, store.EventQuery{Agent: "alice", AfterID: all[0].ID, Limit: 1})
	if err != nil || len(alice) != 1 || alice[0].Event != "E2" {
		t.Fatalf("alice after the first, limit 1 = %+v, %v; want E2", alice, err)
	}
}

func testRecovery(t *testing.T, h Harness) {
	ctx := context.Background()
	target := h.Fresh(t)
	db := h.Open(t, target)
	j := startJournal(t, db)
	j.SessionStarted(store.SessionRecord{SessionID: "bob-3", Agent: "bob", Seq: 3, Started: t0})
	j.SessionStarted(store.SessionRecord{SessionID: "zed-1", Agent: "zed", Seq: 1, Started: t0}) // another daemon's
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// The daemon running bob is killed here; its next start recovers its
	// own agents only: zed's session belongs to a daemon still running.
	next := h.Open(t, target)
	orphans, err := next.CloseOrphanSessions(ctx, t0.Add(time.Minute), []string{"bob"})
	if err != nil || len(orphans) != 1 || orphans[0].SessionID != "bob-3" || orphans[0].Outcome != store.OutcomeOrphaned {
		t.Fatalf("CloseOrphanSessions(bob) = %+v, %v", orphans, err)
	}
	if again, err := next.CloseOrphanSessions(ctx, t0.Add(2*time.Minute), []string{"bob"}); err != nil || len(again) != 0 {
		t.Fatalf("second CloseOrphanSessions = %+v, %v; want none", again, err)
	}
	if all, err := next.CloseOrphanSessions(ctx, t0.Add(2*time.Minute), nil); err != nil || len(all) != 1 || all[0].Agent != "zed" {
		t.Fatalf("CloseOrphanSessions(all) = %+v, %v; want zed's, untouched until then", all, err)
	}
	if seq, err := next.MaxSeq(ctx, "bob"); err != nil || seq != 3 {
		t.Fatalf("MaxSeq = %d, %v; want 3 (a restarted runner continues after it)", seq, err)
	}
}

func testResetAgent(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.Open(t, h.Fresh(t))
	j := startJournal(t, db)
	j.Agent(store.AgentRecord{Name: "carol", State: "Stopped", Seq: 4, ConsecutiveErrors: 3, TotalErrors: 7,
		StopKind: store.StopFatal, StopReason: "auth", UpdatedAt: t0})
	if err := j.ResetAgent(ctx, "carol", t0.Add(time.Second), "ops"); err != nil {
		t.Fatal(err)
	}
	a := must(db.Agents(ctx))(t)["carol"]
	if a.ConsecutiveErrors != 0 || a.TotalErrors != 0 || a.StopKind != "" || !a.Resumable() {
		t.Fatalf("after reset = %+v", a)
	}
	evs := must(db.Events(ctx, store.EventQuery{Agent: "carol"}))(t)
	if len(evs) != 1 || evs[0].Event != store.EventOperatorStart || evs[0].Actor != "ops" {
		t.Fatalf("events = %+v; want one OperatorStart by ops", evs)
	}
	var ve *store.ValidationError
	if err := db.ResetAgent(ctx, "Not Valid", t0, ""); !errors.Is(err, store.ErrInvalidName) || !errors.As(err, &ve) {
		t.Fatalf("ResetAgent(bad name) = %v", err)
	}
}

func testPausesAndBudgets(t *testing.T, h Harness) {
	ctx := context.Background()
	target := h.Fresh(t)
	db := h.Open(t, target)
	ev := store.EventRecord{At: t0, Agent: "alice", Event: store.EventPaused, Actor: "operator"}
	if err := db.SetPause(ctx, store.PauseRecord{Agent: "alice", Reason: "lunch", Actor: "operator", Since: t0}, ev); err != nil {
		t.Fatal(err)
	}
	if ps := must(h.Open(t, target).Pauses(ctx))(t); ps["alice"].Reason != "lunch" {
		t.Fatalf("pauses from another handle = %+v", ps)
	}
	if p, ok, err := db.ClearPause(ctx, "alice", store.EventRecord{At: t0, Agent: "alice", Event: store.EventResumed}); err != nil || !ok || p.Reason != "lunch" {
		t.Fatalf("ClearPause = %+v, %v, %v", p, ok, err)
	}
	if _, ok, err := db.ClearPause(ctx, "alice", store.EventRecord{At: t0, Agent: "alice", Event: store.EventResumed}); err != nil || ok {
		t.Fatalf("second ClearPause = %v, %v; want nothing to clear", ok, err)
	}
	l := store.BudgetLimit{Scope: "alice", USD: 2.5, Actor: "operator", SetAt: t0}
	if err := db.SetBudgetLimit(ctx, l, store.EventRecord{At: t0, Agent: "alice", Event: store.EventBudgetSet}); err != nil {
		t.Fatal(err)
	}
	if ls := must(db.BudgetLimits(ctx))(t); ls["alice"].USD != 2.5 {
		t.Fatalf("BudgetLimits = %+v", ls)
	}
	if ok, err := db.ClearBudgetLimit(ctx, "alice", store.EventRecord{At: t0, Agent: "alice", Event: store.EventBudgetSet}); err != nil || !ok {
		t.Fatalf("ClearBudgetLimit = %v, %v", ok, err)
	}
}

func testDataVersion(t *testing.T, h Harness) {
	ctx := context.Background()
	target := h.Fresh(t)
	watcher, writer := h.Open(t, target), h.Open(t, target)
	before := must(watcher.DataVersion(ctx))(t)
	if again := must(watcher.DataVersion(ctx))(t); again != before {
		t.Fatalf("data version moved with no commit: %d -> %d", before, again)
	}
	if err := writer.SetSetting(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	if after := must(watcher.DataVersion(ctx))(t); after == before {
		t.Fatalf("data version %d unchanged after another handle committed", after)
	}
}

// testLeases: an agent's name is held by one daemon at a time; a second
// daemon is refused, naming the holder, until the lease expires; then the
// taker learns whose lease it replaced, and a dead daemon's lease is reaped
// once.
func testLeases(t *testing.T, h Harness) {
	ctx := context.Background()
	target := h.Fresh(t)
	d1, d2 := h.Open(t, target), h.Open(t, target)
	a := store.Lease{Daemon: "host1:/srv/a", Host: "host1", PID: 11, Boot: "boot-1"}
	b := store.Lease{Daemon: "host2:/srv/b", Host: "host2", PID: 22, Boot: "boot-2"}
	const ttl = 30 * time.Second
	held, exp, err := d1.AcquireLeases(ctx, a, []string{"alice", "bob"}, t0, ttl)
	if err != nil || len(exp) != 0 || len(held) != 2 || held[0].Epoch != 1 || held[1].Epoch != 1 {
		t.Fatalf("first acquire = %+v, %+v, %v; want alice and bob at epoch 1", held, exp, err)
	}
	if held[0].Boot != a.Boot || held[0].PID != a.PID {
		t.Fatalf("alice's lease = %+v, want host1's pid and boot kept", held[0])
	}
	_, _, err = d2.AcquireLeases(ctx, b, []string{"carol", "bob"}, t0.Add(ttl/2), ttl)
	var heldErr *store.LeaseHeldError
	if !errors.As(err, &heldErr) || !errors.Is(err, store.ErrLeaseHeld) || heldErr.Lease.Daemon != a.Daemon || !strings.Contains(err.Error(), "host1") {
		t.Fatalf("second daemon taking bob = %v, want refused naming host1", err)
	}
	if ls := must(d1.Leases(ctx))(t); len(ls) != 2 {
		t.Fatalf("leases after a refused acquire = %+v, want alice and bob only (all or none)", ls)
	}
	if ls, err := d1.RenewLeases(ctx, a.Daemon, t0.Add(ttl/2), ttl); err != nil || len(ls) != 2 {
		t.Fatalf("renew = %+v, %v", ls, err)
	}
	// Fenced writes: host1's pass while it holds the lease at its epoch.
	d1.Fence(a.Daemon)
	d1.SetFence("bob", held[1].Epoch)
	var fenced *store.FencedError
	fenceWrite := func() error {
		return d1.InTx(ctx, "fenced write", func(tx *sql.Tx) error { return d1.FenceTx(ctx, tx, "bob") })
	}
	if err := fenceWrite(); err != nil {
		t.Fatalf("a write for bob under host1's lease: %v", err)
	}
	// Past the deadline its last renewal gave (its lease guard killed its
	// sessions then), host1's writes wait for the next renewal, though
	// the lease is still its own.
	d1.SetFenceDeadline(time.Now().Add(-time.Millisecond))
	if err := fenceWrite(); !errors.As(err, &fenced) || !fenced.Late || !errors.Is(err, store.ErrFenced) {
		t.Fatalf("host1's write for bob past its renewal's deadline = %v, want fenced as late", err)
	}
	d1.SetFenceDeadline(time.Now().Add(time.Hour))
	if err := fenceWrite(); err != nil {
		t.Fatalf("a write for bob after host1 renewed: %v", err)
	}
	// host1 stops renewing (paused): its leases run out, host2 takes bob
	// at a new epoch and reaps alice; host1's writes for bob are refused.
	later := t0.Add(3 * ttl)
	took, exp, err := d2.AcquireLeases(ctx, b, []string{"bob"}, later, ttl)
	if err != nil || len(exp) != 1 || exp[0].Agent != "bob" || exp[0].Daemon != a.Daemon || took[0].Epoch != 2 {
		t.Fatalf("taking bob after host1's lease expired = %+v, %+v, %v; want host1's replaced, epoch 2", took, exp, err)
	}
	if err := fenceWrite(); !errors.As(err, &fenced) || !errors.Is(err, store.ErrFenced) || fenced.Agent != "bob" {
		t.Fatalf("host1's write for bob after host2 took it = %v, want fenced", err)
	}
	if ls, err := d1.RenewLeases(ctx, a.Daemon, later, ttl); err != nil || len(ls) != 1 || ls[0].Agent != "alice" {
		t.Fatalf("host1's renewal after losing bob = %+v, %v; want alice's alone", ls, err)
	}
	// A daemon of host1's name elsewhere takes alice (as a restart would):
	// host1's renewal at the epoch it holds renews nothing, and it cannot
	// take alice back from its namesake while that one's lease lasts.
	same, _, err := d2.AcquireLeases(ctx, a, []string{"alice"}, later, ttl)
	if err != nil || same[0].Epoch != 2 {
		t.Fatalf("host1's namesake taking alice = %+v, %v", same, err)
	}
	if ls, err := d1.RenewHeld(ctx, a.Daemon, map[string]int64{"alice": held[0].Epoch}, later, ttl); err != nil || len(ls) != 0 {
		t.Fatalf("host1's renewal of alice at epoch %d after its namesake took it = %+v, %v; want none", held[0].Epoch, ls, err)
	}
	if _, _, err := d1.RetakeLease(ctx, a, "alice", later, ttl); !errors.Is(err, store.ErrLeaseHeld) {
		t.Fatalf("host1 taking alice back from its namesake = %v, want refused", err)
	}
	if ls, err := d2.RenewHeld(ctx, a.Daemon, map[string]int64{"alice": 2}, later, ttl); err != nil || len(ls) != 1 {
		t.Fatalf("the namesake's renewal of alice = %+v, %v", ls, err)
	}
	reapAt := later.Add(2 * ttl)
	if _, err := d2.RenewLeases(ctx, b.Daemon, reapAt, ttl); err != nil {
		t.Fatal(err)
	}
	reaped, err := d2.ReapExpired(ctx, b.Daemon, reapAt, nil)
	if err != nil || len(reaped) != 1 || reaped[0].Agent != "alice" {
		t.Fatalf("reap = %+v, %v; want alice's expired lease", reaped, err)
	}
	if again, err := d1.ReapExpired(ctx, a.Daemon, reapAt, nil); err != nil || len(again) != 0 {
		t.Fatalf("second reap = %+v, %v; want nothing: one recovery", again, err)
	}
	if err := d2.ReleaseLeases(ctx, b.Daemon, nil); err != nil {
		t.Fatal(err)
	}
	if ls := must(d1.Leases(ctx))(t); len(ls) != 0 {
		t.Fatalf("leases after release = %+v", ls)
	}
}

// testChanges: a commit by another client reaches Changes' channel, and
// says what it touched: a listener is not woken for what it does not read.
func testChanges(t *testing.T, h Harness) {
	if !h.Notifies {
		t.Skip("the driver has no notifications")
	}
	ctx := context.Background()
	target := h.Fresh(t)
	watcher, writer := h.Open(t, target), h.Open(t, target)
	w := watcher.Changes()
	// The listener connects in the background: write until one arrives.
	deadline := time.After(20 * time.Second)
	for i := 0; ; i++ {
		if err := writer.SetSetting(ctx, "k", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-w.C:
		case <-time.After(50 * time.Millisecond):
			continue
		case <-deadline:
			t.Fatal("no change signalled after commits by another client")
		}
		break
	}
	// Listening notes everything (a commit before it told no one);
	// otherwise a setting is "other".
	if got := w.Take(); got != store.ChangedOther && got != store.ChangedAll {
		t.Fatalf("a setting's commit: %b, want other", got)
	}
	// A setting's notification may still be on its way. They come in
	// commit order: once a later commit's is seen, none is.
	if err := writer.InTx(ctx, "test", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE messages SET urgency = urgency WHERE id = -1`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.After(10 * time.Second); !w.Take().Has(store.ChangedMail); {
		select {
		case <-w.C:
		case <-deadline:
			t.Fatal("a commit of mail: no change signalled")
		}
	}
	for _, c := range []struct {
		query string
		want  store.Change
	}{
		{`UPDATE tasks SET priority = priority WHERE id = -1`, store.ChangedTasks},
		// The tasks' trigger says a task entered the open set; a claim
		// gives no one work.
		{`INSERT INTO tasks (title, state, created_by, created_at, updated_at) VALUES ('t', 'OPEN', 'test', '', '')`, store.ChangedTasks | store.ChangedOpen},
		{`UPDATE tasks SET state = 'CLAIMED' WHERE state = 'OPEN'`, store.ChangedTasks},
		{`UPDATE tasks SET state = 'IN_PROGRESS' WHERE state = 'CLAIMED'`, store.ChangedTasks},
		{`UPDATE messages SET urgency = urgency WHERE id = -1`, store.ChangedMail},
		{`DELETE FROM sessions WHERE agent = 'nobody'`, store.ChangedOther},
	} {
		if err := writer.InTx(ctx, "test", func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `SELECT 1 FROM tasks LIMIT 1`); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, c.query)
			return err
		}); err != nil {
			t.Fatalf("%s: %v", c.query, err)
		}
		// A transaction's notifications (its commit's, its triggers') may
		// be noted one at a time: gather them until they say c.want, and
		// never more.
		var got store.Change
		for deadline := time.After(10 * time.Second); got != c.want; {
			select {
			case <-w.C:
			case <-deadline:
				t.Fatalf("%s: change %b signalled, want %b", c.query, got, c.want)
			}
			got |= w.Take()
			if got&^c.want != 0 {
				t.Fatalf("%s: change %b, want %b", c.query, got, c.want)
			}
		}
	}
	// Urgent mail is announced with its recipient (store.Urgent); other
	// mail is not.
	if err := writer.InTx(ctx, "test", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO messages (id, thread_id, sender, recipient, body, urgency, created_at) VALUES
			(900, 900, 'alice', 'bob', 'later', 'normal', '2026-11-29T07:14:23.123456Z'),
			(901, 901, 'alice', 'bob', 'stop', 'urgent', '2026-11-29T07:14:23.123456Z')`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var announced []store.Urgent
	for deadline := time.After(10 * time.Second); len(announced) == 0; {
		select {
		case <-w.C:
		case <-deadline:
			t.Fatal("urgent mail: no announcement")
		}
		if got := w.Take(); got&^store.ChangedMail != 0 {
			t.Fatalf("urgent mail: change %b, want mail", got)
		}
		announced = w.TakeUrgent(announced)
	}
	if want := (store.Urgent{ID: 901, To: "bob", CreatedAt: time.Date(2026, 11, 29, 7, 14, 23, 123456000, time.UTC)}); len(announced) != 1 || announced[0] != want {
		t.Errorf("announced %+v, want %+v alone", announced, want)
	}
	// The commit's own notification may follow the announcement: a task
	// write after it, once seen, says none is still on its way.
	if err := writer.InTx(ctx, "test", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE tasks SET priority = priority WHERE id = -1`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for got, deadline := store.Change(0), time.After(10*time.Second); !got.Has(store.ChangedTasks); {
		select {
		case <-w.C:
		case <-deadline:
			t.Fatal("a task write after urgent mail: no change signalled")
		}
		if got |= w.Take(); got&^(store.ChangedMail|store.ChangedTasks) != 0 {
			t.Fatalf("urgent mail, then a task write: change %b", got)
		}
	}
	// A transaction that only read tells no one: the next signal is the
	// write after it.
	if err := writer.InTx(ctx, "test", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `SELECT 1 FROM tasks LIMIT 1`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := writer.SetSetting(ctx, "k", "last"); err != nil {
		t.Fatal(err)
	}
	// A signal may be left over from a change taken already: gather.
	for got, deadline := store.Change(0), time.After(10*time.Second); got != store.ChangedOther; {
		select {
		case <-w.C:
		case <-deadline:
			t.Fatal("a setting after a read: no change signalled")
		}
		if got |= w.Take(); got&^store.ChangedOther != 0 {
			t.Fatalf("a read, then a setting: change %b, want other alone", got)
		}
	}
}

// testConcurrentHandles: writers on separate handles never fail with a
// lock error and lose nothing.
func testConcurrentHandles(t *testing.T, h Harness) {
	ctx := context.Background()
	target := h.Fresh(t)
	const handles, each = 6, 40
	var wg sync.WaitGroup
	errs := make(chan error, handles)
	for i := range handles {
		db := h.Open(t, target)
		wg.Go(func() {
			j := db.NewJournal(store.JournalOptions{FlushInterval: time.Millisecond})
			j.Start()
			for k := range each {
				j.Event(store.EventRecord{At: t0, Agent: fmt.Sprint("a", i), Event: "E", Seq: uint32(k)})
				if k%10 == 0 {
					if err := db.SetSetting(ctx, fmt.Sprint("h", i), strconv.Itoa(k)); err != nil {
						errs <- err
					}
				}
			}
			if err := j.Close(); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := len(must(h.Open(t, target).Events(ctx, store.EventQuery{}))(t)); n != handles*each {
		t.Fatalf("%d events, want %d", n, handles*each)
	}
}

// testConcurrentProcesses: what testConcurrentHandles checks, with real
// processes (each a Child), which is how `swarmd mail` and `swarmd task`
// meet the daemon.
func testConcurrentProcesses(t *testing.T, h Harness) {
	if h.ChildTest == "" {
		t.Skip("the driver's tests name no ChildTest")
	}
	ctx := context.Background()
	target := h.Fresh(t)
	const procs, each = 5, 30
	race(t, h, target, roleJournal, procs, each)
	db := h.Open(t, target)
	if n := len(must(db.Events(ctx, store.EventQuery{}))(t)); n != procs*each {
		t.Fatalf("%d events from %d processes, want %d", n, procs, procs*each)
	}
	for i := range procs {
		if v, ok, err := db.Setting(ctx, fmt.Sprint("p", i)); err != nil || !ok || v != strconv.Itoa(each) {
			t.Errorf("process %d's setting = %q, %v, %v", i, v, ok, err)
		}
	}
}

const (
	envTarget = "STORETEST_TARGET"
	envRole   = "STORETEST_ROLE"
	envAgent  = "STORETEST_AGENT"
	envCount  = "STORETEST_COUNT"
)

// roleJournal is what a Child process does: events through a journal, a
// setting per write.
const roleJournal = "journal"

// race runs procs Child processes of role on target at once and waits for
// them; the i-th acts as agent "p<i>".
func race(t *testing.T, h Harness, target, role string, procs, each int) {
	t.Helper()
	if h.ChildTest == "" {
		t.Skip("the driver's tests name no ChildTest")
	}
	Race(t, h.ChildTest, target, role, procs, each)
}

// Race runs procs processes of the test binary at once, each running only
// the test named childTest, which reads ChildArgs (target, role, its agent
// "p<i>" for the i-th, each), and waits for them. The packages that keep
// tables in the store race real processes on one database with it, as
// `swarmd mail` and `swarmd task` meet the daemon.
func Race(t *testing.T, childTest, target, role string, procs, each int) {
	t.Helper()
	// They race on the work, not on making the schema of a fresh file:
	// store.TestOpenConcurrentFresh races that on its own. Twenty processes
	// migrating one new file while the first already write can starve one
	// past SQLite's busy timeout on a loaded machine.
	db, err := store.Open(context.Background(), target, store.Options{})
	if err != nil {
		t.Fatalf("open %s: %v", target, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	cmds := make([]*exec.Cmd, procs)
	for i := range cmds {
		cmd := exec.Command(os.Args[0], "-test.run=^"+childTest+"$", "-test.count=1")
		cmd.Env = append(os.Environ(), envTarget+"="+target, envRole+"="+role,
			envAgent+"="+fmt.Sprint("p", i), envCount+"="+strconv.Itoa(each))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("%s process %d: %v", role, i, err)
		}
	}
}

// ChildArgs is what Race told the process it started; ok is false in any
// other run of the test, which should then skip.
func ChildArgs() (target, role, agent string, each int, ok bool) {
	target = os.Getenv(envTarget)
	if target == "" {
		return "", "", "", 0, false
	}
	each, _ = strconv.Atoi(os.Getenv(envCount))
	return target, os.Getenv(envRole), os.Getenv(envAgent), each, true
}

// Child is the body of the driver's ChildTest: in a process the suite
// started, it writes its share through its own handle (events through a
// journal, a setting in transactions of its own); otherwise it returns at
// once.
func Child(t *testing.T, open func(t testing.TB, target string) *store.DB) {
	target := os.Getenv(envTarget)
	if target == "" {
		t.Skip("run by the store contract's ConcurrentProcesses")
	}
	ctx := context.Background()
	agent := os.Getenv(envAgent)
	n, err := strconv.Atoi(os.Getenv(envCount))
	if err != nil {
		t.Fatal(err)
	}
	db := open(t, target)
	j := db.NewJournal(store.JournalOptions{FlushInterval: time.Millisecond})
	j.Start()
	for k := range n {
		j.Event(store.EventRecord{At: t0, Agent: agent, Event: "E", Seq: uint32(k)})
		if err := db.SetSetting(ctx, agent, strconv.Itoa(k+1)); err != nil {
			t.Error(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
}

func startJournal(t *testing.T, db *store.DB) *store.Journal {
	t.Helper()
	j := db.NewJournal(store.JournalOptions{FlushInterval: time.Hour})
	j.Start()
	t.Cleanup(func() {
		if err := j.Close(); err != nil {
			t.Errorf("journal close: %v", err)
		}
	})
	return j
}

// must takes a value and an error and fails the test on the error.
func must[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// testForgetMembers: a retired daemon's list of agents goes, and only its
// own; a daemon holding a lease that has not expired keeps its list, and
// one that recorded nothing is an error that says so.
func testForgetMembers(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.Open(t, h.Fresh(t))
	if err := db.SetMembers(ctx, "host1:/a", []store.Member{{Agent: "alice"}, {Agent: "rita", ReviewOnly: true}}, t0); err != nil {
		t.Fatal(err)
	}
	if err := db.SetMembers(ctx, "host2:/b", []store.Member{{Agent: "bob"}}, t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.AcquireLeases(ctx, store.Lease{Daemon: "host2:/b", Host: "host2", PID: 7}, []string{"bob"}, t0, time.Minute); err != nil {
		t.Fatal(err)
	}
	for daemon, into := range map[string]string{"host1:/a": "main", "host2:/b": ""} {
		if err := db.SetDaemonSetting(ctx, daemon, "merge.into", into); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.SetDaemonSetting(ctx, "host1:/a", "mailbox.max_body", "100"); err != nil {
		t.Fatal(err)
	}
	if got := must(db.DaemonSettings(ctx, "merge.into"))(t); len(got) != 2 || got["host1:/a"] != "main" || got["host2:/b"] != "" {
		t.Fatalf("DaemonSettings(merge.into) = %q, want host1:/a main and host2:/b empty", got)
	}
	// A daemon holding a lease but recording no agents (a release before
	// the list) is listed too; leases are counted live or expired at now.
	if _, _, err := db.AcquireLeases(ctx, store.Lease{Daemon: "host4:/d", Host: "host4", PID: 9}, []string{"dora"}, t0, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	got := must(db.Daemons(ctx, t0.Add(30*time.Second)))(t)
	want := []store.Daemon{
		{Name: "host1:/a", Agents: []string{"alice", "rita"}, Recorded: t0},
		{Name: "host2:/b", Agents: []string{"bob"}, Recorded: t0, Live: 1},
		{Name: "host4:/d", Agents: []string{}, Expired: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("Daemons = %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Name != w.Name || !slices.Equal(g.Agents, w.Agents) || !g.Recorded.Equal(w.Recorded) || g.Live != w.Live || g.Expired != w.Expired {
			t.Errorf("Daemons[%d] = %+v, want %+v", i, g, w)
		}
	}
	var live *store.LiveDaemonError
	if n, err := db.ForgetMembers(ctx, "host2:/b", t0.Add(30*time.Second)); !errors.As(err, &live) || live.Leases != 1 || n != 0 {
		t.Fatalf("ForgetMembers of a daemon whose lease runs = %d, %v; want a *LiveDaemonError of 1 lease", n, err)
	}
	if n, err := db.ForgetMembers(ctx, "host3:/c", t0); !errors.Is(err, store.ErrUnknownDaemon) || n != 0 {
		t.Fatalf("ForgetMembers of a daemon that recorded nothing = %d, %v; want ErrUnknownDaemon", n, err)
	}
	if n, err := db.ForgetMembers(ctx, "host1:/a", t0); err != nil || n != 2 {
		t.Fatalf("ForgetMembers of a retired daemon = %d, %v; want its 2 rows", n, err)
	}
	if got := must(db.DaemonSettings(ctx, "merge.into"))(t); len(got) != 1 || got["host2:/b"] != "" {
		t.Fatalf("DaemonSettings(merge.into) after host1:/a was forgotten = %q, want host2:/b's alone", got)
	}
	if got := must(db.DaemonSettings(ctx, "mailbox.max_body"))(t); len(got) != 0 {
		t.Fatalf("DaemonSettings(mailbox.max_body) after host1:/a was forgotten = %q, want none", got)
	}
	// Once its lease has expired, the other may go too.
	if n, err := db.ForgetMembers(ctx, "host2:/b", t0.Add(2*time.Minute)); err != nil || n != 1 {
		t.Fatalf("ForgetMembers of a daemon whose lease expired = %d, %v; want its row", n, err)
	}
	if ms := must(db.Members(ctx))(t); len(ms) != 0 {
		t.Fatalf("Members after both were forgotten = %+v, want none", ms)
	}
}

// testClaimDaemonSetting: a daemon's claim of a setting the swarm's
// daemons must agree on is refused, writing nothing, when a daemon that
// holds a live lease recorded another value; the same value, a daemon
// whose leases expired, or one that recorded nothing do not refuse it.
func testClaimDaemonSetting(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.Open(t, h.Fresh(t))
	const key = "merge.into"
	lease := func(daemon, agent string, ttl time.Duration) {
		t.Helper()
		if _, _, err := db.AcquireLeases(ctx, store.Lease{Daemon: daemon, Host: "h", PID: 1}, []string{agent}, t0, ttl); err != nil {
			t.Fatal(err)
		}
	}
	swarm := func() string {
		t.Helper()
		v, _, err := db.Setting(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	lease("host1:/a", "alice", time.Hour)
	lease("host2:/b", "bob", time.Hour)
	lease("host3:/c", "carl", time.Minute)
	if err := db.ClaimDaemonSetting(ctx, "host3:/c", key, "old", t0); err != nil {
		t.Fatal(err)
	}
	// host3's lease has expired by t0+2m: its "old" does not count.
	at := t0.Add(2 * time.Minute)
	if err := db.ClaimDaemonSetting(ctx, "host1:/a", key, "main", at); err != nil {
		t.Fatalf("the first claim beside an expired daemon's = %v", err)
	}
	var conflict *store.SettingConflictError
	err := db.ClaimDaemonSetting(ctx, "host2:/b", key, "", at)
	if !errors.As(err, &conflict) || *conflict != (store.SettingConflictError{Key: key, Daemon: "host1:/a", Theirs: "main"}) {
		t.Fatalf("a claim of another value beside a live daemon's = %v; want a conflict with host1:/a's main", err)
	}
	if got := must(db.DaemonSettings(ctx, key))(t); len(got) != 2 || got["host1:/a"] != "main" || got["host3:/c"] != "old" {
		t.Fatalf("DaemonSettings after a refused claim = %q; want host1:/a's and host3:/c's alone", got)
	}
	if got := swarm(); got != "main" {
		t.Fatalf("the swarm's %s after a refused claim = %q, want main", key, got)
	}
	if err := db.ClaimDaemonSetting(ctx, "host2:/b", key, "main", at); err != nil {
		t.Fatalf("a claim of the same value = %v", err)
	}
	// A daemon's own record does not stand in its way.
	if err := db.ClaimDaemonSetting(ctx, "host1:/a", key, "main", at); err != nil {
		t.Fatalf("a daemon's claim again = %v", err)
	}
	// Every lease expired: a new value is the swarm's.
	if err := db.ClaimDaemonSetting(ctx, "host3:/c", key, "trunk", t0.Add(2*time.Hour)); err != nil {
		t.Fatalf("a claim once every other daemon's leases expired = %v", err)
	}
	if got := swarm(); got != "trunk" {
		t.Fatalf("the swarm's %s = %q, want trunk", key, got)
	}
}

// testClaimDaemonSettingRaced: daemons that take their leases and claim
// different values at the same moment, each on its own handle (a daemon of
// its own): exactly one wins, every other is refused naming it, and only
// the winner's value is recorded.
func testClaimDaemonSettingRaced(t *testing.T, h Harness) {
	ctx := context.Background()
	target := h.Fresh(t)
	const n, key = 6, "merge.into"
	dbs := make([]*store.DB, n)
	for i := range dbs {
		dbs[i] = h.Open(t, target)
	}
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, db := range dbs {
		daemon := fmt.Sprintf("host%d:/d", i)
		wg.Go(func() {
			<-start
			if _, _, err := db.AcquireLeases(ctx, store.Lease{Daemon: daemon, Host: "h", PID: i}, []string{fmt.Sprint("agent", i)}, t0, time.Hour); err != nil {
				errs[i] = err
				return
			}
			errs[i] = db.ClaimDaemonSetting(ctx, daemon, key, fmt.Sprint("branch", i), t0)
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		var conflict *store.SettingConflictError
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("daemons %d and %d both claimed %s with different values", winner, i, key)
		case err == nil:
			winner = i
		case !errors.As(err, &conflict):
			t.Fatalf("daemon %d: %v", i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no daemon's claim won: %v", errs)
	}
	for i, err := range errs {
		var conflict *store.SettingConflictError
		if i != winner && (!errors.As(err, &conflict) || conflict.Daemon != fmt.Sprintf("host%d:/d", winner) || conflict.Theirs != fmt.Sprint("branch", winner)) {
			t.Errorf("daemon %d's refusal = %v; want one naming the winner, daemon %d", i, err, winner)
		}
	}
	got := must(dbs[0].DaemonSettings(ctx, key))(t)
	if len(got) != 1 || got[fmt.Sprintf("host%d:/d", winner)] != fmt.Sprint("branch", winner) {
		t.Errorf("DaemonSettings = %q; want the winner's alone", got)
	}
	if v, _, err := dbs[0].Setting(ctx, key); err != nil || v != fmt.Sprint("branch", winner) {
		t.Errorf("the swarm's %s = %q, %v; want the winner's", key, v, err)
	}
}
