// Command sessioncpu measures what one session costs in CPU: the daemon's
// own (utime+stime) and its children's (cutime+cstime: the agent, git, and
// whatever the daemon reaps as a subreaper), per session completed in a
// window, for an agent whose program exits at once. Three subjects go
// through the same /proc accounting, alternated round by round so that they
// share the machine's load:
//
//   - floor: a bare Go loop that fork/exec/waits the program;
//   - peer: a bare Go supervisor shaped like a peer daemon: per session it
//     writes a prompt file, creates a log file, starts the program in its
//     own process group with the prompt on a stdin pipe and stdout piped,
//     scans the output lines into the log, waits and kills the group;
//   - swarmd: `swarmd run` with one agent on a `command` backend running the
//     program (min_session_interval 0s, so nothing paces it) on a real git
//     repository; -base adds a second swarmd binary (before/after);
//   - swarmd-noiso: the same swarmd with isolation: off, and swarmd-cgroup
//     with cgroups but no sandbox (a bwrap that is not there), so that the
//     ratios are what a cgroup per session and a bubblewrap sandbox per
//     session cost (where the host allows them).
//
// The floor and the peer are this binary re-executed in a hidden mode.
package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/swarmd/swarmd/bench/internal/harness"
)

// The hidden modes: the environment says which loop to run, where, and
// which file counts its sessions.
const (
	envMode    = "SESSIONCPU_MODE"
	envDir     = "SESSIONCPU_DIR"
	envCmd     = "SESSIONCPU_CMD"
	envCounter = "SESSIONCPU_COUNTER"
)

func main() {
	if mode := os.Getenv(envMode); mode != "" {
		if err := loop(mode, os.Getenv(envDir), os.Getenv(envCmd), os.Getenv(envCounter)); err != nil {
			fmt.Fprintln(os.Stderr, "sessioncpu", mode+":", err)
			os.Exit(1)
		}
		return
	}
	var o options
	flag.StringVar(&o.bin, "bin", "bin/swarmd", "swarmd binary")
	flag.StringVar(&o.base, "base", "", "a second swarmd binary measured in the same rounds (before/after)")
	flag.StringVar(&o.dir, "dir", "", "parent of the temporary directories (\"\": the system's; /dev/shm for tmpfs)")
	flag.StringVar(&o.cmd, "cmd", "/bin/true", "the agent's program")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "time after the first session before the window opens")
	flag.DurationVar(&o.window, "window", 5*time.Second, "measuring window")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds; each measures every subject once")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "sessioncpu:", err)
		os.Exit(1)
	}
}

type options struct {
	bin, base, dir, cmd string
	warmup, window      time.Duration
	rounds              int
}

// figure is one subject's window: CPU per session in ms.
type figure struct {
	daemon, children float64
	rate             float64 // sessions per second
	// switches is the daemon's voluntary context switches per session: each
	// is one of its threads going to sleep to be woken again, the hand-offs
	// a session costs.
	switches float64
}

type subject struct {
	name string
	run  func(o options) (figure, error)
}

