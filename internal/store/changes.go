package store

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Change says what committed transactions touched, as far as a listener of
// the store's notifications cares: on a shared store every daemon hears
// every other daemon's commits, and most of them (session rows, events,
// lease renewals) are nothing its router reads. A listener that knows what
// changed skips the reads the rest would cost it, on every daemon, for
// every commit of the swarm.
type Change uint8

const (
	// ChangedMail: the messages table.
	ChangedMail Change = 1 << iota
	// ChangedTasks: tasks, their dependencies, review rounds, the merge queue.
	ChangedTasks
	// ChangedOther: anything else (sessions, events, agents, leases, ...).
	ChangedOther
	// ChangedOpen: a write that can give an idle agent work: a task put
	// into or changed in the set idle agents are woken for (OPEN, or DONE
	// awaiting its review), or one CLOSED that others depend on. The
	// tasks' triggers say it on PostgreSQL, with the row in hand
	// (migration 0020): a statement's text cannot tell a claim from a
	// requeue. It comes with ChangedTasks.
	ChangedOpen

	// ChangedAll is what a listener assumes when it cannot know: a commit
	// without a payload, a notification missed while reconnecting.
	ChangedAll = ChangedMail | ChangedTasks | ChangedOther | ChangedOpen
)

// Precise reports whether c came from notifications that say what changed,
// ChangedOpen included, rather than from a listener that cannot know.
func (c Change) Precise() bool { return c != ChangedAll }

// Has reports whether c includes any of what.
func (c Change) Has(what Change) bool { return c&what != 0 }

// changeOf is what one statement of a write transaction touches: nothing
// for a read, the bit of the table a write names, everything for what it
// cannot tell (a CTE, DDL, several statements). Erring wide costs a
// listener a read; erring narrow would cost it a commit, so only the plain
// INSERT/UPDATE/DELETE shapes the store's queries use are narrowed.
func changeOf(query string) Change {
	q := strings.TrimSpace(query)
	word, rest := cutWord(q)
	var table string
	switch strings.ToUpper(word) {
	case "SELECT", "VALUES", "SHOW":
		return 0
	case "INSERT", "REPLACE":
		// INSERT [OR IGNORE|OR REPLACE] INTO table
		for {
			w, r := cutWord(rest)
			rest = r
			if w == "" {
				return ChangedAll
			}
			if strings.EqualFold(w, "INTO") {
				table, _ = cutWord(rest)
				break
			}
		}
	case "UPDATE":
		table, _ = cutWord(rest)
	case "DELETE":
		if w, r := cutWord(rest); strings.EqualFold(w, "FROM") {
			table, _ = cutWord(r)
		}
	default:
		return ChangedAll
	}
	if strings.Contains(strings.TrimRight(q, "; \t\n"), ";") {
		return ChangedAll
	}
	table, _, _ = strings.Cut(table, "(")
	switch strings.ToLower(strings.Trim(table, `"`)) {
	case "":
		return ChangedAll
	case "messages":
		return ChangedMail
	case "tasks", "task_deps", "review_rounds", "merge_queue", "merge_control":
		return ChangedTasks
	default:
		return ChangedOther
	}
}

// cutWord splits s at its first run of spaces.
func cutWord(s string) (word, rest string) {
	s = strings.TrimLeft(s, " \t\r\n")
	i := strings.IndexAny(s, " \t\r\n")
	if i < 0 {
		return s, ""
	}
	return s[:i], s[i:]
}

// insertsEvents reports whether query may add rows to the events table:
// such a statement must hold the appenders' turn (appendLock) on
// PostgreSQL. Unlike changeOf it errs towards yes for what it cannot read
// (a CTE, several statements, DDL) when the text names events at all: a
// needless turn costs a lock statement, a missing one the order of ids.
func insertsEvents(query string) bool {
	q := strings.TrimSpace(query)
	word, rest := cutWord(q)
	plain := !strings.Contains(strings.TrimRight(q, "; \t\n"), ";")
	switch w := strings.ToUpper(word); {
	case plain && (w == "SELECT" || w == "VALUES" || w == "SHOW" || w == "UPDATE" || w == "DELETE"):
		return false // draws no id
	case !plain || w != "INSERT":
		return strings.Contains(strings.ToLower(q), "events")
	}
	for {
		w, r := cutWord(rest)
		rest = r
		switch {
		case w == "":
			return false
		case strings.EqualFold(w, "INTO"):
			table, _ := cutWord(rest)
			table, _, _ = strings.Cut(table, "(")
			return strings.EqualFold(strings.Trim(table, `"`), "events")
		}
	}
}

// stmtKind is what the write path needs to know of a statement's text.
type stmtKind struct {
	change Change
	events bool // insertsEvents
}

// changeCache remembers each query text's kind: the store runs a small
// fixed set of queries, each many times.
type changeCache struct{ m sync.Map }

func (c *changeCache) kind(query string) stmtKind {
	if v, ok := c.m.Load(query); ok {
		return v.(stmtKind)
	}
	k := stmtKind{change: changeOf(query), events: insertsEvents(query)}
	c.m.Store(query, k)
	return k
}

// Urgent is an urgent message as its notification announced it, on
// PostgreSQL (migration 0022): what its recipient's router needs to
// interrupt a session, with no read of the mailbox.
type Urgent struct {
	ID        int64
	To        string
	CreatedAt time.Time
}

// maxUrgent bounds the announced urgent messages a Watch keeps untaken;
// past it a listener is told to read (ChangedAll) instead.
const maxUrgent = 1024

// Watch is one listener of the store's change notifications (DB.Changes).
type Watch struct {
	// C receives, coalesced, after commits by any client of the database;
	// Take then says what they touched.
	C       <-chan struct{}
	c       chan struct{}
	pending atomic.Uint32

	mu     sync.Mutex
	urgent []Urgent // announced, not yet taken; guarded by mu
}

func newWatch() *Watch {
	c := make(chan struct{}, 1)
	return &Watch{C: c, c: c}
}

// Take returns what the commits signalled since the last Take touched, and
// forgets it.
func (w *Watch) Take() Change { return Change(w.pending.Swap(0)) }

// TakeUrgent appends to dst the urgent messages announced since the last
// call, in the order their commits were, and forgets them. On PostgreSQL
// every urgent message is announced (migration 0022), so a listener whose
// Take says the notifications were precise needs no read to find them;
// one that says ChangedAll (a reconnect, too many untaken) may have
// missed some.
func (w *Watch) TakeUrgent(dst []Urgent) []Urgent {
	w.mu.Lock()
	defer w.mu.Unlock()
	dst = append(dst, w.urgent...)
	w.urgent = w.urgent[:0]
	return dst
}

// noteUrgent records an announced urgent message, then its change: a
// Take that sees the change is followed by a TakeUrgent that sees the
// message.
func (w *Watch) noteUrgent(u Urgent) {
	w.mu.Lock()
	full := len(w.urgent) >= maxUrgent
	if !full {
		w.urgent = append(w.urgent, u)
	}
	w.mu.Unlock()
	if full {
		w.note(ChangedAll)
		return
	}
	w.note(ChangedMail)
}

// notified records one notification's payload.
func (w *Watch) notified(payload string) {
	if u, ok := payloadUrgent(payload); ok {
		w.noteUrgent(u)
		return
	}
	w.note(payloadChange(payload))
}

// note records a commit's change and signals C, never blocking.
func (w *Watch) note(c Change) {
	if c == 0 {
		return
	}
	w.pending.Or(uint32(c))
	select {
	case w.c <- struct{}{}:
	default:
	}
}
