package view

import (
	"cmp"
	"strconv"
	"strings"
	"time"
)

// FeedLine is one line of the dashboards' event feed: a session of an
// agent collapsed into one line (the four or five transitions a session
// makes, and the idle wait that follows it), or a single event that
// belongs to no session (a task's transition, an operator's stop).
type FeedLine struct {
	At    time.Time `json:"at"`
	Agent string    `json:"agent,omitempty"`
	// Session is the collapsed session's id ("" for a single event).
	Session string `json:"session,omitempty"`
	Seq     uint32 `json:"seq,omitempty"`
	TaskID  int64  `json:"task_id,omitempty"`
	// Text says what the line stands for, without its time.
	Text string `json:"text"`
	// Events are what the line collapses, oldest first: a dashboard shows
	// them when the line is expanded.
	Events []Event `json:"events"`
}

// Feed collapses events (oldest first) into feed lines, oldest first.
// An agent's events that carry a session id join that session's line; its
// events without one (worktree ready, idle, awake) join the line of its
// latest session when that session is the agent's newest line, so that a
// session reads "alice #7: exit status 0 → idle". Task transitions and
// events outside any session are lines of their own.
func Feed(events []Event) []FeedLine {
	var out []FeedLine
	bySession := map[string]int{} // session id → index in out
	latest := map[string]int{}    // agent → index of its newest session line
	for _, e := range events {
		switch {
		case e.TaskID != 0 || e.Agent == "":
			out = append(out, FeedLine{At: e.At, Agent: e.Agent, TaskID: e.TaskID, Events: []Event{e}})
		case e.SessionID != "":
			i, ok := bySession[e.SessionID]
			if !ok {
				i = len(out)
				bySession[e.SessionID] = i
				out = append(out, FeedLine{At: e.At, Agent: e.Agent, Session: e.SessionID, Seq: sessionSeq(e)})
			}
			out[i].Events = append(out[i].Events, e)
			latest[e.Agent] = i
		default:
			if i, ok := latest[e.Agent]; ok && sessionOpen(out[i]) {
				out[i].Events = append(out[i].Events, e)
				continue
			}
			out = append(out, FeedLine{At: e.At, Agent: e.Agent, Events: []Event{e}})
			delete(latest, e.Agent) // a stop, a pause: the session's line is closed
		}
	}
	for i := range out {
		out[i].Text = feedText(out[i])
	}
	return out
}

// sessionOpen: a session's line still takes the agent's events without a
// session id until the agent spawns its next session or stops.
func sessionOpen(l FeedLine) bool {
	last := l.Events[len(l.Events)-1]
	return last.To != "Stopped"
}

// sessionSeq is the event's seq, or the one in its session id
// (AGENT-SEQ-RANDOM) when the reader left Seq out.
func sessionSeq(e Event) uint32 {
	if e.Seq != 0 {
		return e.Seq
	}
	id := strings.TrimPrefix(e.SessionID, e.Agent+"-")
	if i := strings.IndexByte(id, '-'); i > 0 {
		if n, err := strconv.ParseUint(id[:i], 10, 32); err == nil {
			return uint32(n)
		}
	}
	return 0
}

// feedText is a line's text: for a session, how it ended (the exit
// reason), where the agent went after it, and how long it ran.
func feedText(l FeedLine) string {
	if l.Session == "" {
		return EventLine(l.Events[0])
	}
	var (
		state, ended string
		started      time.Time
		idle         bool
		dur          time.Duration
	)
	for _, e := range l.Events {
		state = e.To
		switch e.Event {
		case "SessionStarted":
			started = e.At
		case "SessionExited":
			ended = cmp.Or(e.Reason, e.Event)
			if !started.IsZero() {
				dur = e.At.Sub(started)
			}
		case "Idle":
			idle = true
		case "Awake", "PromptReady":
			idle = false
		}
	}
	s := l.Agent + " #" + strconv.FormatUint(uint64(l.Seq), 10) + ": "
	switch {
	case ended == "":
		s += state // still running, or spawning
	case idle && state == "BuildingPrompt":
		s += ended + " → idle"
	default:
		s += ended + " → " + state
	}
	if dur > 0 {
		s += " (" + dur.Round(time.Second/10).String() + ")"
	}
	return s
}

// EventLine is one event as a line of text, without its time:
// "task #4 CLAIMED→IN_PROGRESS alice", "task #4 IN_PROGRESS→ORPHANED
// [timeout] alice", "alice Spawning→Running (SessionStarted)".
func EventLine(e Event) string {
	if e.TaskID != 0 {
		s := "task #" + strconv.FormatInt(e.TaskID, 10) + " " + Transition(e.From, e.To)
		if e.AbortReason != "" {
			s += " [" + e.AbortReason + "]"
		}
		if e.Agent != "" {
			s += " " + e.Agent
		}
		return s
	}
	s := e.Agent + " " + Transition(e.From, e.To)
	if e.Event != "" {
		s += " (" + e.Event + ")"
	}
	return s
}

// Transition is a move from one state to another, "FROM→TO", or the state
// alone when there is no move.
func Transition(from, to string) string {
	if from == "" || from == to {
		return to
	}
	return from + "→" + to
}
