package proc

import (
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/swarmd/swarmd/internal/cgroup"
)

// BenchmarkTreeTurnover is one tree per op: start /bin/true with stdin and
// output pipes, wait until the tree is done.
func BenchmarkTreeTurnover(b *testing.B) {
	b.Run("nice=0", func(b *testing.B) { benchTreeTurnover(b, 0) })
	// Each tree's fork on a reniced thread of its own, discarded after.
	b.Run("nice=10", func(b *testing.B) { benchTreeTurnover(b, 10) })
}

func benchTreeTurnover(b *testing.B, nice int) {
	s, err := NewSupervisor(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	s.SetNice(nice)
	env := os.Environ()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		tr, err := s.Start(Spec{Path: "/bin/true", Env: env, ID: "b" + strconv.Itoa(i),
			Stdin: strings.NewReader("prompt\n"), Output: io.Discard})
		if err != nil {
			b.Fatal(err)
		}
		<-tr.Done()
	}
}

// BenchmarkExecTurnover is the os/exec baseline for BenchmarkTreeTurnover.
func BenchmarkExecTurnover(b *testing.B) {
	env := os.Environ()
	b.ReportAllocs()
	for b.Loop() {
		cmd := exec.Command("/bin/true")
		cmd.Env = env
		cmd.Stdin = strings.NewReader("prompt\n")
		cmd.Stdout, cmd.Stderr = struct{ io.Writer }{io.Discard}, struct{ io.Writer }{io.Discard}
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRampCgroups is a swarm's ramp: 200 trees started at once, each
// with a cgroup of its own, from 200 goroutines; one op is all 200 started
// (the time to the last Start's return), then killed.
func BenchmarkRampCgroups(b *testing.B) {
	var id [6]byte
	_, _ = rand.Read(id[:])
	h, err := cgroup.Open("swarmd-proc-bench-" + hex.EncodeToString(id[:]))
	if err != nil {
		b.Skipf("cgroup v2 not writable here: %v", err)
	}
	defer h.Close()
	s, err := NewSupervisor(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	s.UseCgroups(h)
	env := os.Environ()
	const n = 200
	for i := 0; b.Loop(); i++ {
		trees := make([]*Tree, n)
		var wg sync.WaitGroup
		for j := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tr, err := s.Start(Spec{Path: "/bin/sleep", Args: []string{"60"}, Env: env,
					ID: "r" + strconv.Itoa(i) + "-" + strconv.Itoa(j)})
				if err != nil {
					b.Error(err)
					return
				}
				trees[j] = tr
			}()
		}
		wg.Wait()
		b.StopTimer()
		for _, tr := range trees {
			if tr != nil {
				_ = tr.Kill()
			}
		}
		for _, tr := range trees {
			if tr != nil {
				<-tr.Done()
			}
		}
		b.StartTimer()
	}
}
