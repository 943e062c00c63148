package daemon

import (
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/store"
)

// The status line compares now with the oldest sample in the last minute,
// and the samples kept stay bounded.
func TestStoreLoad(t *testing.T) {
	var l storeLoad
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	if got := l.describe(t0, store.WriterStats{}); got != "" {
		t.Errorf("before any sample: %q, want nothing", got)
	}
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	// Every 5 s for two minutes: 100 writes, 500 ms busy and 50 ms
	// waited a second.
	stats := func(s int) store.WriterStats {
		return store.WriterStats{Turns: int64(100 * s), Busy: time.Duration(s) * 500 * time.Millisecond, Waited: time.Duration(s) * 50 * time.Millisecond}
	}
	for s := 0; s <= 120; s += 5 {
		l.note(at(s), stats(s))
	}
	if n := len(l.samples); n > 14 {
		t.Errorf("%d samples kept, want at most a minute's and one more", n)
	}
	// From the newest sample a minute old (at 60 s) to 122 s.
	got := l.describe(at(122), stats(122))
	want := "store: the write connection busy 50% of the last 62s, 6200 writes waiting 500µs each on average"
	if got != want {
		t.Errorf("describe = %q\n want %q", got, want)
	}
	// Right after the first sample: from it.
	var one storeLoad
	one.note(at(0), store.WriterStats{})
	if got, want := one.describe(at(10), store.WriterStats{Turns: 4, Busy: 2500 * time.Millisecond, Waited: 4 * time.Millisecond}),
		"store: the write connection busy 25% of the last 10s, 4 writes waiting 1ms each on average"; got != want {
		t.Errorf("describe = %q\n want %q", got, want)
	}
}
