// Package view is the one read model behind `swarmd top` and the web
// dashboard: a snapshot of the swarm (agents with seed 004's visual
// classification, the task board by state, the merge queue) and a live
// stream of what changes (lifecycle events, agent rows, the board).
//
// The Hub builds it from a Source (the daemon) and fans it out to any
// number of subscribers. It reads swarm.db only when told that something
// was committed (Notify), and computes agent rows from memory; while
// anyone watches it also looks once a second, for what changes without an
// event (a session going quiet, a spawn timing out).
package view

import (
	"errors"
	"time"

	"github.com/swarmd/swarmd/internal/control"
)

// Agent is one agent as the dashboards show it.
type Agent struct {
	Name      string `json:"name"`
	State     string `json:"state"` // the state machine's state, e.g. Running
	Visual    Visual `json:"visual"`
	Indicator string `json:"indicator"`
	// Health is what `swarmd status` says beyond the state: stalled,
	// spawning-timeout, idle, hot loop, disk full; "" when nothing.
	Health            string    `json:"health,omitempty"`
	Seq               uint32    `json:"seq"`
	SessionID         string    `json:"session_id,omitempty"`
	SessionStarted    time.Time `json:"session_started,omitzero"`
	LastOutput        time.Time `json:"last_output,omitzero"`
	Since             time.Time `json:"since"`
	ConsecutiveErrors uint32    `json:"consecutive_errors"`
	TotalErrors       uint32    `json:"total_errors"`
	Branch            string    `json:"branch,omitempty"`
	Reason            string    `json:"reason,omitempty"`
	Paused            bool      `json:"paused"`
	PausedBy          string    `json:"paused_by,omitempty"`
	PauseReason       string    `json:"pause_reason,omitempty"`
	Frozen            bool      `json:"frozen,omitempty"` // paused with --now: its session's processes are stopped
	Spend             *Spend    `json:"spend,omitempty"`  // nil: no session recorded
	Task              *TaskRef  `json:"task,omitempty"`   // the task it holds
}

// AgentState is what a Source knows of one agent; the Hub adds the visual
// state, the spend and the task.
type AgentState struct {
	Condition
	Name              string
	Health            string
	Seq               uint32
	SessionID         string
	ConsecutiveErrors uint32
	TotalErrors       uint32
	Branch            string
	Reason            string
	PausedBy          string
	PauseReason       string
	Frozen            bool
}

// Spend is an agent's use summed over its recorded sessions.
type Spend struct {
	Sessions  int     `json:"sessions"`
	TokensIn  int64   `json:"tokens_in"`
	TokensOut int64   `json:"tokens_out"`
	CostUSD   float64 `json:"cost_usd"`
}

// TaskRef names a task an agent holds.
type TaskRef struct {
	ID    int64  `json:"id"`
	Title string `json:"title"`
	State string `json:"state"`
}

