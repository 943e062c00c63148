// Package tui is `swarmd top`: a Bubble Tea model of the swarm, fed the
// read model's updates (package view) and drawn with Lip Gloss. The model
// does no I/O: what it asks for (an action, mail, a log to follow) goes
// through Backend, and what comes back arrives as messages, so that tests
// drive it frame by frame.
package tui

import (
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/swarmd/swarmd/internal/view"
)

// Backend carries out what the model asks for. Each method returns a
// command whose message reports the result (ActionDoneMsg), or nil.
type Backend interface {
	Act(agent, verb string) tea.Cmd
	Mail(to, body string, urgent bool) tea.Cmd
	// FollowLog starts following agent's log (LogMsg messages) and stops
	// following any other; StopLog stops.
	FollowLog(agent string) tea.Cmd
	StopLog()
	// Task reads task id's view (a TaskMsg).
	Task(id int64) tea.Cmd
}

// Messages the model takes besides Bubble Tea's own.
type (
	// UpdateMsg is one update of the read model's stream.
	UpdateMsg struct{ view.Update }
	// ConnMsg says the stream is up (Err nil) or down and why.
	ConnMsg struct{ Err error }
	// LogMsg is a piece of the followed agent's log.
	LogMsg struct {
		Agent string
		view.LogChunk
	}
	// LogEndMsg: the followed log ended (the daemon went away, an error).
	LogEndMsg struct {
		Agent string
		Err   error
	}
	// ActionDoneMsg reports an action's result.
	ActionDoneMsg struct {
		What string // "stop alice", "mail to bob"
		Err  error
	}
	// TickMsg moves the clock that ages are computed from.
	TickMsg time.Time
	// TaskMsg is a task's view, read for the task view (or why not).
	TaskMsg struct {
		ID   int64
		View view.TaskView
		Err  error
	}
)

// mode is what the keys do now.
type mode int

const (
	modeTable mode = iota
	modeLog
	modeHelp
	modeFilter  // typing a filter
	modeMail    // typing mail to the selected agent
	modeAskTask // typing the id of the task to view
	modeTask    // one task's view
)

// maxEvents and maxLogLines bound what the model keeps.
const (
	maxEvents   = 500
	maxLogLines = 5000
)

// Options configure New.
type Options struct {
	Backend Backend
	// ASCII draws indicators as letters and no box characters, for a
	// terminal that cannot show them.
	ASCII bool
	// Color styles the frame; without it the frame is plain text.
	Color bool
	// Tick is how often ages move; 0: no ticking (tests send TickMsg).
	Tick time.Duration
}

// Model is the dashboard's state.
type Model struct {
	opts   Options
	width  int
	height int
	now    time.Time

	snap      view.Snapshot
	haveSnap  bool
	connErr   error
	connected bool
	events    []view.Event // oldest first
	lastEvent int64
	expanded  bool // the event pane shows every event, not a line per session

	mode     mode
	prev     mode   // where the help returns to
	selected string // the selected agent's name
	offset   int    // first agent row shown
	filter   string
	input    string // what is being typed (filter or mail)
	urgent   bool   // the mail being typed is urgent

	logAgent   string
	logSession uint32
	logLines   []string
	logPartial string // the last line, not ended yet
	logScroll  int    // lines scrolled up from the end
	logErr     error

	// The task view: the task shown, its view as last read (nil until
	// the first read), a read in flight, and another wanted after it (an
	// event of the task arrived meanwhile).
	taskID      int64
	task        *view.TaskView
	taskErr     error
	taskLoading bool
	taskStale   bool
	taskScroll  int

	flash   string
	flashAt time.Time
}

// New returns a model; it draws "connecting" until the first snapshot.
func New(opts Options) Model {
	return Model{opts: opts, width: 80, height: 24}
}

// Init starts the clock.
func (m Model) Init() tea.Cmd { return m.tick() }

func (m Model) tick() tea.Cmd {
	if m.opts.Tick <= 0 {
		return nil
	}
	return tea.Tick(m.opts.Tick, func(t time.Time) tea.Msg { return TickMsg(t) })
}

// Update applies one message.
func (m Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.keepSelectionVisible()
	case TickMsg:
		m.now = time.Time(msg)
		return m, m.tick()
	case UpdateMsg:
		m.apply(msg.Update)
		if m.taskID != 0 && (m.mode == modeTask || m.prev == modeTask && m.mode == modeHelp) && touchesTask(msg.Update, m.taskID) {
			return m, m.loadTask() // the view is live: read it again
		}
	case TaskMsg:
		if msg.ID != m.taskID {
			return m, nil // a view left meanwhile
		}
		m.taskLoading = false
		if msg.Err != nil {
			m.taskErr = msg.Err
		} else {
			v := msg.View
			m.task, m.taskErr = &v, nil
		}
		if m.taskStale {
			return m, m.loadTask()
		}
	case ConnMsg:
		m.connected, m.connErr = msg.Err == nil, msg.Err
	case LogMsg:
		if msg.Agent == m.logAgent {
			m.appendLog(msg.LogChunk)
		}
	case LogEndMsg:
		if msg.Agent == m.logAgent {
			m.logErr = msg.Err
		}
	case ActionDoneMsg:
		if msg.Err != nil {
			m.say(msg.What + ": " + oneLine(msg.Err.Error()))
		} else {
			m.say(msg.What + ": sent")
		}
	case tea.KeyPressMsg:
		return m.key(msg)
	}
	return m, nil
}

