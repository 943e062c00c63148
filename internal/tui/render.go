package tui

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/swarmd/swarmd/internal/view"
)

// Colors of seed 004's visual states.
var visualColors = map[view.Visual]string{
	view.Spawning: "#e5c07b", view.Running: "#98c379", view.Stalled: "#ff8c00", view.Merging: "#61afef",
	view.Idle: "#8a8f98", view.Paused: "#c678dd", view.Dead: "#e06c75", view.Unknown: "#5c6370",
}

// flashFor is how long a message stays in the footer.
const flashFor = 5 * time.Second

// View draws the frame.
func (m Model) View() tea.View {
	v := tea.NewView(m.Render())
	v.AltScreen = true
	v.WindowTitle = "swarmd top"
	return v
}

// Render is the frame as text: exactly the model's height in lines, none
// wider than its width.
func (m Model) Render() string {
	if m.height < 3 || m.width < 10 {
		return fit("swarmd top: the terminal is too small", m.width)
	}
	st := m.styles()
	lines := []string{m.header(st)}
	if m.snap.Fault != "" {
		lines = append(lines, st.err.Render(fit("DAEMON UNHEALTHY: "+m.snap.Fault, m.width)))
	}
	if iso := m.snap.Features.Isolation; strings.Contains(iso, "NOT in force") || strings.HasPrefix(iso, "isolation off") {
		// Said once at the top, as the start log says it: the operator
		// should know the sessions are not contained.
		lines = append(lines, st.err.Render(fit(iso, m.width)))
	}
	if m.daemonsShown() {
		lines = append(lines, m.daemonsLine(st))
	}
	body := m.height - len(lines) - 1
	switch {
	case !m.haveSnap:
		lines = append(lines, m.waiting()...)
	case m.mode == modeHelp:
		lines = append(lines, m.help(st, body)...)
	case m.mode == modeLog:
		lines = append(lines, m.logPane(st, body)...)
	case m.mode == modeTask:
		lines = append(lines, m.taskPane(st, body)...)
	default:
		lines = append(lines, m.tablePane(st, body)...)
	}
	for len(lines) < m.height-1 {
		lines = append(lines, "")
	}
	lines = append(lines[:m.height-1], m.footer(st))
	frame := strings.Join(lines, "\n")
	if m.opts.ASCII {
		frame = asciiOnly.Replace(frame)
	}
	return frame
}

// asciiOnly replaces the symbols a frame draws, cell for cell.
var asciiOnly = strings.NewReplacer("…", "~", "→", ">", "·", "-", "▏", "_", "─", "-", "│", "|", "┬", "+", "↑", "^", "↓", "v")

type styles struct {
	title, dim, err, sel, head lipgloss.Style
	visual                     map[view.Visual]lipgloss.Style
}

func (m Model) styles() styles {
	s := styles{visual: map[view.Visual]lipgloss.Style{}}
	plain := lipgloss.NewStyle()
	s.title, s.dim, s.err, s.sel, s.head = plain, plain, plain, plain, plain
	for _, v := range view.Visuals {
		s.visual[v] = plain
	}
	if !m.opts.Color {
		return s // the ">" cursor shows the selection
	}
	s.title = plain.Bold(true)
	s.dim = plain.Foreground(lipgloss.Color("#7f8591"))
	s.err = plain.Foreground(lipgloss.Color("#e06c75")).Bold(true)
	s.sel = plain.Reverse(true)
	s.head = plain.Foreground(lipgloss.Color("#7f8591")).Underline(true)
	for v, c := range visualColors {
		s.visual[v] = plain.Foreground(lipgloss.Color(c))
	}
	return s
}

func (m Model) indicator(v view.Visual) string {
	if m.opts.ASCII {
		return v.ASCII()
	}
	return v.Indicator()
}

// header: the swarm at a glance, and the connection. The visual states
// are named when the width allows, else shown by their symbols alone.
func (m Model) header(st styles) string {
	conn := "connecting"
	switch {
	case m.connErr != nil:
		conn = "reconnecting"
	case m.connected:
		conn = "live"
	}
	room := max(0, m.width-len(conn)-1)
	left := st.title.Render("swarmd top")
	if m.haveSnap {
		left = m.counts(st, true)
		if ansi.StringWidth(left) > room {
			left = m.counts(st, false)
		}
	}
	left = ansi.Truncate(left, room, "…")
	gap := max(1, m.width-ansi.StringWidth(left)-len(conn))
	return left + strings.Repeat(" ", gap) + st.dim.Render(conn)
}

