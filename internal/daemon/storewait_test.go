package daemon

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/swarmd/swarmd/internal/pgtest"
	"github.com/swarmd/swarmd/internal/store"
)

// storeWaitMsg starts the one line a start logs when it begins to wait
// for the store.
const storeWaitMsg = "the store is unreachable or busy: the start waits for it"

// logLines are a daemon's log, kept for a test to wait on.
type logLines struct{ *observer.ObservedLogs }

func observed() (*zap.Logger, logLines) {
	core, logs := observer.New(zap.DebugLevel)
	return zap.New(core), logLines{logs}
}

// count is how many lines have a message starting with msg and, when step
// is not "", the field step = step.
func (l logLines) count(msg, step string) int {
	n := 0
	for _, e := range l.All() {
		if strings.HasPrefix(e.Message, msg) && (step == "" || e.ContextMap()["step"] == step) {
			n++
		}
	}
	return n
}

// opening is an Open under way in a goroutine of its own.
type opening struct {
	done chan struct{}
	d    *Daemon
	err  error
}

func openAsync(ctx context.Context, t *testing.T, cfgPath string, log *zap.Logger) *opening {
	t.Helper()
	cfg := mustLoad(t, cfgPath)
	o := &opening{done: make(chan struct{})}
	go func() {
		defer close(o.done)
		o.d, o.err = Open(ctx, cfg, Options{Log: log})
	}()
	return o
}

// returned reports whether Open has returned.
func (o *opening) returned() bool {
	select {
	case <-o.done:
		return true
	default:
		return false
	}
}

// wait waits for Open to return, and fails t if it fails.
func (o *opening) wait(t *testing.T) *Daemon {
	t.Helper()
	select {
	case <-o.done:
	case <-time.After(20 * time.Second):
		t.Fatal("Open did not return once the store was back")
	}
	if o.err != nil {
		t.Fatalf("Open = %v, want the start to go on once the store is back", o.err)
	}
	return o.d
}

// waitWhileOpening waits for cond while Open runs: Open returning first
// (the start gave up) fails t.
func (o *opening) waitWhileOpening(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitFor(t, what+" (or Open returning)", func() bool { return cond() || o.returned() })
	if o.returned() {
		t.Fatalf("Open returned (%v) before %s: the start gave up on a store that was away", o.err, what)
	}
}

