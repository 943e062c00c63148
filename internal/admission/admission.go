// Package admission decides when a session may start, so that the swarm's
// limits hold before the kernel has to act: at most MaxRunning sessions at
// once (and PerProvider of one provider's), and none while the host has
// less than MinAvailable memory. Agents wait for a slot in the order they
// asked; a waiter that only its provider's limit holds back does not hold
// back the ones behind it.
package admission

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Limits are the swarm's; zero values are no limit.
type Limits struct {
	MaxRunning   int
	PerProvider  map[string]int // by provider (backend type: claude, codex, gemini, command)
	MinAvailable int64          // bytes of MemAvailable (/proc/meminfo)
}

// Admission hands out slots. The zero value is not usable: New.
type Admission struct {
	mu      sync.Mutex
	limits  Limits
	running int
	byProv  map[string]int
	queue   []*waiter
	// memAvailable reads the host's available memory; memPoll is how
	// often a wait for memory looks again.
	memAvailable func() (int64, error)
	memPoll      time.Duration
}

type waiter struct {
	agent, provider string
	granted         chan struct{} // closed when the slot is the waiter's
}

// New makes an admission with limits, reading the host's memory from
// /proc/meminfo.
func New(l Limits) *Admission {
	return &Admission{limits: l, byProv: map[string]int{}, memAvailable: MemAvailable, memPoll: time.Second}
}

// SetLimits replaces the limits (a config reload); waiters a raised limit
// lets in are granted at once.
func (a *Admission) SetLimits(l Limits) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.limits = l
	a.grantLocked()
}

// Running is how many slots are held; Waiting how many agents wait.
func (a *Admission) Running() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running
}

// Waiting is how many agents wait for a slot.
func (a *Admission) Waiting() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.queue)
}

// Acquire waits for a slot for agent's session on provider, telling
// waiting why while it waits, and returns its release (call it once,
// when the session ended or did not start), or ctx's error.
func (a *Admission) Acquire(ctx context.Context, agent, provider string, waiting func(reason string)) (release func(), err error) {
	w := &waiter{agent: agent, provider: provider, granted: make(chan struct{})}
	a.mu.Lock()
	a.queue = append(a.queue, w)
	a.grantLocked()
	a.mu.Unlock()
	for {
		reason, memWait := a.reason(w)
		if waiting != nil && reason != "" {
			waiting(reason)
		}
		var timer *time.Timer
		var poll <-chan time.Time
		if memWait {
			timer = time.NewTimer(a.memPoll)
			poll = timer.C
		}
		select {
		case <-w.granted:
			if timer != nil {
				timer.Stop()
			}
			return a.releaser(provider), nil
		case <-poll:
			a.mu.Lock()
			a.grantLocked()
			a.mu.Unlock()
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			a.mu.Lock()
			defer a.mu.Unlock()
			select {
			case <-w.granted: // granted meanwhile: give it back
				a.releaseLocked(provider)
			default:
				a.remove(w)
			}
			return nil, ctx.Err()
		}
	}
}

func (a *Admission) releaser(provider string) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.releaseLocked(provider)
		})
	}
}

func (a *Admission) releaseLocked(provider string) {
	a.running--
	a.byProv[provider]--
	a.grantLocked()
}

func (a *Admission) remove(w *waiter) {
	for i, q := range a.queue {
		if q == w {
			a.queue = append(a.queue[:i], a.queue[i+1:]...)
			break
		}
	}
	a.grantLocked() // a waiter behind it may fit now
}

// grantLocked grants slots to waiters in order while the limits allow.
func (a *Admission) grantLocked() {
	for i := 0; i < len(a.queue); {
		w := a.queue[i]
		if a.limits.MaxRunning > 0 && a.running >= a.limits.MaxRunning {
			return
		}
		if n := a.limits.PerProvider[w.provider]; n > 0 && a.byProv[w.provider] >= n {
			i++ // its provider is full: the next may be of another
			continue
		}
		if a.limits.MinAvailable > 0 {
			if avail, err := a.memAvailable(); err == nil && avail < a.limits.MinAvailable {
				return
			}
		}
		a.queue = append(a.queue[:i], a.queue[i+1:]...)
		a.running++
		a.byProv[w.provider]++
		close(w.granted)
	}
}

// reason says why w waits, and whether it is for memory (which nothing
// signals: the wait polls).
func (a *Admission) reason(w *waiter) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	pos := 0
	for i, q := range a.queue {
		if q == w {
			pos = i + 1
		}
	}
	if pos == 0 {
		return "", false // granted
	}
	l := a.limits
	switch {
	case l.MaxRunning > 0 && a.running >= l.MaxRunning:
		return fmt.Sprintf("waiting for a slot: %d of %d sessions running (limits.max_running), %d in line before it", a.running, l.MaxRunning, pos-1), false
	case l.PerProvider[w.provider] > 0 && a.byProv[w.provider] >= l.PerProvider[w.provider]:
		return fmt.Sprintf("waiting for a slot: %d of %d %s sessions running (limits.per_provider)", a.byProv[w.provider], l.PerProvider[w.provider], w.provider), false
	case l.MinAvailable > 0:
		avail, _ := a.memAvailable()
		return fmt.Sprintf("waiting for a slot: %d MiB of memory available, limits.min_available_memory is %d MiB", avail>>20, l.MinAvailable>>20), true
	}
	return "waiting for a slot", false
}

// MemAvailable is the host's MemAvailable from /proc/meminfo, in bytes.
func MemAvailable() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	return parseMemAvailable(b)
}

func parseMemAvailable(b []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("meminfo: MemAvailable: %w", err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("meminfo: no MemAvailable line")
}
