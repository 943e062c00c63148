package backend

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const benchPrompt = "You are agent alice. Read your mailbox and continue the task.\n"

var benchCommands = []struct {
	name string
	argv []string
}{
	{"true", []string{"/bin/true"}},
	{"sh-cat", []string{"/bin/sh", "-c", "cat >/dev/null"}},
}

// BenchmarkSessionTurnover is one whole session per op: log header, start
// with the prompt on stdin, output to the log, leader exit, tree end, footer.
func BenchmarkSessionTurnover(b *testing.B) {
	for _, bc := range benchCommands {
		b.Run(bc.name, func(b *testing.B) {
			c, err := NewCommand(newSupervisor(b), CommandConfig{Command: bc.argv[0], Args: bc.argv[1:]})
			if err != nil {
				b.Fatal(err)
			}
			dir := b.TempDir()
			sp := Spec{Agent: "alice", Dir: dir, Prompt: benchPrompt, LogPath: filepath.Join(dir, "bench.log"),
				Env: []string{"SWARM_AGENT_ID=alice"}}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				sp.SessionID, sp.Seq = "bench-"+strconv.Itoa(i), uint32(i+1)
				s, err := c.Start(context.Background(), sp)
				if err != nil {
					b.Fatal(err)
				}
				<-s.Done()
				if r := s.Result(); r.Outcome != OutcomeSuccess {
					b.Fatalf("result %+v", r)
				}
			}
		})
	}
}

// writerOnly hides *os.File's ReadFrom and Fd, so that os/exec copies the
// output through a pipe and a goroutine as the backend does (it must see the
// output to parse it and to track the heartbeat).
type writerOnly struct{ w io.Writer }

func (w writerOnly) Write(p []byte) (int, error) { return w.w.Write(p) }

// BenchmarkForkExecWait is the baseline: the same binary through os/exec with
// the prompt on stdin and output appended to a log file through a pipe.
func BenchmarkForkExecWait(b *testing.B) {
	for _, bc := range benchCommands {
		b.Run(bc.name, func(b *testing.B) {
			dir := b.TempDir()
			logPath := filepath.Join(dir, "bench.log")
			env := append(os.Environ(), "SWARM_AGENT_ID=alice")
			b.ReportAllocs()
			for b.Loop() {
				f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
				if err != nil {
					b.Fatal(err)
				}
				cmd := exec.Command(bc.argv[0], bc.argv[1:]...)
				cmd.Dir, cmd.Env = dir, env
				cmd.Stdin = strings.NewReader(benchPrompt)
				out := writerOnly{f}
				cmd.Stdout, cmd.Stderr = out, out
				if err := cmd.Run(); err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
		})
	}
}