func (m Model) counts(st styles, words bool) string {
	var b strings.Builder
	b.WriteString(st.title.Render("swarmd top"))
	n := map[view.Visual]int{}
	for _, a := range m.snap.Agents {
		n[a.Visual]++
	}
	fmt.Fprintf(&b, "  %d agents ", len(m.snap.Agents))
	for _, v := range view.Visuals {
		if n[v] == 0 {
			continue
		}
		s := m.indicator(v) + strconv.Itoa(n[v])
		if words {
			s += " " + string(v)
		}
		b.WriteString(" " + st.visual[v].Render(s))
	}
	return b.String()
}

func (m Model) waiting() []string {
	if m.connErr != nil {
		return []string{"", "  waiting for swarmd: " + oneLine(m.connErr.Error())}
	}
	return []string{"", "  connecting to swarmd…"}
}

// panesHeight is the height of the tasks and events panes under the table.
func (m Model) panesHeight() int {
	if m.height < 14 {
		return 0
	}
	return min(10, max(4, (m.height-4)/3))
}

// tableRows is how many agent rows fit.
func (m Model) tableRows() int {
	rows := m.height - 3 // header, table header, footer
	if m.snap.Fault != "" {
		rows--
	}
	if p := m.panesHeight(); p > 0 {
		rows -= p + 1
	}
	rows -= m.inboxHeight()
	if m.daemonsShown() {
		rows--
	}
	return max(1, rows)
}

// daemonsShown: the swarm has daemons other than this one, whose agents the
// table does not show; a line under the header names them.
func (m Model) daemonsShown() bool { return m.haveSnap && len(m.snap.Daemons) > 1 && m.height >= 8 }

// daemonsLine names the swarm's daemons, each with what its leases say:
// this one, live, stopped (none held) or EXPIRED (it died or was cut off,
// and no daemon has reaped them yet).
func (m Model) daemonsLine(st styles) string {
	var b strings.Builder
	b.WriteString(st.dim.Render(strconv.Itoa(len(m.snap.Daemons)) + " daemons:"))
	for _, d := range m.snap.Daemons {
		b.WriteString(" " + d.Name) // scrubbed with the update
		switch {
		case d.Self:
			b.WriteString(st.dim.Render(" (this)"))
		case d.Expired > 0:
			b.WriteString(" " + st.err.Render("EXPIRED"))
		case d.Live > 0:
			b.WriteString(st.dim.Render(" live"))
		default:
			b.WriteString(st.dim.Render(" stopped"))
		}
	}
	return cut(b.String(), m.width)
}

// maxInboxLines bounds the inbox panel's items; `swarmd inbox` lists all.
const maxInboxLines = 3

// inboxHeight is the inbox panel's height: its rule and its items, none
// when nothing needs a person or the terminal is too short for panes.
func (m Model) inboxHeight() int {
	if len(m.snap.Inbox) == 0 || m.panesHeight() == 0 {
		return 0
	}
	return 1 + min(len(m.snap.Inbox), maxInboxLines)
}

// inboxPane is what needs a person, each with the command that deals
// with it, the fix aligned on the right.
func (m Model) inboxPane(st styles) []string {
	n := m.inboxHeight()
	if n == 0 {
		return nil
	}
	in := m.snap.Inbox
	lines := []string{st.err.Render(cut("─ Needs you ("+strconv.Itoa(len(in))+") "+strings.Repeat("─", m.width), m.width))}
	for i, need := range in[:n-1] {
		if i == n-2 && len(in) > n-1 {
			lines = append(lines, fit("  … "+strconv.Itoa(len(in)-i)+" more: swarmd inbox", m.width))
			break
		}
		fix := "  " + need.Fix
		what := fit("! "+need.What, max(0, m.width-ansi.StringWidth(fix)))
		lines = append(lines, cut(what+st.dim.Render(fix), m.width))
	}
	return lines
}

func (m Model) tablePane(st styles, height int) []string {
	cols := m.columns()
	lines := []string{st.head.Render(fit(cols.row("", "AGENT", "STATE", "SEQ", "SESS", "OUT", "ERR", "TOKENS", "COST", "TASK"), m.width))}
	vis := m.visible()
	sel, _, _ := m.current()
	rows := m.tableRows()
	for i := m.offset; i < len(vis) && i < m.offset+rows; i++ {
		lines = append(lines, m.agentLine(st, cols, vis[i], vis[i].Name == sel.Name))
	}
	if len(vis) == 0 {
		lines = append(lines, st.dim.Render("  no agent matches the filter"))
	}
	for len(lines) < rows+1 {
		lines = append(lines, "")
	}
	lines = append(lines, m.inboxPane(st)...)
	if p := m.panesHeight(); p > 0 && height > rows+1+m.inboxHeight() {
		lines = append(lines, m.panes(st, p)...)
	}
	return lines
}

