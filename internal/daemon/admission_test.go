package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Six agents under limits.max_running 2: at no moment do more than two
// sessions run, and every agent makes progress (each runs several
// sessions). Each session marks itself running in a directory, counts the
// marks, works a moment and unmarks itself; a third session running
// beside two others would count three.
func TestAdmissionMaxRunning(t *testing.T) {
	dir := t.TempDir()
	script := `mkdir "$D/run.$SWARM_SESSION_ID"; ls -d "$D"/run.* | wc -l >> "$D/counts"; echo "$SWARM_AGENT_ID" >> "$D/sessions"; sleep 0.2; rmdir "$D/run.$SWARM_SESSION_ID"; echo working`
	var agents strings.Builder
	for i := 1; i <= 6; i++ {
		fmt.Fprintf(&agents, "  - {name: a%d, role: works}\n", i)
	}
	cfg := repo(t, fmt.Sprintf(`
listen: ""
limits: {max_running: 2}
sandbox: {writable: [%[1]q]}
defaults:
  backend: worker
  grace_period: 1s
  min_session_interval: 0s
  env: {D: %[1]q}
backends:
  worker: {type: command, command: sh, args: [-c, %[2]q]}
agents:
%[3]s`, dir, script, agents.String()))
	r := start(t, cfg)
	sessions := func() map[string]int {
		b, _ := os.ReadFile(filepath.Join(dir, "sessions"))
		n := map[string]int{}
		for _, a := range strings.Fields(string(b)) {
			n[a]++
		}
		return n
	}
	waitFor(t, "three sessions of every agent", func() bool {
		n := sessions()
		for i := 1; i <= 6; i++ {
			if n[fmt.Sprintf("a%d", i)] < 3 {
				return false
			}
		}
		return true
	})
	waitFor(t, "the waiters shown waiting for a slot", func() bool {
		for _, n := range r.names() {
			if rn, err := r.reg.Runner(n); err == nil && strings.HasPrefix(rn.Snapshot().Waiting, "waiting for a slot: 2 of 2 sessions running") {
				return true
			}
		}
		return false
	})
	r.stop(t)
	b, err := os.ReadFile(filepath.Join(dir, "counts"))
	if err != nil {
		t.Fatal(err)
	}
	most := 0
	for _, f := range strings.Fields(string(b)) {
		n, _ := strconv.Atoi(f)
		most = max(most, n)
	}
	if most != 2 {
		t.Fatalf("at most %d sessions ran at once; want exactly 2 (the limit, reached)", most)
	}
}

// Sessions run limits.session_nice nice values below the daemon.
func TestSessionsRunNicer(t *testing.T) {
	dir := t.TempDir()
	cfg := repo(t, fmt.Sprintf(`
listen: ""
limits: {session_nice: 5}
sandbox: {writable: [%[1]q]}
defaults:
  backend: worker
  min_session_interval: 0s
  env: {D: %[1]q}
backends:
  worker: {type: command, command: sh, args: [-c, 'cut -d" " -f19 /proc/self/stat > "$D/nice.tmp"; mv "$D/nice.tmp" "$D/nice"; sleep 60']}
agents:
  - {name: a1, role: works}
`, dir))
	r := start(t, cfg)
	var got []byte
	waitFor(t, "the session to say its nice value", func() bool {
		var err error
		got, err = os.ReadFile(filepath.Join(dir, "nice"))
		return err == nil
	})
	r.stop(t)
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	own, _ := strconv.Atoi(strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))[16])
	if want := strconv.Itoa(min(own+5, 19)); strings.TrimSpace(string(got)) != want {
		t.Fatalf("the session ran at nice %q, want %s", strings.TrimSpace(string(got)), want)
	}
}
