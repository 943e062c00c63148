package proc

import (
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkTreeTurnover is one tree per op: start /bin/true with stdin and
// output pipes, wait until the tree is done.
func BenchmarkTreeTurnover(b *testing.B) {
	s, err := NewSupervisor(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
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
