package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/store"
)

// hostile is what a session can make swarmd print: an OSC 52 clipboard
// write, a title, a line erased and the cursor moved up over the last
// line, a carriage return, a C1 CSI, a bidirectional override.
const hostile = "boom \x1b]52;c;cm0gLXJmIH4K\x07\x1b]0;PWN\x07 \x1b[2K\x1b[1A\rhidden \u009b31m \u202eevil"

// noControls fails if s holds anything a terminal acts on.
func noControls(t *testing.T, what, s string) {
	t.Helper()
	if i := strings.IndexFunc(s, func(r rune) bool {
		return r != '\n' && r != '\t' && (r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 || r == 0x202e)
	}); i >= 0 {
		t.Errorf("%s passes control %q on to the terminal: %q", what, s[i:i+1], s)
	}
}

// What an agent's session wrote reaches the operator's terminal through
// swarmd status's WHY, swarmd events' reasons and swarmd logs: none of
// its control characters does.
func TestAgentTextReachesTheTerminalWithoutControls(t *testing.T) {
	var b strings.Builder
	if err := writeStatus(&b, []StatusRow{{AgentStatus: control.AgentStatus{Name: "mallory", State: "Stopped",
		Reason: "exit status 1: " + hostile, Branch: "swarm/mallory/work"}}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	noControls(t, "swarmd status", b.String())
	noControls(t, "swarmd events", eventLine(store.EventRecord{At: time.Now(), Agent: "mallory", From: "Running",
		Event: "SessionExited", To: "CoolingDown", Actor: "runner", Reason: "exit status 1: " + hostile}))

	var out bytes.Buffer
	w := &terminalSafe{w: &out}
	// Written a byte at a time: a C1 control split across two writes.
	for _, c := range []byte(hostile + "\nnext line, ünïcode kept\n") {
		if _, err := w.Write([]byte{c}); err != nil {
			t.Fatal(err)
		}
	}
	noControls(t, "swarmd logs", out.String())
	if !strings.Contains(out.String(), "next line, ünïcode kept\n") {
		t.Errorf("swarmd logs lost the text around the controls: %q", out.String())
	}
}