func run(o options) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable: %w", err)
	}
	bin, err := filepath.Abs(o.bin)
	if err != nil {
		return err
	}
	subjects := []subject{
		{"floor", func(o options) (figure, error) { return measureLoop(o, self, "floor") }},
		{"peer", func(o options) (figure, error) { return measureLoop(o, self, "peer") }},
	}
	if o.base != "" {
		base, err := filepath.Abs(o.base)
		if err != nil {
			return err
		}
		subjects = append(subjects, subject{"swarmd-base", func(o options) (figure, error) { return measureSwarmd(o, base, "") }})
	}
	subjects = append(subjects,
		subject{"swarmd-noiso", func(o options) (figure, error) { return measureSwarmd(o, bin, "isolation: off") }},
		// cgroups without the sandbox: a bwrap that is not there.
		subject{"swarmd-cgroup", func(o options) (figure, error) {
			return measureSwarmd(o, bin, "sandbox: {bwrap: /nonexistent/bwrap}")
		}},
		subject{"swarmd", func(o options) (figure, error) { return measureSwarmd(o, bin, "") }})

	// Every subject's files stay until the run is over. On ext4 without a
	// journal, an inode freed in the last 5 minutes (300 s while its table
	// block is dirty) is skipped when a file is created: a round that
	// deleted the last one's thousands of logs made every creation of the
	// next scan them, and that cost swamped a session's own.
	top, err := os.MkdirTemp(o.dir, "sessioncpu-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(top)
	o.dir = top
	probe, err := harness.CreateCost(top)
	if err != nil {
		return err
	}
	fmt.Printf("program %s, files under %s, %v window after %v warm-up, %d rounds\n", o.cmd, top, o.window, o.warmup, o.rounds)
	fmt.Printf("creating a file costs %v here now (on ext4 without a journal, files deleted in the last 5 minutes raise it)\n", probe)
	figs := make(map[string][]figure)
	for i := range o.rounds {
		for _, s := range subjects {
			f, err := s.run(o)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			figs[s.name] = append(figs[s.name], f)
			fmt.Printf("round %d  %-12s daemon %6.3f ms/session  children %6.3f ms/session  %7.1f sessions/s  %5.1f switches/session\n",
				i+1, s.name, f.daemon, f.children, f.rate, f.switches)
		}
	}
	fmt.Printf("\nmedians of %d rounds (ms per session)\n%-12s %8s %9s %11s %9s\n", o.rounds, "subject", "daemon", "children", "sessions/s", "switches")
	med := make(map[string]figure)
	for _, s := range subjects {
		fs := figs[s.name]
		m := figure{
			daemon:   median(fs, func(f figure) float64 { return f.daemon }),
			children: median(fs, func(f figure) float64 { return f.children }),
			rate:     median(fs, func(f figure) float64 { return f.rate }),
			switches: median(fs, func(f figure) float64 { return f.switches }),
		}
		med[s.name] = m
		fmt.Printf("%-12s %8.3f %9.3f %11.1f %9.1f\n", s.name, m.daemon, m.children, m.rate, m.switches)
	}
	// Ratios per round (the subjects of a round shared the machine's load),
	// then their median.
	fmt.Println("\nratios of daemon CPU per session (median of the rounds' ratios)")
	for _, s := range subjects {
		if !strings.HasPrefix(s.name, "swarmd") {
			continue
		}
		for _, ref := range []string{"floor", "peer", "swarmd-base", "swarmd-noiso", "swarmd-cgroup"} {
			if ref == s.name || figs[ref] == nil {
				continue
			}
			rs := make([]figure, o.rounds)
			for i := range rs {
				rs[i].daemon = figs[s.name][i].daemon / figs[ref][i].daemon
				rs[i].children = figs[s.name][i].children / figs[ref][i].children
			}
			fmt.Printf("%s/%s: daemon %.2fx  children %.2fx\n", s.name, ref,
				median(rs, func(f figure) float64 { return f.daemon }), median(rs, func(f figure) float64 { return f.children }))
		}
	}
	if probe, err = harness.CreateCost(top); err == nil {
		fmt.Printf("\ncreating a file costs %v at the end\n", probe)
	}
	return nil
}

