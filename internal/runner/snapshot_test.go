package runner

import "testing"

// An update that changes nothing wakes nobody and keeps the version; a
// change moves the version on by one and closes the channel Watch gave.
func TestPublishedUpdate(t *testing.T) {
	var p published
	p.init(Snapshot{Agent: "alice", Version: 4})
	s0, ch := p.watch()
	if p.update(func(*Snapshot) bool { return false }) {
		t.Error("update without a change reported one")
	}
	if isClosed(ch) || p.get().Version != s0.Version {
		t.Fatalf("no change: channel closed %v, version %d", isClosed(ch), p.get().Version)
	}
	if !p.update(func(s *Snapshot) bool { s.Idle = true; return true }) {
		t.Error("update with a change reported none")
	}
	if !isClosed(ch) {
		t.Fatal("a change did not close the watch channel")
	}
	s1, ch1 := p.watch()
	if got, want := s1.Version, s0.Version+1; got != want || !s1.Idle || s1.Agent != "alice" {
		t.Fatalf("after a change: version %d (want %d), snapshot %+v", got, want, s1)
	}
	if isClosed(ch1) {
		t.Fatal("the new watch channel is closed")
	}
}
