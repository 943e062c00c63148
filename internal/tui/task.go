package tui

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/charmbracelet/x/ansi"

	"github.com/swarmd/swarmd/internal/view"
)

// taskPane is one task's view under a rule naming it: what it is, its
// frozen head and merge, its spend, its timeline, its verdicts, the diff
// stat of its head and the tail of its last gate log, scrolled by
// taskScroll.
func (m Model) taskPane(st styles, height int) []string {
	h := "─"
	if m.opts.ASCII {
		h = "-"
	}
	title := h + " task #" + strconv.FormatInt(m.taskID, 10)
	if m.task != nil {
		title += ": " + m.task.Task.Title
	}
	out := []string{st.dim.Render(cut(title+" "+strings.Repeat(h, m.width), m.width))}
	var body []string
	switch {
	case m.task != nil:
		body = taskLines(*m.task)
		if m.taskErr != nil {
			body = append([]string{"(not refreshed: " + oneLine(m.taskErr.Error()) + ")"}, body...)
		}
	case m.taskErr != nil:
		body = []string{"task #" + strconv.FormatInt(m.taskID, 10) + ": " + oneLine(m.taskErr.Error())}
	default:
		body = []string{"reading…"}
	}
	rows := height - 1
	start := min(m.taskScroll, max(0, len(body)-rows))
	for _, l := range body[start:min(len(body), start+rows)] {
		out = append(out, fit(ansi.Strip(expandTabs(l)), m.width))
	}
	return out
}

// taskLines is a task's view as lines of text.
func taskLines(tv view.TaskView) []string {
	t := tv.Task
	var out []string
	head := "state " + t.State
	if who := firstOf(t.Claimant, t.Assignee); who != "" {
		head += " · " + who
	}
	if t.Reviewer != "" {
		head += " · reviewer " + t.Reviewer
		if t.ReviewState != "" {
			head += " (" + t.ReviewState + ")"
		}
	}
	if t.Retries > 0 {
		head += " · retries " + strconv.Itoa(t.Retries)
	}
	out = append(out, head)
	if tv.Head != "" {
		out = append(out, "head "+shortHash(tv.Head)+" (frozen at DONE)")
	} else if tv.WorkHead != "" {
		out = append(out, "work head "+shortHash(tv.WorkHead)+" (not DONE yet)")
	}
	out = append(out, "merge: "+taskMergeText(tv.Merge))
	sp := tv.Spend
	out = append(out, fmt.Sprintf("spend: %d sessions, %s tokens in, %s out, $%.2f", sp.Sessions, fmtTokens(sp.TokensIn),
		fmtTokens(sp.TokensOut), sp.CostUSD))
	if r := strings.TrimSpace(tv.Result); r != "" {
		out = append(out, "result: "+oneLine(r))
	}
	out = append(out, "", "timeline:")
	for _, e := range tv.Timeline {
		line := "  " + e.At.Local().Format("15:04:05") + " " + view.Transition(e.From, e.To) + " "
		if e.AbortReason != "" {
			line += "[" + e.AbortReason + "] "
		}
		line += e.Actor
		if e.Reason != "" {
			line += ": " + oneLine(e.Reason)
		}
		out = append(out, line)
	}
	if len(tv.Verdicts) > 0 {
		out = append(out, "", "verdicts:")
		for _, v := range tv.Verdicts {
			line := "  round " + strconv.Itoa(v.Round) + " " + v.Reviewer + " " + v.Verdict
			if txt := strings.TrimSpace(v.Text); txt != "" {
				line += ": " + oneLine(txt)
			}
			out = append(out, line)
		}
	}
	if tv.DiffStat != "" || tv.DiffError != "" {
		out = append(out, "", "diff stat of "+shortHash(tv.Head)+" against "+shortHash(tv.Base)+":")
		if tv.DiffError != "" {
			out = append(out, "  "+oneLine(tv.DiffError))
		}
		for _, l := range strings.Split(tv.DiffStat, "\n") {
			if l != "" {
				out = append(out, "  "+strings.TrimSpace(l))
			}
		}
	}
	if mg := tv.Merge; mg != nil && mg.GateLog != "" {
		out = append(out, "", "gate log, run "+strconv.FormatUint(uint64(mg.GateSeq), 10)+" (tail):")
		for _, l := range strings.Split(strings.ReplaceAll(mg.GateLog, "\r", ""), "\n") {
			out = append(out, "  "+l)
		}
	}
	return out
}

// taskMergeText is a task's merge queue entry in a line.
func taskMergeText(mg *view.TaskMerge) string {
	if mg == nil {
		return "not queued"
	}
	s := mg.State
	switch {
	case mg.Commit != "":
		s = "merged as " + shortHash(mg.Commit)
	case mg.Result != "":
		s += " (" + mg.Result + ")"
	}
	s += " · head " + shortHash(mg.Head)
	if mg.Attempts > 0 {
		s += " · " + strconv.Itoa(mg.Attempts) + " gate run"
		if mg.Attempts > 1 {
			s += "s"
		}
	}
	return s
}