// columns sizes the table for the width: the task takes what is left.
type columns struct{ name, state, task int }

func (m Model) columns() columns {
	c := columns{name: 5, state: 15}
	for _, a := range m.snap.Agents {
		c.name = max(c.name, min(16, len(a.Name)))
	}
	// indicator, name, state, seq 4, sess 4, out 4, errors 5, tokens 6,
	// cost 8 ("unpriced"), with a space after each.
	fixed := 3 + c.name + 1 + c.state + 1 + 5 + 5 + 5 + 6 + 7 + 9
	c.task = max(0, m.width-fixed)
	return c
}

func (c columns) row(ind, name, state, seq, sess, out, errs, tokens, cost, task string) string {
	s := pad(ind, 2) + " " + pad(name, c.name) + " " + pad(state, c.state) + " " + lpad(seq, 4) + " " + lpad(sess, 4) + " " +
		lpad(out, 4) + " " + lpad(errs, 5) + " " + lpad(tokens, 6) + " " + lpad(cost, 8) + " "
	if c.task > 0 {
		s += fit(task, c.task)
	}
	return s
}

func (m Model) agentLine(st styles, cols columns, a view.Agent, selected bool) string {
	sess, out := "-", "-"
	if a.State == "Running" || a.State == "Interrupting" {
		sess, out = m.age(a.SessionStarted), m.age(a.LastOutput)
	}
	tokens, cost := "-", "-"
	if a.Spend != nil {
		tokens = fmtTokens(a.Spend.TokensIn + a.Spend.TokensOut)
		switch {
		case a.Spend.CostUSD > 0:
			cost = fmt.Sprintf("$%.2f", a.Spend.CostUSD)
		case a.Spend.TokensIn+a.Spend.TokensOut > 0:
			cost = "unpriced" // tokens, and no price for them: not free
		}
	}
	task := ""
	if a.Task != nil {
		task = "#" + strconv.FormatInt(a.Task.ID, 10) + " " + a.Task.Title
	} else if providerHeld(a.Health) {
		task = a.Health // the state column has room for "provider down" only
	}
	line := cols.row("", a.Name, stateText(a), strconv.FormatUint(uint64(a.Seq), 10), sess, out,
		strconv.FormatUint(uint64(a.ConsecutiveErrors), 10)+"/"+strconv.FormatUint(uint64(a.TotalErrors), 10),
		tokens, cost, task)
	line = fit(line[2:], m.width-2) // the cursor and the indicator, in its colour, go first
	ind := st.visual[a.Visual].Render(m.indicator(a.Visual))
	if selected {
		return ">" + ind + st.sel.Render(line)
	}
	return " " + ind + line
}

// stateText is the state, or what matters more about it.
func stateText(a view.Agent) string {
	switch {
	case a.ShownState() == "idle":
		return "idle" // waiting for mail or a task, not building a prompt
	case a.Visual == view.Paused && a.Frozen:
		return "paused, frozen"
	case a.Visual == view.Paused:
		return "paused"
	case a.Health == "spawning-timeout":
		return "spawn timeout"
	case strings.HasPrefix(a.Health, "provider down"):
		return "provider down" // since when and why: in the task column
	case strings.HasPrefix(a.Health, "rate limited"):
		return "rate limited"
	case a.Health != "":
		return a.Health
	}
	return a.State
}

// providerHeld: the agent's health is its provider's (down, rate limited).
func providerHeld(h string) bool {
	return strings.HasPrefix(h, "provider down") || strings.HasPrefix(h, "rate limited")
}

func (m Model) age(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := max(0, m.now.Sub(t))
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + "m"
	case d < 100*time.Hour:
		return strconv.Itoa(int(d.Hours())) + "h"
	}
	return strconv.Itoa(int(d.Hours()/24)) + "d"
}

