package view

import (
	"context"
	"sort"

	"github.com/swarmd/swarmd/internal/task"
)

// Subscription is one live stream: the snapshot when it started, the
// events it asked to catch up on, then every update in order on C. C is
// closed when the subscription ends: Err then says why (ErrLagged: resume
// after the last event received; ErrClosed: the daemon is stopping).
type Subscription struct {
	// Snapshot is the picture when the subscription started; updates on
	// C follow it.
	Snapshot Snapshot
	C        <-chan Update

	c   chan Update
	err error // set by the loop before it closes c
	h   *Hub

	backlog []Event // what the ring held of the catch-up
	after   int64   // catch up on events with id > after ...
	upTo    int64   // ... up to this one (the snapshot's LastEventID)
	fromDB  bool    // the ring no longer held them: read them from the Source
}

// Catch-up requests of Subscribe.
const (
	// NoResume asks for no catch-up beyond Tail.
	NoResume int64 = -1
	// MaxTail bounds the events a new subscriber may ask for.
	MaxTail = DefaultRing
)

// Subscribe starts a stream. With after >= 0 the subscriber resumes: it
// first gets, through Backlog, every event with id > after that the
// snapshot already reflects, so that it misses none. With after ==
// NoResume it gets the newest tail events instead (at most MaxTail).
func (h *Hub) Subscribe(ctx context.Context, after int64, tail int) (*Subscription, error) {
	s := &Subscription{c: make(chan Update, h.opts.Buffer), h: h, after: after}
	s.C = s.c
	err := h.do(ctx, func() {
		h.round(true, true)
		s.Snapshot = h.snapshot()
		s.upTo = h.lastID
		h.subs[s] = struct{}{}
		h.watched.Add(1)
		switch {
		case after == NoResume:
			n := min(max(tail, 0), MaxTail, len(h.ring))
			s.backlog = append([]Event(nil), h.ring[len(h.ring)-n:]...)
			s.after = s.upTo
		case after >= s.upTo:
			s.after = s.upTo // nothing to catch up on (or a resume point from another database)
		case after >= h.ringFloor:
			for _, e := range h.ring {
				if e.ID > after {
					s.backlog = append(s.backlog, e)
				}
			}
		default:
			s.fromDB = true
		}
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Backlog calls fn for each catch-up event, oldest first. Live updates
// queue on C meanwhile; a long catch-up from the database may make the
// subscriber lag, and it then resumes from where it got.
func (s *Subscription) Backlog(ctx context.Context, fn func(Event) error) error {
	for _, e := range s.backlog {
		if err := fn(e); err != nil {
			return err
		}
	}
	if !s.fromDB {
		return nil
	}
	after := s.after
	for after < s.upTo {
		evs, err := s.h.src.Events(ctx, after, eventPage)
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			return nil
		}
		for _, e := range evs {
			if e.ID > s.upTo {
				return nil
			}
			if err := fn(e); err != nil {
				return err
			}
			after = e.ID
		}
	}
	return nil
}

// Err says why C was closed: ErrLagged, ErrClosed, or nil after Close.
// Call it only once C is closed.
func (s *Subscription) Err() error { return s.err }

// Close ends the subscription. It is idempotent.
func (s *Subscription) Close() {
	_ = s.h.do(context.Background(), func() { s.h.end(s, nil) })
}

// buildBoard sorts tasks into the board: every state counted, cards for
// the tasks still in play and the most recently finished.
func buildBoard(l TaskList) TaskBoard {
	b := TaskBoard{States: make([]string, 0, task.NumStates), Counts: make(map[string]int, task.NumStates), Tasks: []Task{}}
	for _, st := range task.AllStates {
		b.States = append(b.States, st.String())
		b.Counts[st.String()] = l.Counts[st.String()]
	}
	var finished []Task
	for _, t := range l.Tasks {
		if l.Counts == nil {
			b.Counts[t.State]++
		}
		if t.State == task.Closed.String() || t.State == task.Cancelled.String() {
			finished = append(finished, t)
			continue
		}
		b.Tasks = append(b.Tasks, t)
	}
	sort.SliceStable(finished, func(i, j int) bool { return finished[i].UpdatedAt.After(finished[j].UpdatedAt) })
	keep := min(len(finished), RecentFinished)
	b.Tasks = append(b.Tasks, finished[:keep]...)
	b.Omitted = b.Counts[task.Closed.String()] + b.Counts[task.Cancelled.String()] - keep
	if len(b.Tasks) > MaxBoardTasks {
		b.Omitted += len(b.Tasks) - MaxBoardTasks
		b.Tasks = b.Tasks[:MaxBoardTasks]
	}
	sort.Slice(b.Tasks, func(i, j int) bool { return b.Tasks[i].ID < b.Tasks[j].ID })
	return b
}
