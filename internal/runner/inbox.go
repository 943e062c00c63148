package runner

import (
	"sync"
	"sync/atomic"
	"time"
)

// inbox is what the agent hears of from other goroutines between its
// steps: urgent mail (from the router) and wake-ups (new mail or tasks, a
// resume), each coalesced in a channel of capacity 1; and whether it waits
// idle for them.
type inbox struct {
	mu        sync.Mutex
	maxUrgent int64     // the newest urgent message heard of; guarded by mu
	urgentAt  time.Time // when it was committed; guarded by mu
	urgent    chan struct{}
	wake      chan struct{}
	waiting   atomic.Bool // idle, or building a prompt that may find it idle
	watermark int64       // owned by the Run goroutine: the newest message a prompt holds
}

func (in *inbox) init() {
	in.urgent, in.wake = make(chan struct{}, 1), make(chan struct{}, 1)
}

// noteUrgent records urgent message id, committed at committedAt, and
// tells the Run goroutine.
func (in *inbox) noteUrgent(id int64, committedAt time.Time) {
	in.mu.Lock()
	if id > in.maxUrgent {
		in.maxUrgent, in.urgentAt = id, committedAt
	}
	in.mu.Unlock()
	poke(in.urgent)
}

// known is the newest urgent message heard of so far.
func (in *inbox) known() int64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.maxUrgent
}

// pendingUrgent reports whether urgent mail newer than the last prompt
// waits, and when the newest was committed.
func (in *inbox) pendingUrgent() (bool, time.Time) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.maxUrgent > in.watermark, in.urgentAt
}

// held raises the watermark to a built prompt's: its own, and the urgent
// mail heard of before it was built (committed before it, so in it).
func (in *inbox) held(prompt, known int64) {
	in.watermark = max(in.watermark, prompt, known)
}

func (in *inbox) wakeUp() { poke(in.wake) }

// poke sends on a channel of capacity 1 without blocking: sends coalesce.
func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