// Task is one card of the task board.
type Task struct {
	ID          int64     `json:"id"`
	Title       string    `json:"title"`
	State       string    `json:"state"`
	Priority    int       `json:"priority"`
	Assignee    string    `json:"assignee,omitempty"`
	Claimant    string    `json:"claimant,omitempty"`
	Parent      int64     `json:"parent,omitempty"`
	Retries     int       `json:"retries"`
	Reviewer    string    `json:"reviewer,omitempty"`
	ReviewState string    `json:"review_state,omitempty"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// TaskBoard is the board by state.
type TaskBoard struct {
	// States lists every task state in the task machine's order, with
	// Counts holding each (zeros included).
	States []string       `json:"states"`
	Counts map[string]int `json:"counts"`
	// Tasks are every task that is not CLOSED or CANCELLED, and the most
	// recently finished of those, at most MaxBoardTasks, by id.
	Tasks []Task `json:"tasks"`
	// Omitted counts the tasks left out of Tasks.
	Omitted int `json:"omitted,omitempty"`
}

// TaskList is the board as a Source reads it.
type TaskList struct {
	// Tasks are every task that is not CLOSED or CANCELLED, and at least
	// the RecentFinished most recently updated of those that are.
	Tasks []Task
	// Counts is every task by state, those left out of Tasks included;
	// nil counts Tasks.
	Counts map[string]int
}

// MaxBoardTasks bounds the cards a snapshot carries; Counts still counts all.
const MaxBoardTasks = 500

// RecentFinished is how many CLOSED or CANCELLED tasks a board shows.
const RecentFinished = 20

// MergeQueue is the merge queue as the dashboards show it.
type MergeQueue struct {
	// Configured is false while this swarmd has no merge queue (or the
	// config names no merge target); Note then says so.
	Configured bool        `json:"configured"`
	Note       string      `json:"note,omitempty"`
	Paused     bool        `json:"paused"`
	Items      []MergeItem `json:"items"`
	// Depth is how many tasks are in the queue, the candidate under test
	// included (len(Items)).
	Depth int `json:"depth"`
	// GateRunning: the current candidate (Items[0], state testing) is in
	// its gate run GateSeq (`swarmd logs merge --session N`).
	GateRunning bool   `json:"gate_running"`
	GateSeq     uint32 `json:"gate_seq,omitempty"`
	// AheadSeq, if not 0, is the gate run ahead of the candidate under
	// test (merge.parallel: 2): its items have state "ahead".
	AheadSeq uint32 `json:"ahead_seq,omitempty"`
	// Recent are the last results, newest first.
	Recent []MergeResult `json:"recent"`
}

// MergeResult is one finished attempt of the merge queue.
type MergeResult struct {
	TaskID int64     `json:"task_id"`
	Title  string    `json:"title"`
	Agent  string    `json:"agent"`
	Result string    `json:"result"`           // merged or a rejection's kind (merge.Kind)
	Commit string    `json:"commit,omitempty"` // merged: the target's new commit
	At     time.Time `json:"at"`
}

// MergeItem is one candidate in the queue, the first being integrated.
type MergeItem struct {
	TaskID int64     `json:"task_id"`
	Title  string    `json:"title"`
	Agent  string    `json:"agent"`
	State  string    `json:"state"` // queued, checking, gating, ...
	Since  time.Time `json:"since"`
	Note   string    `json:"note,omitempty"`
}

// NotConfigured is the merge queue of a swarmd that has none.
var NotConfigured = MergeQueue{Note: "not configured", Items: []MergeItem{}, Recent: []MergeResult{}}

// TaskView is one task as the dashboards' task view shows it: the card,
// what it is about, its transitions, its review verdicts, its frozen head
// with the diff stat against the merge target, its merge, and its spend.
// It is read on request (GET /api/tasks/{id}); a client reads it again
// when an event of the task arrives.
type TaskView struct {
	Task   Task   `json:"task"`
	Body   string `json:"body,omitempty"`
	Result string `json:"result,omitempty"` // the DONE summary, the FAIL reason, the review feedback
	// Head is the commit frozen when the task was reported DONE (what is
	// reviewed and merged); WorkHead is where its line of commits stands.
	Head     string `json:"head,omitempty"`
	WorkHead string `json:"work_head,omitempty"`
	// DiffStat is `git diff --stat` of Head against Base (the merge
	// target, as it stood before the task's merge once merged); DiffError
	// says why there is none when it could not be computed.
	Base      string      `json:"base,omitempty"`
	DiffStat  string      `json:"diff_stat,omitempty"`
	DiffError string      `json:"diff_error,omitempty"`
	Timeline  []TaskEvent `json:"timeline"` // oldest first
	Verdicts  []Verdict   `json:"verdicts"` // oldest first
	Merge     *TaskMerge  `json:"merge,omitempty"`
	Spend     Spend       `json:"spend"`
}

// TaskEvent is one transition of a task, or of its merge queue entry
// (Actor merge-queue, From and To the entry's states).
type TaskEvent struct {
	ID     int64     `json:"id"`
	At     time.Time `json:"at"`
	From   string    `json:"from"`
	To     string    `json:"to"`
	Event  string    `json:"event,omitempty"`
	Actor  string    `json:"actor"`
	Reason string    `json:"reason,omitempty"`
	// AbortReason is the abnormal end of the agent's session that caused
	// the move ("timeout", "oom", ...), "" for none.
	AbortReason string `json:"abort_reason,omitempty"`
}

// Verdict is one review round of a task.
type Verdict struct {
	Round    int       `json:"round"`
	Reviewer string    `json:"reviewer"`
	Verdict  string    `json:"verdict"` // PASS or FAIL
	Text     string    `json:"text,omitempty"`
	At       time.Time `json:"at"`
}

// TaskMerge is a task's latest merge queue entry.
type TaskMerge struct {
	State    string `json:"state"`            // queued, testing, merged, rejected
	Result   string `json:"result,omitempty"` // merged or a rejection's kind (merge.Kind)
	Head     string `json:"head"`             // the commit queued
	Target   string `json:"target,omitempty"` // the target commit the candidate was built on
	Commit   string `json:"commit,omitempty"` // merged: the merge commit on the target
	Detail   string `json:"detail,omitempty"` // rejected: the conflicting paths or the gate output's tail
	Attempts int    `json:"attempts"`         // gate runs
	GateSeq  uint32 `json:"gate_seq,omitempty"`
	// GateLog is the tail of its last gate run's log.
	GateLog    string    `json:"gate_log,omitempty"`
	EnqueuedAt time.Time `json:"enqueued_at"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
}

