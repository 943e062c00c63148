package runner

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestAgentOfSession(t *testing.T) {
	for _, name := range []string{"alice", "a-1", "x-2-3"} {
		id := newSessionID(name, 7)
		if got, ok := AgentOfSession(id); !ok || got != name {
			t.Errorf("AgentOfSession(%q) = %q, %v; want %q", id, got, ok, name)
		}
	}
	for _, id := range []string{"", "hook-0123abcd-agent_start-1", "alice-7", "alice-x-0123456789ab", "-7-0123456789ab", "alice-7-0123456789zz"} {
		if got, ok := AgentOfSession(id); ok {
			t.Errorf("AgentOfSession(%q) = %q, want not a session", id, got)
		}
	}
}

// A session set is one nothing is ending yet; taking it stops its timers;
// its sandbox is released once.
func TestCurrent(t *testing.T) {
	var c current
	if c.get() != nil || !c.startedAt().IsZero() || !c.lastOutput().IsZero() {
		t.Fatal("a session runs in a new runner")
	}
	c.timedOut, c.forced, c.interrupted = true, true, true
	s := &fakeSession{id: "alice-1-0123456789ab", done: make(chan struct{})}
	t0 := time.Unix(1000, 0)
	c.set(s, t0)
	if c.timedOut || c.forced || c.interrupted {
		t.Error("a new session inherited how the last one ended")
	}
	if c.get() != s || !c.startedAt().Equal(t0) {
		t.Fatalf("get %v started %v", c.get(), c.startedAt())
	}
	c.tm.startTimeout(time.Hour)
	released := 0
	c.release = func() { released++ }
	if got := c.take(); got != s || c.get() != nil || !c.startedAt().IsZero() || c.tm.timeout.armed() {
		t.Fatalf("take %v: get %v, started %v, timeout armed %v", got, c.get(), c.startedAt(), c.tm.timeout.armed())
	}
	c.uncontain()
	c.uncontain()
	if released != 1 {
		t.Errorf("sandbox released %d times, want 1", released)
	}
}

// Every session that began has a seq of its own; a completed one's is
// moved past by the machine; a seq another session took moves it forward,
// never back.
func TestSequence(t *testing.T) {
	q := sequence{n: 4}
	q.next()
	if q.n != 4 {
		t.Fatalf("next moved past an unused seq: %d", q.n)
	}
	q.begun(0, nil)
	q.next()
	if q.n != 5 || q.used {
		t.Fatalf("after a session began: seq %d used %v, want 5 false", q.n, q.used)
	}
	q.begun(0, nil)
	q.completed()
	q.next()
	if q.n != 6 {
		t.Fatalf("after a completed session: seq %d, want 6", q.n)
	}
	q.begun(9, fmt.Errorf("begin: %w", ErrSeqTaken))
	q.next()
	if q.n != 9 {
		t.Fatalf("seq taken, next free 9: seq %d", q.n)
	}
	q.begun(3, ErrSeqTaken)
	q.begun(0, errors.New("stopping"))
	q.next()
	if q.n != 9 {
		t.Fatalf("seq %d, want 9: a seq never goes back, a failed begin uses none", q.n)
	}
	q.newID("alice")
	if got, ok := AgentOfSession(q.id); !ok || got != "alice" || !strings.HasPrefix(q.id, "alice-9-") {
		t.Errorf("session id %q", q.id)
	}
}
