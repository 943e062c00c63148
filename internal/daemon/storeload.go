package daemon

import (
	"fmt"
	"sync"
	"time"

	"github.com/swarmd/swarmd/internal/store"
)

// storeLoadWindow is how far back swarmd status looks at the store's
// write connection.
const storeLoadWindow = time.Minute

// storeLoad keeps samples of the store's write connection (store.WriterStats),
// taken by the health loop, so that swarmd status can say how busy it was
// lately without a metrics server: whether the store bounds the daemon.
type storeLoad struct {
	mu      sync.Mutex
	samples []storeSample // oldest first, none older than the window needs
}

type storeSample struct {
	at time.Time
	s  store.WriterStats
}

// note records a sample and forgets those the window no longer needs:
// every one older than the newest that is a window old.
func (l *storeLoad) note(at time.Time, s store.WriterStats) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.samples = append(l.samples, storeSample{at, s})
	drop := 0
	for drop+1 < len(l.samples) && !l.samples[drop+1].at.After(at.Add(-storeLoadWindow)) {
		drop++
	}
	l.samples = append(l.samples[:0], l.samples[drop:]...)
}

// describe says how busy the write connection was from the newest sample
// at least a window old (else the oldest) to now (cur): "" before any
// sample.
func (l *storeLoad) describe(now time.Time, cur store.WriterStats) string {
	l.mu.Lock()
	if len(l.samples) == 0 {
		l.mu.Unlock()
		return ""
	}
	from := l.samples[0]
	for _, s := range l.samples[1:] {
		if s.at.After(now.Add(-storeLoadWindow)) {
			break
		}
		from = s
	}
	l.mu.Unlock()
	span := now.Sub(from.at)
	if span <= 0 {
		return ""
	}
	busy := float64(cur.Busy-from.s.Busy) / float64(span)
	writes := cur.Turns - from.s.Turns
	out := fmt.Sprintf("store: the write connection busy %.0f%% of the last %.0fs, %d writes", 100*busy, span.Seconds(), writes)
	if writes > 0 {
		wait := (cur.Waited - from.s.Waited) / time.Duration(writes)
		out += fmt.Sprintf(" waiting %s each on average", wait.Round(time.Microsecond))
	}
	return out
}