func median(fs []figure, get func(figure) float64) float64 {
	v := make([]float64, len(fs))
	for i, f := range fs {
		v[i] = get(f)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// measure takes the CPU, context switch and session counts of pid over the
// window, once the first session has completed and the warm-up has passed.
func measure(o options, pid int, sessions func() (int64, error)) (figure, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := sessions()
		if err != nil {
			return figure{}, err
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			return figure{}, errors.New("no session completed in 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(o.warmup)
	c0, err := cpu(pid)
	if err != nil {
		return figure{}, err
	}
	n0, err := sessions()
	if err != nil {
		return figure{}, err
	}
	t0 := time.Now()
	time.Sleep(o.window)
	c1, err := cpu(pid)
	if err != nil {
		return figure{}, err
	}
	n1, err := sessions()
	if err != nil {
		return figure{}, err
	}
	elapsed := time.Since(t0)
	n := float64(n1 - n0)
	if n <= 0 {
		return figure{}, errors.New("no session completed in the window")
	}
	return figure{
		daemon:   float64(c1.self-c0.self) * tick / n,
		children: float64(c1.children-c0.children) * tick / n,
		rate:     n / elapsed.Seconds(),
		switches: float64(c1.switches-c0.switches) / n,
	}, nil
}

// tick is one clock tick of /proc/PID/stat in ms (USER_HZ is 100 on Linux).
const tick = 10.0

type ticks struct{ self, children, switches int64 }

// cpu reads utime+stime and cutime+cstime of pid: the children's figure
// holds every child pid has reaped, and as a subreaper that includes the
// orphans of its sessions' trees.
func cpu(pid int) (ticks, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ticks{}, err
	}
	// Fields after the command name, which may hold spaces: field 3 is the
	// state, so utime (14) is index 11.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	var v [4]int64
	for i := range v {
		if v[i], err = strconv.ParseInt(f[11+i], 10, 64); err != nil {
			return ticks{}, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
		}
	}
	sw, err := switches(pid)
	if err != nil {
		return ticks{}, err
	}
	return ticks{self: v[0] + v[1], children: v[2] + v[3], switches: sw}, nil
}

// switches sums the voluntary context switches of pid's threads (a thread
// that has exited takes its count with it; the Go runtime keeps its threads).
func switches(pid int) (int64, error) {
	tasks, err := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/status")
	if err != nil {
		return 0, err
	}
	var n int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended meanwhile
		}
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
				c, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err != nil {
					return 0, fmt.Errorf("parse %s: %w", t, err)
				}
				n += c
			}
		}
	}
	return n, nil
}

// measureLoop runs this binary in a hidden mode and measures it.
func measureLoop(o options, self, mode string) (figure, error) {
	dir, err := os.MkdirTemp(o.dir, mode+"-")
	if err != nil {
		return figure{}, err
	}
	counter := filepath.Join(dir, "counter")
	if err := os.WriteFile(counter, make([]byte, 8), 0o644); err != nil {
		return figure{}, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), envMode+"="+mode, envDir+"="+dir, envCmd+"="+o.cmd, envCounter+"="+counter)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return figure{}, err
	}
	stop := onSignal(func() { _ = cmd.Process.Kill() })
	defer stop()
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	return measure(o, cmd.Process.Pid, func() (int64, error) {
		b, err := os.ReadFile(counter)
		if err != nil || len(b) < 8 {
			return 0, fmt.Errorf("read the session counter: %w", err)
		}
		return int64(binary.NativeEndian.Uint64(b)), nil
	})
}

