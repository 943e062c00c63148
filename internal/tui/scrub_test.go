package tui

import (
	"strings"
	"testing"

	"github.com/swarmd/swarmd/internal/view"
)

// What agents wrote reaches swarmd top without what a terminal acts on:
// the renderer keeps an OSC 8 hyperlink, whose text need not say where it
// points, and a title or the inbox carries one as easily as a log line.
func TestTopShowsAgentsTextWithoutControls(t *testing.T) {
	link := "Approve \x1b]8;;https://evil.example/x\x1b\\docs update\x1b]8;;\x1b\\ \u202egnp.exe"
	m := New(Options{})
	m.apply(view.Update{Kind: view.KindTasks, Tasks: &view.TaskBoard{Tasks: []view.Task{{ID: 3, Title: link, State: "PLANNED"}}}})
	m.apply(view.Update{Kind: view.KindInbox, Inbox: &[]view.Need{{Kind: "plan", Task: 3, What: link, Fix: "swarmd task approve 3"}}})
	for _, s := range []string{m.snap.Tasks.Tasks[0].Title, (m.snap.Inbox)[0].What} {
		if strings.IndexFunc(s, view.TerminalControl) >= 0 {
			t.Errorf("kept for the terminal: %q", s)
		}
		if !strings.Contains(s, "docs update") {
			t.Errorf("lost the text: %q", s)
		}
	}
}
