package runner

import (
	"testing"
	"time"
)

// The last queued settings win and are taken once.
func TestUpdatesTakeOnce(t *testing.T) {
	var u updates
	if u.take() != nil {
		t.Fatal("settings queued in a new runner")
	}
	u.put(Settings{Role: "a"})
	u.put(Settings{Role: "b"})
	if got := u.take(); got == nil || got.Role != "b" {
		t.Fatalf("took %+v, want role b", got)
	}
	if u.take() != nil {
		t.Fatal("settings taken twice")
	}
}

// A reload replaces what it may change, zero values too (no limit, no
// gate), but keeps the backend, prompter, settler and grace period it does
// not name.
func TestConfigApply(t *testing.T) {
	be1, be2, pr := &fakeBackend{}, &fakeBackend{}, &fakePrompter{}
	c := Config{Role: "old", Backend: be1, Prompter: pr, Settler: pr, GracePeriod: 5 * time.Second,
		Timeout: time.Hour, MaxSessions: 3, MaxSilent: 2, Gate: &fakeGate{}, Env: []string{"A=1"}}
	c.apply(&Settings{Role: "new", Timeout: time.Minute})
	if c.Role != "new" || c.Timeout != time.Minute || c.MaxSessions != 0 || c.MaxSilent != 0 || c.Gate != nil || c.Env != nil {
		t.Errorf("after a reload: %+v", c)
	}
	if c.Backend != Backend(be1) || c.Prompter != Prompter(pr) || c.Settler != Settler(pr) || c.GracePeriod != 5*time.Second {
		t.Errorf("a reload that named none replaced the backend, prompter, settler or grace period: %+v", c)
	}
	c.apply(&Settings{Backend: be2, GracePeriod: 7 * time.Second})
	if c.Backend != Backend(be2) || c.GracePeriod != 7*time.Second {
		t.Errorf("backend %p grace %v, want %p 7s", c.Backend, c.GracePeriod, be2)
	}
}
