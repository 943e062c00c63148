package tui

import (
	"strconv"
	"strings"

	tea "charm.land/bubbletea/v2"

	"github.com/swarmd/swarmd/internal/view"
)

// key handles one key press in the current mode.
func (m Model) key(k tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	if k.String() == "ctrl+c" {
		return m, tea.Quit
	}
	switch m.mode {
	case modeHelp:
		m.mode = m.prev // any key closes the help
		if k.String() == "q" {
			return m, tea.Quit
		}
		return m, nil
	case modeFilter:
		return m.typeFilter(k)
	case modeMail:
		return m.typeMail(k)
	case modeLog:
		return m.logKey(k)
	case modeAskTask:
		return m.typeTask(k)
	case modeTask:
		return m.taskKey(k)
	}
	return m.tableKey(k)
}

func (m Model) tableKey(k tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	a, i, ok := m.current()
	switch k.String() {
	case "q":
		return m, tea.Quit
	case "?":
		m.prev, m.mode = modeTable, modeHelp
	case "/":
		m.mode, m.input = modeFilter, m.filter
	case "esc":
		m.filter = ""
	case "e":
		m.expanded = !m.expanded
	case "up", "k":
		m.move(i - 1)
	case "down", "j":
		m.move(i + 1)
	case "pgup":
		m.move(i - m.tableRows())
	case "pgdown":
		m.move(i + m.tableRows())
	case "home", "g":
		m.move(0)
	case "end", "G":
		m.move(len(m.visible()) - 1)
	case "enter":
		if !ok {
			return m, nil
		}
		m.mode, m.logAgent, m.logSession, m.logLines, m.logPartial, m.logScroll, m.logErr = modeLog, a.Name, 0, nil, "", 0, nil
		return m, m.opts.Backend.FollowLog(a.Name)
	case "s", "S", "p", "r":
		if !ok {
			return m, nil
		}
		return m, m.act(a, k.String())
	case "m":
		if ok {
			m.mode, m.input, m.urgent, m.selected = modeMail, "", false, a.Name
		}
	case "t":
		// The task the selected agent holds is offered; any id may be typed.
		m.mode, m.input = modeAskTask, ""
		if ok && a.Task != nil {
			m.input = strconv.FormatInt(a.Task.ID, 10)
		}
	}
	return m, nil
}

// typeTask reads the id of the task to view.
func (m Model) typeTask(k tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	switch k.String() {
	case "esc":
		m.mode, m.input = modeTable, ""
		if m.taskID != 0 {
			m.mode = modeTask // back to the task shown
		}
	case "enter":
		id, err := strconv.ParseInt(strings.TrimPrefix(m.input, "#"), 10, 64)
		if err != nil || id <= 0 {
			m.mode = modeTable
			m.say("no task view: " + strconv.Quote(m.input) + " is not a task id")
			return m, nil
		}
		m.input = ""
		return m, m.openTask(id)
	case "backspace":
		m.input = dropLast(m.input)
	default:
		if k.Text != "" {
			m.input += k.Text
		}
	}
	return m, nil
}

// openTask shows task id's view and reads it.
func (m *Model) openTask(id int64) tea.Cmd {
	m.mode, m.taskID, m.task, m.taskErr, m.taskScroll, m.taskLoading, m.taskStale = modeTask, id, nil, nil, 0, false, false
	return m.loadTask()
}

func (m Model) taskKey(k tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	page := max(1, m.height-4)
	switch k.String() {
	case "q":
		return m, tea.Quit
	case "esc", "backspace", "left", "h":
		m.mode, m.taskID, m.task, m.taskErr, m.taskLoading, m.taskStale = modeTable, 0, nil, nil, false, false
		return m, nil
	case "t":
		m.mode, m.input = modeAskTask, ""
	case "up", "k":
		m.taskScroll--
	case "down", "j":
		m.taskScroll++
	case "pgup":
		m.taskScroll -= page
	case "pgdown", "space":
		m.taskScroll += page
	case "home", "g":
		m.taskScroll = 0
	case "?":
		m.prev, m.mode = modeTask, modeHelp
	}
	m.taskScroll = max(0, m.taskScroll)
	return m, nil
}

// act runs the action a key names on a, when it applies.
func (m *Model) act(a view.Agent, key string) tea.Cmd {
	verb := map[string]string{"s": "stop", "S": "start", "p": "pause", "r": "resume"}[key]
	if (verb == "pause" || verb == "resume") && !m.snap.Features.Pause {
		m.say("pause and resume are not available in this swarmd")
		return nil
	}
	m.say(verb + " " + a.Name + "…")
	return m.opts.Backend.Act(a.Name, verb)
}

// move selects the visible agent at index i (clamped) and scrolls to it.
func (m *Model) move(i int) {
	vis := m.visible()
	if len(vis) == 0 {
		return
	}
	i = max(0, min(i, len(vis)-1))
	m.selected = vis[i].Name
	m.keepSelectionVisible()
}

// keepSelectionVisible scrolls the table so that the selection shows.
func (m *Model) keepSelectionVisible() {
	_, i, ok := m.current()
	if !ok {
		m.offset = 0
		return
	}
	rows := m.tableRows()
	switch {
	case i < m.offset:
		m.offset = i
	case i >= m.offset+rows:
		m.offset = i - rows + 1
	}
	m.offset = max(0, min(m.offset, len(m.visible())-rows))
}

func (m Model) typeFilter(k tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	switch k.String() {
	case "esc":
		m.mode, m.filter, m.input = modeTable, "", ""
	case "enter":
		m.mode = modeTable
	case "backspace":
		m.input = dropLast(m.input)
		m.filter = m.input
	default:
		if k.Text != "" {
			m.input += k.Text
			m.filter = m.input
		}
	}
	m.offset = 0
	m.keepSelectionVisible()
	return m, nil
}

func (m Model) typeMail(k tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	switch k.String() {
	case "esc":
		m.mode, m.input = modeTable, ""
		m.say("mail not sent")
	case "enter":
		m.mode = modeTable
		if m.input == "" {
			m.say("mail not sent: it was empty")
			return m, nil
		}
		body, urgent := m.input, m.urgent
		m.input = ""
		return m, m.opts.Backend.Mail(m.selected, body, urgent)
	case "ctrl+u":
		m.urgent = !m.urgent
	case "backspace":
		m.input = dropLast(m.input)
	default:
		if k.Text != "" {
			m.input += k.Text
		}
	}
	return m, nil
}

func (m Model) logKey(k tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	page := max(1, m.logRows()-1)
	switch k.String() {
	case "q":
		m.opts.Backend.StopLog()
		return m, tea.Quit
	case "esc", "enter":
		m.opts.Backend.StopLog()
		m.mode, m.logAgent = modeTable, ""
	case "up", "k":
		m.logScroll++
	case "down", "j":
		m.logScroll--
	case "pgup":
		m.logScroll += page
	case "pgdown":
		m.logScroll -= page
	case "end", "G":
		m.logScroll = 0
	case "home", "g":
		m.logScroll = len(m.logLines)
	case "?":
		m.prev, m.mode = modeLog, modeHelp
	}
	m.logScroll = max(0, min(m.logScroll, len(m.logLines)-m.logRows()))
	return m, nil
}

func dropLast(s string) string {
	r := []rune(s)
	if len(r) == 0 {
		return s
	}
	return string(r[:len(r)-1])
}
