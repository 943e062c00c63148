// Command mailcli measures `swarmd mail send` as an agent runs it: process
// start to exit, p50 and p99 over N sends, next to the same number of
// `true` runs (the fork/exec floor) in the same run.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/store"
)

func main() {
	bin := flag.String("bin", "bin/swarmd", "swarmd binary")
	n := flag.Int("n", 200, "sends")
	flag.Parse()
	dir, err := os.MkdirTemp("", "swarmd-mailcli")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(dir)
	dbPath := filepath.Join(dir, "swarm.db")
	db, err := mailbox.Open(context.Background(), dbPath, store.Options{}, mailbox.Options{Agents: []string{"alice", "bob"}})
	if err != nil {
		fail(err)
	}
	db.Close()
	env := append(os.Environ(), "SWARM_DB_PATH="+dbPath, "SWARM_AGENTS=alice,bob", "SWARM_AGENT_ID=alice")
	send := measure(*n, func(i int) *exec.Cmd {
		c := exec.Command(*bin, "mail", "send", "--to", "bob", "--subject", "bench", fmt.Sprintf("message %d", i))
		c.Env = env
		return c
	})
	floor := measure(*n, func(int) *exec.Cmd { return exec.Command("/bin/true") })
	fmt.Printf("swarmd mail send: p50=%v p99=%v   /bin/true: p50=%v   (n=%d)\n",
		pct(send, .5), pct(send, .99), pct(floor, .5), *n)
}

func measure(n int, mk func(int) *exec.Cmd) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		c := mk(i)
		start := time.Now()
		if b, err := c.CombinedOutput(); err != nil {
			fail(fmt.Errorf("%v: %s", err, b))
		}
		out[i] = time.Since(start)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func pct(d []time.Duration, p float64) time.Duration {
	return d[int(p*float64(len(d)-1))].Round(10 * time.Microsecond)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "mailcli:", err)
	os.Exit(1)
}