func fmtTokens(n int64) string {
	switch {
	case n >= 1_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1000:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return strconv.FormatInt(n, 10)
}

// panes: the task board and merge queue on the left, the event feed on the
// right, under a rule that names them.
func (m Model) panes(st styles, height int) []string {
	leftW := max(20, m.width*2/5)
	rightW := max(0, m.width-leftW-3)
	h, v, cross := "─", "│", "┬"
	if m.opts.ASCII {
		h, v, cross = "-", "|", "+"
	}
	rule := cut(h+" Tasks "+strings.Repeat(h, leftW), leftW+1) + cross + cut(h+" Events "+strings.Repeat(h, m.width), rightW+1)
	out := []string{st.dim.Render(rule)}
	left := m.taskLines(height - 1)
	right := m.eventLines(height - 1)
	for i := 0; i < height-1; i++ {
		out = append(out, fit(left[i], leftW)+" "+st.dim.Render(v)+" "+fit(right[i], rightW))
	}
	return out
}

// taskLines: the counts of the states that hold tasks, the tasks in play,
// and the merge queue on the last line.
func (m Model) taskLines(n int) []string {
	out := make([]string, 0, n)
	b := m.snap.Tasks
	var counts []string
	total := 0
	for _, s := range b.States {
		if c := b.Counts[s]; c > 0 {
			counts = append(counts, s+" "+strconv.Itoa(c))
			total += c
		}
	}
	if total == 0 {
		out = append(out, "no tasks")
	} else {
		out = append(out, strings.Join(counts, " · "))
	}
	for _, t := range b.Tasks {
		if len(out) >= n-1 {
			break
		}
		if t.State == "CLOSED" || t.State == "CANCELLED" {
			continue
		}
		line := "#" + strconv.FormatInt(t.ID, 10) + " " + t.State + " " + t.Title
		if who := firstOf(t.Claimant, t.Assignee); who != "" {
			line += " (" + who + ")"
		}
		out = append(out, line)
	}
	merge := []string{"merge queue: " + mergeText(m.snap.Merge)}
	if r := recentText(m.snap.Merge); r != "" && n >= 4 {
		merge = append(merge, r)
	}
	for len(out) < n-len(merge) {
		out = append(out, "")
	}
	return append(out[:n-len(merge)], merge...)
}

// mergeText is the queue at a glance: its depth, the candidate under test
// and whether its gate runs, why it waits.
func mergeText(q view.MergeQueue) string {
	if !q.Configured {
		return firstOf(q.Note, "not configured")
	}
	s := "depth " + strconv.Itoa(q.Depth)
	if q.Paused {
		s += ", paused"
	}
	if len(q.Items) > 0 && q.Items[0].State == "testing" {
		it := q.Items[0]
		s += " · #" + strconv.FormatInt(it.TaskID, 10) + " testing (" + it.Agent + ")"
		if q.GateRunning {
			s += ", gate running (run " + strconv.FormatUint(uint64(q.GateSeq), 10) + ")"
		}
	}
	if q.AheadSeq != 0 {
		s += " · a run ahead (run " + strconv.FormatUint(uint64(q.AheadSeq), 10) + ")"
	}
	if q.Note != "" {
		s += " · " + q.Note
	}
	return s
}

// recentText is the queue's last results, newest first.
func recentText(q view.MergeQueue) string {
	if !q.Configured || len(q.Recent) == 0 {
		return ""
	}
	var parts []string
	for _, r := range q.Recent[:min(len(q.Recent), 5)] {
		p := "#" + strconv.FormatInt(r.TaskID, 10) + " " + r.Result
		if r.Commit != "" {
			p += " " + shortHash(r.Commit)
		}
		parts = append(parts, p)
	}
	return "  last: " + strings.Join(parts, " · ")
}

func shortHash(h string) string { return h[:min(len(h), 7)] }

// eventLines are the newest feed lines, oldest first, filling n lines: a
// line per session (view.Feed), or every event when expanded.
func (m Model) eventLines(n int) []string {
	var lines []string
	if m.expanded {
		for _, e := range m.events[max(0, len(m.events)-n):] {
			lines = append(lines, eventText(e))
		}
	} else {
		feed := view.Feed(m.events)
		for _, l := range feed[max(0, len(feed)-n):] {
			lines = append(lines, l.At.Local().Format("15:04:05")+" "+l.Text)
		}
	}
	out := make([]string, n)
	copy(out[n-len(lines):], lines)
	return out
}

func eventText(e view.Event) string {
	return e.At.Local().Format("15:04:05") + " " + view.EventLine(e)
}

func (m Model) logRows() int { return max(1, m.height-3) }

func (m Model) logPane(st styles, height int) []string {
	h := "─"
	if m.opts.ASCII {
		h = "-"
	}
	title := h + " log: " + m.logAgent
	if m.logSession > 0 {
		title += " · session " + strconv.FormatUint(uint64(m.logSession), 10)
	}
	if m.logScroll > 0 {
		title += " · " + strconv.Itoa(m.logScroll) + " lines up"
	}
	out := []string{st.dim.Render(cut(title+" "+strings.Repeat(h, m.width), m.width))}
	lines := m.logLines
	if m.logPartial != "" {
		lines = append(lines[:len(lines):len(lines)], m.logPartial)
	}
	rows := height - 1
	end := max(0, len(lines)-m.logScroll)
	start := max(0, end-rows)
	for _, l := range lines[start:end] {
		out = append(out, fit(ansi.Strip(expandTabs(l)), m.width))
	}
	if len(lines) == 0 {
		msg := "waiting for output…"
		if m.logErr != nil {
			msg = "log: " + oneLine(m.logErr.Error())
		}
		out = append(out, st.dim.Render(msg))
	}
	return out
}

func (m Model) help(st styles, height int) []string {
	keys := [][2]string{
		{"↑/↓ j/k", "select an agent (pgup/pgdown, g/G: page, first, last)"},
		{"enter", "follow the selected agent's live log (esc: back)"},
		{"t", "view a task: its timeline, verdicts, diff, merge, spend (esc: back)"},
		{"s / S", "stop / start the selected agent"},
		{"p / r", "pause / resume it" + map[bool]string{true: "", false: " (not available in this swarmd)"}[m.snap.Features.Pause]},
		{"m", "send mail to it (ctrl+u: urgent; enter: send)"},
		{"/", "filter agents by name, state or task (esc: clear)"},
		{"e", "events: a line per session, or every event"},
		{"?", "this help"},
		{"q", "quit"},
	}
	out := []string{st.title.Render("keys"), ""}
	for _, k := range keys {
		out = append(out, fit("  "+pad(k[0], 9)+" "+k[1], m.width))
	}
	legend := "  "
	for _, v := range view.Visuals {
		legend += st.visual[v].Render(m.indicator(v)+" "+string(v)) + "  "
	}
	out = append(out, "", ansi.Truncate(legend, m.width, "…"))
	return out[:min(len(out), height)]
}

func (m Model) footer(st styles) string {
	switch m.mode {
	case modeFilter:
		return fit("filter: "+m.input+"▏ (enter: keep · esc: clear)", m.width)
	case modeAskTask:
		return fit("task #"+m.input+"▏ (enter: view · esc: cancel)", m.width)
	case modeMail:
		u := ""
		if m.urgent {
			u = " [urgent]"
		}
		return fit("mail to "+m.selected+u+": "+m.input+"▏ (enter: send · ctrl+u: urgent · esc: cancel)", m.width)
	}
	if m.flash != "" && m.now.Sub(m.flashAt) < flashFor {
		return fit(m.flash, m.width)
	}
	if m.mode == modeLog {
		return st.dim.Render(fit("↑/↓ scroll  G end  esc back  q quit", m.width))
	}
	if m.mode == modeTask {
		return st.dim.Render(fit("↑/↓ scroll  t another task  esc back  q quit", m.width))
	}
	hint := "enter log  t task  s stop  S start  p pause  r resume  m mail  e events  / filter  ? help"
	if m.filter != "" {
		hint = "filter: " + m.filter + " (esc clears)  " + hint
	}
	return st.dim.Render(fit(hint, m.width))
}

// fit cuts s to w cells (with "…") or pads it with spaces to w.
func fit(s string, w int) string {
	if w <= 0 {
		return ""
	}
	if ansi.StringWidth(s) > w {
		return ansi.Truncate(s, w, "…")
	}
	return s + strings.Repeat(" ", w-ansi.StringWidth(s))
}

func pad(s string, w int) string { return fit(s, w) }

// cut cuts s to w cells, without an ellipsis (a rule).
func cut(s string, w int) string { return ansi.Truncate(s, max(0, w), "") }

func lpad(s string, w int) string {
	if n := ansi.StringWidth(s); n < w {
		return strings.Repeat(" ", w-n) + s
	}
	return ansi.Truncate(s, w, "")
}

func expandTabs(s string) string { return strings.ReplaceAll(s, "\t", "    ") }

func firstOf(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
