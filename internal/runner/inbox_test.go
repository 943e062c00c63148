package runner

import (
	"testing"
	"time"
)

// Urgent mail keeps the newest id and its commit time; it is pending until
// a prompt's watermark covers it, which never goes down; signals coalesce.
func TestInbox(t *testing.T) {
	var in inbox
	in.init()
	t0 := time.Unix(1000, 0)
	if p, _ := in.pendingUrgent(); p {
		t.Fatal("urgent mail pending in a new inbox")
	}
	in.noteUrgent(5, t0)
	in.noteUrgent(3, t0.Add(time.Second)) // older: changes nothing
	if got := len(in.urgent); got != 1 {
		t.Errorf("%d urgent signals queued, want 1", got)
	}
	if p, at := in.pendingUrgent(); !p || !at.Equal(t0) || in.known() != 5 {
		t.Fatalf("pending %v at %v, known %d; want true at %v, 5", p, at, in.known(), t0)
	}
	in.held(4, 5) // the prompt held 4, and 5 was heard of before it
	if p, _ := in.pendingUrgent(); p {
		t.Fatal("urgent mail the prompt holds still pending")
	}
	in.held(2, 0)
	if in.watermark != 5 {
		t.Fatalf("watermark went down to %d", in.watermark)
	}
	in.noteUrgent(6, t0.Add(time.Minute))
	if p, at := in.pendingUrgent(); !p || !at.Equal(t0.Add(time.Minute)) {
		t.Fatalf("newer urgent mail: pending %v at %v", p, at)
	}
	in.wakeUp()
	in.wakeUp()
	if got := len(in.wake); got != 1 {
		t.Errorf("%d wake-ups queued, want 1", got)
	}
}