// runDaemon runs an opened daemon until the test ends.
func runDaemon(t *testing.T, d *Daemon) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Daemon: d, cancel: cancel, errc: make(chan error, 1)}
	go func() { r.errc <- d.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// TestStartWaitsForAStoppedServer: a daemon started while its PostgreSQL
// server is down waits for it, saying so once, and neither fails nor
// returns; once the server is started it opens the store (migrating it),
// recovers, and runs its agents.
func TestStartWaitsForAStoppedServer(t *testing.T) {
	srv := pgtest.Require(t)
	if err := srv.CreateDB("down"); err != nil {
		t.Fatal(err)
	}
	cfg := repo(t, sharedYAML(srv.URL("down"), 3*time.Second, "alice", "bob"))
	if err := srv.Stop("fast"); err != nil {
		t.Fatal(err)
	}
	log, logs := observed()
	o := openAsync(context.Background(), t, cfg, log)
	o.waitWhileOpening(t, "the wait for the store logged", func() bool { return logs.count(storeWaitMsg, "open") == 1 })
	// It keeps trying, and still waits: no second line says it waits.
	o.waitWhileOpening(t, "another try at the store", func() bool { return logs.count("the store still does not answer", "open") > 0 })
	if n := logs.count(storeWaitMsg, ""); n != 1 {
		t.Errorf("%d lines say the start waits for the store, want 1", n)
	}
	line := logs.FilterMessageSnippet(storeWaitMsg).All()[0]
	if s := line.ContextMap()["store"]; s != store.Redact(srv.URL("down")) {
		t.Errorf("the wait's line names the store %v, want %s", s, store.Redact(srv.URL("down")))
	}
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	d := o.wait(t)
	if logs.count("the store answers: the start goes on", "open") != 1 {
		t.Error("the end of the wait is not logged")
	}
	r := runDaemon(t, d)
	r.waitRunning(t, "alice", "bob")
}

// TestStartGoesOnAfterAServerRestartDuringIt: the server crashes (pg_ctl
// stop -m immediate, every connection cut) while a starting daemon waits
// on the leases held under its own name by a process that may be alive
// elsewhere (namesake.go): the start waits for the server rather than
// fail, and once the server is back takes its leases (the namesake's has
// expired unrenewed), recovers and runs its agent.
func TestStartGoesOnAfterAServerRestartDuringIt(t *testing.T) {
	srv := pgtest.RequireDurable(t) // an immediate stop loses no acknowledged commit
	if err := srv.CreateDB("restart"); err != nil {
		t.Fatal(err)
	}
	url := srv.URL("restart")
	cfgPath := repo(t, sharedYAML(url, time.Second, "alice"))
	cfg := mustLoad(t, cfgPath)
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	// A namesake on another machine holds alice under this daemon's name,
	// and stopped renewing: its lease runs out in a few seconds.
	db, err := store.Open(context.Background(), url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	namesake := store.Lease{Daemon: host + ":" + cfg.StateDir, Host: host, PID: 4242, Boot: "another-machine/pid:[1]"}
	held, _, err := db.AcquireLeases(context.Background(), namesake, []string{"alice"}, time.Now(), 4*time.Second)
	if err != nil || len(held) != 1 {
		t.Fatalf("the namesake's lease: %+v, %v", held, err)
	}
	took := held[0]
	db.Close()

	log, logs := observed()
	o := openAsync(context.Background(), t, cfgPath, log)
	o.waitWhileOpening(t, "the wait on the namesake's lease", func() bool {
		return logs.count("leases held under this daemon's own name", "") > 0
	})
	if err := srv.Stop("immediate"); err != nil {
		t.Fatal(err)
	}
	o.waitWhileOpening(t, "the start waiting for the store", func() bool {
		return logs.count(storeWaitMsg, "take the agents' leases and recover") == 1
	})
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	d := o.wait(t)
	r := runDaemon(t, d)
	r.waitRunning(t, "alice")
	ls, err := d.db.Leases(context.Background())
	if err != nil || len(ls) != 1 || ls[0].Agent != "alice" || ls[0].PID != os.Getpid() || ls[0].Epoch <= took.Epoch {
		t.Fatalf("leases = %+v, %v; want alice's, taken from the namesake (epoch %d) by this daemon", ls, err, took.Epoch)
	}
}

// TestStartFailsAtOnceOnAStoreThatRefuses: a store that refuses (no such
// database) is not waited for: Open fails at once, naming the store, and
// logs no wait.
func TestStartFailsAtOnceOnAStoreThatRefuses(t *testing.T) {
	srv := pgtest.Require(t)
	url := srv.URL("nosuchdb")
	log, logs := observed()
	began := time.Now()
	// Bounded: a start that waited on it would wait for good.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, err := Open(ctx, mustLoad(t, repo(t, sharedYAML(url, time.Second, "alice"))), Options{Log: log})
	if err == nil {
		t.Fatal("Open succeeded on a database that does not exist")
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("Open failed after %s, want at once", took.Round(time.Millisecond))
	}
	if msg := err.Error(); !strings.Contains(msg, store.Redact(url)) || !strings.Contains(msg, `"nosuchdb" does not exist`) || strings.Contains(msg, "\n") {
		t.Errorf("Open = %q, want one line naming the store and what is wrong", msg)
	}
	if n := logs.count(storeWaitMsg, ""); n != 0 {
		t.Errorf("the start waited (%d lines) on a store that refuses", n)
	}
}

// TestRunWaitsForTheStoreBeforeTheAgents: the server goes down between
// Open and Run: Run's first reads of the store (the budgets) wait for it,
// readiness (/readyz, whose listener is up by then) says so, and the
// agents run once it is back. A stop meanwhile ends the wait, and Run
// returns no error.
func TestRunWaitsForTheStoreBeforeTheAgents(t *testing.T) {
	srv := pgtest.Require(t)
	for _, stop := range []bool{true, false} {
		name := map[bool]string{true: "stopped", false: "served"}[stop]
		t.Run(name, func(t *testing.T) {
			if err := srv.CreateDB(name); err != nil {
				t.Fatal(err)
			}
			cfg := repo(t, sharedYAML(srv.URL(name), 3*time.Second, "alice"))
			log, logs := observed()
			d, err := Open(context.Background(), mustLoad(t, cfg), Options{Log: log})
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.Stop("fast"); err != nil {
				d.Close()
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			r := &running{Daemon: d, cancel: cancel, errc: make(chan error, 1)}
			go func() { r.errc <- d.Run(ctx) }()
			down := true
			t.Cleanup(func() {
				if down {
					if err := srv.Serve(); err != nil {
						t.Error(err)
					}
				}
				r.stop(t)
			})
			waitFor(t, "Run waiting for the store", func() bool { return logs.count(storeWaitMsg, "load the budgets") == 1 })
			if why := d.readiness(); !strings.HasPrefix(why, "waiting for the store to load the budgets: ") {
				t.Errorf("readiness while Run waits for the store = %q", why)
			}
			if stop {
				cancel()
				select {
				case err := <-r.errc:
					r.errc <- err // for r.stop
					if err != nil {
						t.Errorf("Run stopped while waiting for the store = %v, want nil", err)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("Run did not return when stopped while waiting for the store")
				}
				if n := len(d.reg.Names()); n != 0 {
					t.Errorf("%d agents registered by a Run stopped before they ran", n)
				}
				return
			}
			if err := srv.Serve(); err != nil {
				t.Fatal(err)
			}
			down = false
			r.waitRunning(t, "alice")
			waitFor(t, "ready", func() bool { return d.readiness() == "" })
		})
	}
}

// TestWaitStoreRefusesSetupErrors: an error the daemon judged the
// operator's (a SetupError) is never waited on, whatever it wraps.
func TestWaitStoreRefusesSetupErrors(t *testing.T) {
	d := &Daemon{log: zap.NewNop()}
	d.live.cfg = mustLoad(t, repo(t, agentsYAML("alice")))
	tries := 0
	judged := setupError(store.ErrDiskFull) // transient to the store, but judged
	err := d.waitStore(context.Background(), "do it", func(context.Context) error { tries++; return judged })
	if err != judged || tries != 1 {
		t.Fatalf("waitStore of a setup error = %v after %d tries, want it at once", err, tries)
	}
}
