package hooks

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/zap"
)

// BenchmarkRun is the cost of one hook: fork/exec of /bin/sh running `true`,
// payload on stdin, the end of its tree.
func BenchmarkRun(b *testing.B) {
	sup := newSupervisor(b)
	r := New(sup, Config{Commands: map[Event][]string{SessionStart: {`true`}}}, zap.NewNop(), nil)
	dir, env := b.TempDir(), os.Environ()
	p := Payload{Event: SessionStart, Agent: "alice", SessionID: "s-1", Seq: 1, State: "Spawning"}
	ctx := context.Background()
	for b.Loop() {
		if err := r.Run(ctx, dir, env, p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunLoudHook is a hook that prints 20 MB, of which only
// MaxOutput is kept: the rest must be drained at pipe speed.
func BenchmarkRunLoudHook(b *testing.B) {
	const size = 20_000_000
	sup := newSupervisor(b)
	r := New(sup, Config{Commands: map[Event][]string{
		SessionEnd: {fmt.Sprintf(`head -c %d /dev/zero`, size)},
	}}, zap.NewNop(), nil)
	dir, env := b.TempDir(), os.Environ()
	ctx := context.Background()
	b.SetBytes(size)
	for b.Loop() {
		if err := r.Run(ctx, dir, env, Payload{Event: SessionEnd}); err != nil {
			b.Fatal(err)
		}
	}
}
