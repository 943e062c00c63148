package backend

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A chatty session's log stops at MaxLogBytes and says how much it dropped,
// while the structured stream is still parsed to its result record.
func TestLogCapKeepsParsing(t *testing.T) {
	fixture, err := filepath.Abs(filepath.Join("testdata", "claude-success.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	// 2000 lines of 100 bytes of chatter, then a real Claude Code stream.
	filler := `{"type":"system","subtype":"chatter","text":"` + strings.Repeat("x", 100-48) + `"}`
	script := `i=0; while [ $i -lt 2000 ]; do echo '` + filler + `'; i=$((i+1)); done; cat '` + fixture + `'`
	// A stand-in for the claude binary: the backend's flags are ignored.
	wrapper := filepath.Join(t.TempDir(), "claude")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := NewClaude(newSupervisor(t), AgentCLIConfig{Command: wrapper})
	if err != nil {
		t.Fatal(err)
	}
	fx, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	total := int64(2000*(len(filler)+1) + len(fx))

	uncapped := run(t, c, spec(t))
	sp := spec(t)
	sp.MaxLogBytes = 4096
	r := run(t, c, sp)
	if r.Outcome != OutcomeSuccess || r.Usage != uncapped.Usage || r.Usage.InputTokens == 0 || r.Text != uncapped.Text {
		t.Fatalf("capped result %+v, uncapped %+v: the stream was not parsed past the cap", r, uncapped)
	}
	if want := total - 4096; r.LogDropped != want {
		t.Errorf("LogDropped = %d, want %d", r.LogDropped, want)
	}
	log := readLog(t, sp.LogPath)
	line := "[swarmd: dropped " + strconv.FormatInt(total-4096, 10) + " bytes of output over logs.max_session_bytes (4096)]\n"
	if strings.Count(log, "[swarmd: dropped") != 1 || !strings.Contains(log, "\n"+line) {
		t.Errorf("log does not say once, on its own line, what was dropped:\n%s", log[max(len(log)-400, 0):])
	}
	if len(log) > 4096+1024 {
		t.Errorf("log is %d bytes with a 4096-byte cap", len(log))
	}
	if !strings.Contains(log, "ended") || !strings.HasSuffix(log, "===\n") {
		t.Errorf("no footer after the drop line")
	}
}

// A session whose log hits a full disk is an error that says so; its
// output is still parsed.
func TestLogDiskFull(t *testing.T) {
	c := newCommand(t, sh("echo hello; exit 0"))
	sp := spec(t)
	sp.LogPath = "/dev/full" // every write fails with ENOSPC
	r := run(t, c, sp)
	if r.Outcome != OutcomeError || !strings.Contains(r.Reason, "disk full") || !strings.Contains(r.DiskFull, "no space left on device") {
		t.Fatalf("result %+v", r)
	}
	if r.ExitCode != 0 {
		t.Errorf("exit code %d", r.ExitCode)
	}
}

// PathPrepend goes first in the effective PATH: the backend's configured
// PATH here, which neither the daemon's PATH nor Spec.Env replaces.
func TestPathPrependOnEffectivePath(t *testing.T) {
	out := filepath.Join(t.TempDir(), "env")
	c := newCommand(t, CommandConfig{Command: "/bin/sh", Args: []string{"-c", `env > "$OUT"`},
		Env: []string{"PATH=/backend/bin:/usr/bin:/bin"}})
	sp := spec(t)
	sp.Env = []string{"OUT=" + out}
	sp.PathPrepend = "/opt/swarmd/bin"
	if r := run(t, c, sp); r.Outcome != OutcomeSuccess {
		t.Fatalf("result %+v", r)
	}
	env := "\n" + readLog(t, out)
	if strings.Count(env, "\nPATH=") != 1 || !strings.Contains(env, "\nPATH=/opt/swarmd/bin:/backend/bin:/usr/bin:/bin\n") {
		t.Errorf("env:%s", env)
	}
}

// Past the log's cap a session's output is read at overCapRate: its writes
// block, so that printing (`yes`, 64 KiB a system call for the session)
// cannot keep the daemon's CPU busy parsing. The result record still
// counts.
func TestOutputPastTheCapIsReadAtItsRate(t *testing.T) {
	bin := fakeCLI(t, `yes x | head -c 1048576
echo '{"type":"result","is_error":false,"result":"fine","usage":{"input_tokens":5,"output_tokens":7}}'
`)
	c, err := NewClaude(newSupervisor(t), AgentCLIConfig{Command: bin})
	if err != nil {
		t.Fatal(err)
	}
	sp := spec(t)
	sp.MaxLogBytes = 4096
	start := time.Now()
	r := run(t, c, sp)
	took := time.Since(start)
	if r.Outcome != OutcomeSuccess || r.Text != "fine" {
		t.Fatalf("result %+v: the record after the flood was not parsed", r)
	}
	// 1 MiB past the cap at 1 MiB a second, less what the pipe held.
	if took < 800*time.Millisecond {
		t.Errorf("a MiB past the cap was read in %v, want no faster than %d bytes a second", took, overCapRate)
	}
}