// apply folds one update of the stream into the model.
func (m *Model) apply(u view.Update) {
	scrub(reflect.ValueOf(&u).Elem())
	switch u.Kind {
	case view.KindSnapshot:
		m.snap, m.haveSnap, m.connected, m.connErr = *u.Snapshot, true, true, nil
		if m.now.IsZero() {
			m.now = u.Snapshot.At
		}
		sortAgents(m.snap.Agents)
	case view.KindEvent:
		if u.Event.ID <= m.lastEvent {
			return // a resumed stream may repeat the newest
		}
		m.lastEvent = u.Event.ID
		m.events = append(m.events, *u.Event)
		if len(m.events) > maxEvents {
			m.events = append(m.events[:0], m.events[len(m.events)-maxEvents:]...)
		}
	case view.KindAgent:
		for i := range m.snap.Agents {
			if m.snap.Agents[i].Name == u.Agent.Name {
				m.snap.Agents[i] = *u.Agent
				return
			}
		}
		m.snap.Agents = append(m.snap.Agents, *u.Agent)
		sortAgents(m.snap.Agents)
	case view.KindRemoved:
		for i := range m.snap.Agents {
			if m.snap.Agents[i].Name == u.Name {
				m.snap.Agents = append(m.snap.Agents[:i], m.snap.Agents[i+1:]...)
				break
			}
		}
	case view.KindTasks:
		m.snap.Tasks = *u.Tasks
	case view.KindMerge:
		m.snap.Merge = *u.Merge
	case view.KindFault:
		m.snap.Fault = *u.Fault
	case view.KindInbox:
		m.snap.Inbox = *u.Inbox
	case view.KindDaemons:
		m.snap.Daemons = *u.Daemons
	}
}

// touchesTask: u may change task id's view (an event of the task, the
// merge queue moving).
func touchesTask(u view.Update, id int64) bool {
	switch u.Kind {
	case view.KindEvent:
		return u.Event.TaskID == id
	case view.KindMerge, view.KindSnapshot:
		return true
	}
	return false
}

// loadTask reads the task view's task, or marks the one in flight stale.
func (m *Model) loadTask() tea.Cmd {
	if m.taskLoading {
		m.taskStale = true
		return nil
	}
	m.taskLoading, m.taskStale = true, false
	return m.opts.Backend.Task(m.taskID)
}

func sortAgents(as []view.Agent) {
	sort.Slice(as, func(i, j int) bool { return as[i].Name < as[j].Name })
}

func (m *Model) appendLog(c view.LogChunk) {
	if c.Text == "" {
		m.flushPartial()
		m.logSession = c.Session
		m.logLines = append(m.logLines, "── session "+strconv.FormatUint(uint64(c.Session), 10)+" ──")
	}
	text := m.logPartial + strings.ReplaceAll(c.Text, "\r", "")
	lines := strings.Split(text, "\n")
	m.logPartial = lines[len(lines)-1]
	m.logLines = append(m.logLines, lines[:len(lines)-1]...)
	if over := len(m.logLines) - maxLogLines; over > 0 {
		m.logLines = append(m.logLines[:0], m.logLines[over:]...)
	}
}

func (m *Model) flushPartial() {
	if m.logPartial != "" {
		m.logLines = append(m.logLines, m.logPartial)
		m.logPartial = ""
	}
}

// visible is the agents the filter lets through, in order.
func (m *Model) visible() []view.Agent {
	if m.filter == "" {
		return m.snap.Agents
	}
	f := strings.ToLower(m.filter)
	var out []view.Agent
	for _, a := range m.snap.Agents {
		hay := strings.ToLower(a.Name + " " + a.State + " " + string(a.Visual) + " " + a.Health)
		if a.Task != nil {
			hay += " " + strings.ToLower(a.Task.Title)
		}
		if strings.Contains(hay, f) {
			out = append(out, a)
		}
	}
	return out
}

// current is the selected agent among the visible ones (the first when the
// selection is filtered out), and its index.
func (m *Model) current() (view.Agent, int, bool) {
	vis := m.visible()
	for i, a := range vis {
		if a.Name == m.selected {
			return a, i, true
		}
	}
	if len(vis) > 0 {
		return vis[0], 0, true
	}
	return view.Agent{}, 0, false
}

func (m *Model) say(s string) {
	m.flash, m.flashAt = s, m.now
}

func oneLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// scrub removes from every string in v what a terminal acts on rather than
// shows (view.TerminalControl): task titles, reasons and mail subjects are
// agents' text, and the renderer keeps a hyperlink (OSC 8) whose text
// need not say where it points.
func scrub(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		if v.CanSet() && strings.IndexFunc(v.String(), view.TerminalControl) >= 0 {
			v.SetString(strings.Map(func(r rune) rune {
				if view.TerminalControl(r) {
					return -1
				}
				return r
			}, v.String()))
		}
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			scrub(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				scrub(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			scrub(v.Index(i))
		}
	}
}