// ShownState is the state a dashboard prints for an agent: "idle" for an
// agent that waits for mail or a task starting no session (the machine
// holds it in BuildingPrompt), else its state.
func (a Agent) ShownState() string {
	if a.Health == "idle" {
		return "idle"
	}
	return a.State
}

// Features says which parts of the model this daemon has: the clients hide
// or disable what is absent, and show it once it lands.
type Features struct {
	Tasks   bool `json:"tasks"`
	Merge   bool `json:"merge"`
	Pause   bool `json:"pause"`
	Budgets bool `json:"budgets"`
	// Writes: the client may change things (the web: a token is
	// configured; the control socket: always).
	Writes bool `json:"writes"`
	// Isolation says which parts of config key isolation are in force
	// and why the others are not (the start log's line).
	Isolation string `json:"isolation,omitempty"`
}

// Event is one line of the lifecycle event log: an agent's transition, or
// a task's when TaskID is set (From and To are then task states). One type
// for the control socket and the dashboards.
type Event = control.Event

// Session is one recorded backend session.
type Session struct {
	SessionID   string     `json:"session_id"`
	Agent       string     `json:"agent"`
	Seq         uint32     `json:"seq"`
	Started     time.Time  `json:"started"`
	Ended       *time.Time `json:"ended,omitempty"`
	Outcome     string     `json:"outcome,omitempty"`
	ExitCode    int        `json:"exit_code"`
	AbortReason string     `json:"abort_reason,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	DurationMS  int64      `json:"duration_ms"`
	TokensIn    int64      `json:"tokens_in"`
	TokensOut   int64      `json:"tokens_out"`
	CostUSD     float64    `json:"cost_usd"`
	ToolCalls   int        `json:"tool_calls"`
	Commits     int        `json:"commits"`
}

// Snapshot is the whole picture at one moment.
type Snapshot struct {
	At       time.Time  `json:"at"`
	Agents   []Agent    `json:"agents"` // by name
	Tasks    TaskBoard  `json:"tasks"`
	Merge    MergeQueue `json:"merge"`
	Features Features   `json:"features"`
	// LastEventID is the newest event the snapshot reflects: a stream
	// resumed after it misses nothing.
	LastEventID int64 `json:"last_event_id"`
	// Fault is why the daemon cannot do its job ("" when healthy).
	Fault string `json:"fault,omitempty"`
	// Inbox is what needs a person now, each with its fix (Needs).
	Inbox []Need `json:"inbox"`
	// StallAfter and SpawnTimeout are the thresholds of the
	// classification, in seconds.
	StallAfter   float64 `json:"stall_after_seconds"`
	SpawnTimeout float64 `json:"spawn_timeout_seconds"`
	// Daemons is the swarm's daemons, by name: one on a store of its own,
	// every daemon of the swarm on a shared one. The agents rows are this
	// daemon's only.
	Daemons []Daemon `json:"daemons"`
}

// Daemon is one daemon of the swarm (`swarmd daemons`).
type Daemon struct {
	Name   string   `json:"name"`   // host and state dir, as its leases name it
	Agents []string `json:"agents"` // as its config last recorded them
	// Self: the daemon serving this view.
	Self bool `json:"self,omitempty"`
	// Leases it holds: unexpired (it runs) and expired (it died or stopped
	// uncleanly, and no daemon has reaped them yet).
	Live    int `json:"live_leases"`
	Expired int `json:"expired_leases"`
	// LiveUntil is when its first live lease expires unless renewed
	// (renewals move it without an update).
	LiveUntil *time.Time `json:"live_until,omitempty"`
}

// Update kinds.
const (
	KindSnapshot = "snapshot" // Snapshot: the whole picture (a stream's first update)
	KindEvent    = "event"    // Event: one new line of the event log
	KindAgent    = "agent"    // Agent: a row changed or appeared
	KindRemoved  = "removed"  // Name: an agent left the config
	KindTasks    = "tasks"    // Tasks: the board changed
	KindMerge    = "merge"    // Merge: the queue changed
	KindFault    = "fault"    // Fault: the daemon's health changed
	KindInbox    = "inbox"    // Inbox: what needs a person changed
	KindDaemons  = "daemons"  // Daemons: the swarm's daemons or their leases changed
)

// Update is one message of a live stream.
type Update struct {
	Kind     string      `json:"type"`
	Snapshot *Snapshot   `json:"snapshot,omitempty"`
	Event    *Event      `json:"event,omitempty"`
	Agent    *Agent      `json:"agent,omitempty"`
	Name     string      `json:"name,omitempty"`
	Tasks    *TaskBoard  `json:"tasks,omitempty"`
	Merge    *MergeQueue `json:"merge,omitempty"`
	Fault    *string     `json:"fault,omitempty"`
	Inbox    *[]Need     `json:"inbox,omitempty"`
	Daemons  *[]Daemon   `json:"daemons,omitempty"`
}

// LogChunk is a piece of an agent's followed log: a new session's start
// (Session set, Text empty) or text of the current one.
type LogChunk struct {
	Session uint32 `json:"session,omitempty"`
	Text    string `json:"text,omitempty"`
}

// MailRequest is mail an operator sends from a dashboard.
type MailRequest struct {
	To      string `json:"to"`  // an agent; "" with All
	All     bool   `json:"all"` // every agent
	Subject string `json:"subject,omitempty"`
	Body    string `json:"body"`
	Urgent  bool   `json:"urgent"`
}

// TaskRequest is a task an operator adds from a dashboard.
type TaskRequest struct {
	Title    string  `json:"title"`
	Body     string  `json:"body,omitempty"`
	To       string  `json:"to,omitempty"` // assignee agent
	Priority int     `json:"priority,omitempty"`
	After    []int64 `json:"after,omitempty"`
	Parent   int64   `json:"parent,omitempty"`
	Plan     bool    `json:"plan,omitempty"`
}

// Errors Actions return; the servers map them to statuses.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict")
	ErrInvalid  = errors.New("invalid request")
	ErrDenied   = errors.New("forbidden")
	// ErrUnsupported: this swarmd does not have the feature yet.
	ErrUnsupported = errors.New("not supported by this swarmd")
	// ErrClosed: the hub stopped (the daemon is shutting down).
	ErrClosed = errors.New("view: hub closed")
)
