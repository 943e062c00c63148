package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/store"
)

// TestMailDeliveryUnderInterruptsAndKills is the delivery contract under
// stress: urgent and normal mail sent at random to agents whose sessions
// succeed, fail, time out, get interrupted or read a message explicitly,
// while the daemon is killed with SIGKILL twice. Every session copies its
// prompt to a file named by its session id, so the test knows exactly what
// each session was shown. At the end every message was acknowledged, either
// by a session that completed and was shown it, or by an explicit
// `swarmd mail read`, and no message was shown to two completed sessions.
func TestMailDeliveryUnderInterruptsAndKills(t *testing.T) {
	t.Parallel() // its own repositories, daemons and databases; mostly waiting on leases and sessions
	if testing.Short() {
		t.Skip("stress test")
	}
	repo := gitRepo(t)
	shown := t.TempDir()
	// Each session: save the prompt, then one of five behaviours at random.
	script := `cat > "$SHOWN/$SWARM_SESSION_ID.prompt"
r=$(( $(od -An -N1 -tu1 /dev/urandom) % 5 ))
case $r in
0) sleep 0.2; exit 0 ;;
1) sleep 0.1; exit 1 ;;
2) sleep 0.6; exit 0 ;;
3) sleep 30 ;;
4) id=$(grep -o '^### #[0-9]*' "$SHOWN/$SWARM_SESSION_ID.prompt" | head -1 | tr -dc 0-9)
   if [ -n "$id" ]; then "$SWARMD" mail read "$id" >/dev/null || exit 3; fi
   exit 1 ;;
esac`
	cfg := writeConfig(t, repo, fmt.Sprintf(`
listen: ""
sandbox: {writable: [%[1]q]}
defaults:
  backend: random
  session_timeout: 1500ms
  grace_period: 1s
  max_consecutive_errors: 1000
  max_total_errors: 1000
  env: {SHOWN: %[1]q, SWARMD: %[2]q}
backends:
  random:
    type: command
    command: sh
    args: [-c, %[3]q]
agents:
  - {name: alice, role: works}
  - {name: bob, role: works}
  - {name: carol, role: works}
`, shown, swarmdBin, script))
	stateDir := filepath.Join(repo, ".swarm")
	agents := []string{"alice", "bob", "carol"}

	d := startDaemon(t, cfg)
	d.waitLine("alice Running", transitionTo("alice", "Running"))
	db, err := mailbox.Open(context.Background(), filepath.Join(stateDir, "swarm.db"), store.Options{}, mailbox.Options{Agents: agents})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	sent := map[int64]bool{}
	kills := 0
	for i := range 150 {
		m, err := db.Send(context.Background(), mailbox.Draft{
			From: mailbox.Operator, To: agents[rng.IntN(len(agents))],
			Subject: "m" + strconv.Itoa(i), Body: "message " + strconv.Itoa(i), Urgent: rng.IntN(4) == 0,
		})
		if err != nil {
			t.Fatal(err)
		}
		sent[m.ID] = true
		time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond) // the traffic's pace, not a wait
		if i == 50 || i == 100 {
			waitTreeProcesses(t, stateDir, 1) // the kill cuts a session off
			_ = d.cmd.Process.Signal(syscall.SIGKILL)
			d.wait(5 * time.Second)
			kills++
			d = startDaemon(t, cfg)
		}
	}

	// Drain: every message acknowledged.
	deadline := time.Now().Add(90 * time.Second)
	for {
		var pending int
		if err := db.Store().SQL().QueryRow(`SELECT COUNT(*) FROM messages WHERE delivered_at IS NULL`).Scan(&pending); err != nil {
			t.Fatal(err)
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d messages still unacknowledged after 90 s", pending)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(20 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	waitNoTreeProcesses(t, stateDir, 2*time.Second)

	// What each session was shown, and how each session ended.
	heading := regexp.MustCompile(`(?m)^### #(\d+)`)
	showings := map[string][]int64{}
	reshown := 0
	files, _ := filepath.Glob(filepath.Join(shown, "*.prompt"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		id := strings.TrimSuffix(filepath.Base(f), ".prompt")
		for _, m := range heading.FindAllSubmatch(b, -1) {
			n, _ := strconv.ParseInt(string(m[1]), 10, 64)
			showings[id] = append(showings[id], n)
		}
		reshown += strings.Count(string(b), "Shown before, but ")
	}
	outcome := map[string]string{}
	rows, err := db.Store().SQL().Query(`SELECT session_id, outcome FROM sessions`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, o string
		if err := rows.Scan(&id, &o); err != nil {
			t.Fatal(err)
		}
		outcome[id] = o
	}
	rows.Close()
	completedShowings := map[int64][]string{}
	for sess, ids := range showings {
		if outcome[sess] == store.OutcomeSuccess {
			for _, id := range ids {
				completedShowings[id] = append(completedShowings[id], sess)
			}
		}
	}

	byRead := 0
	for id := range sent {
		m, err := db.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if m.DeliveredAt == nil {
			t.Fatalf("message %d not delivered", id)
		}
		if !contains(showings[m.ClaimedSession], id) {
			t.Errorf("message %d acknowledged (%s) by session %q, whose prompt did not show it", id, m.AckedBy, m.ClaimedSession)
		}
		switch m.AckedBy {
		case mailbox.AckSession:
			if outcome[m.ClaimedSession] != store.OutcomeSuccess {
				t.Errorf("message %d acknowledged by session %s, which ended %q", id, m.ClaimedSession, outcome[m.ClaimedSession])
			}
		case mailbox.AckRead:
			byRead++
		default:
			t.Errorf("message %d delivered with acked_by %q", id, m.AckedBy)
		}
		if s := completedShowings[id]; len(s) > 1 {
			t.Errorf("message %d shown to %d completed sessions: %v", id, len(s), s)
		}
	}
	t.Logf("%d messages, %d sessions, %d SIGKILLs, %d acknowledged by mail read, %d shown again with a note",
		len(sent), len(showings), kills, byRead, reshown)
	if reshown == 0 {
		t.Error("no message was shown again: the run did not exercise incomplete sessions")
	}
}

func contains(ids []int64, id int64) bool {
	for _, v := range ids {
		if v == id {
			return true
		}
	}
	return false
}