// measureSwarmd runs `swarmd run` with one agent and counts the sessions
// its log says ended; isolation, if set, is the config's top-level lines.
func measureSwarmd(o options, bin, isolation string) (figure, error) {
	work, err := harness.RepoIn(o.dir, "swarmd-")
	if err != nil {
		return figure{}, err
	}
	head := fmt.Sprintf("defaults: {backend: t, session_timeout: 1h, min_session_interval: 0s}\nbackends: {t: {type: command, command: %q}}\n", o.cmd)
	if isolation != "" {
		head = isolation + "\n" + head
	}
	config, _, err := harness.Swarm(work, head, 1)
	if err != nil {
		return figure{}, err
	}
	logPath := filepath.Join(work, "daemon.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return figure{}, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "run", "--config", config, "--log-format", "json")
	cmd.Stderr = logf
	// If this harness dies, swarmd stops its agent and exits.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return figure{}, err
	}
	stop := onSignal(func() { _ = cmd.Process.Signal(syscall.SIGTERM) })
	defer stop()
	exited := false
	defer func() {
		if !exited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	ended := []byte(`"msg":"session ended"`)
	f, err := measure(o, cmd.Process.Pid, func() (int64, error) {
		b, err := os.ReadFile(logPath)
		return int64(bytes.Count(b, ended)), err
	})
	if err != nil {
		b, _ := os.ReadFile(logPath)
		return f, fmt.Errorf("%w; daemon log ends:\n%s", err, tail(b, 2000))
	}
	if err := terminate(cmd); err != nil {
		return f, err
	}
	exited = true
	if left := treeProcs(filepath.Join(work, ".swarm")); len(left) > 0 {
		return f, fmt.Errorf("processes of the swarm left after exit: %v", left)
	}
	return f, nil
}

// terminate stops swarmd with SIGTERM, then SIGKILL after 10s.
func terminate(cmd *exec.Cmd) error {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("swarmd exited: %w", err)
		}
		return nil
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return errors.New("swarmd did not exit within 10s of SIGTERM")
	}
}

// treeProcs lists the processes carrying a tree marker of stateDir.
func treeProcs(stateDir string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	needle := []byte("SWARMD_TREE=" + stateDir)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if env, err := os.ReadFile("/proc/" + e.Name() + "/environ"); err == nil && bytes.Contains(env, needle) {
			out = append(out, pid)
		}
	}
	return out
}

// onSignal runs f on SIGINT or SIGTERM, then exits, so that an interrupted
// run leaves no process behind.
func onSignal(f func()) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-ch:
			f()
			time.Sleep(time.Second)
			os.Exit(130)
		case <-done:
		}
	}()
	return func() { signal.Stop(ch); close(done) }
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// loop is the floor or the peer: sessions of command, one after another,
// each counted in the shared counter file once it is over.
func loop(mode, dir, command, counterPath string) error {
	n, err := mapCounter(counterPath)
	if err != nil {
		return err
	}
	switch mode {
	case "floor":
		for {
			// In the subject's own directory, as the peer's and swarmd's
			// sessions: not wherever the benchmark was started.
			cmd := exec.Command(command)
			cmd.Dir = dir
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("run %s: %w", command, err)
			}
			atomic.AddInt64(n, 1)
		}
	case "peer":
		// About the size of swarmd's prompt for a first session.
		prompt := []byte(strings.Repeat("You are an agent of a swarm; here is your context.\n", 40))
		for seq := 1; ; seq++ {
			if err := peerSession(dir, command, seq, prompt); err != nil {
				return err
			}
			atomic.AddInt64(n, 1)
		}
	}
	return fmt.Errorf("unknown mode %q", mode)
}

// peerSession is one session as a minimal supervisor runs it.
func peerSession(dir, command string, seq int, prompt []byte) error {
	name := filepath.Join(dir, strconv.Itoa(seq))
	if err := os.WriteFile(name+".prompt.md", prompt, 0o640); err != nil {
		return fmt.Errorf("write prompt: %w", err)
	}
	logf, err := os.OpenFile(name+".log", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("create log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(command)
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(prompt)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", command, err)
	}
	w := bufio.NewWriter(logf)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		_, _ = w.Write(sc.Bytes())
		_ = w.WriteByte('\n')
	}
	_, _ = io.Copy(io.Discard, out)
	waitErr := cmd.Wait()
	// The whole group goes, whatever the leader left running.
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill the session's group: %w", err)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write log: %w", err)
	}
	if waitErr != nil {
		return fmt.Errorf("session %d: %w", seq, waitErr)
	}
	return nil
}

// mapCounter maps the counter file shared with the harness, so that a
// session is counted without a system call.
func mapCounter(path string) (*int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := syscall.Mmap(int(f.Fd()), 0, 8, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map the session counter: %w", err)
	}
	return (*int64)(unsafe.Pointer(&b[0])), nil
}
