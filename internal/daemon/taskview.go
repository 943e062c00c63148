package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/swarmd/swarmd/internal/merge"
	"github.com/swarmd/swarmd/internal/taskboard"
	"github.com/swarmd/swarmd/internal/view"
)

// Bounds of the gate log tail a task view carries.
const (
	gateTailBytes = 8 << 10
	gateTailLines = 40
)

// taskView is one task as the dashboards' task view shows it: the card and
// its body, its transitions (the merge queue's included), its verdicts, its
// frozen head with the diff stat against the merge target, its latest merge
// queue entry with the tail of its last gate log, and its spend.
func (d *Daemon) taskView(ctx context.Context, id int64) (view.TaskView, error) {
	d.readOwnWrites(ctx) // the sessions and their spend
	tk, err := d.tasks.Get(ctx, id)
	if errors.Is(err, taskboard.ErrNotFound) {
		return view.TaskView{}, fmt.Errorf("%w: no task %d", view.ErrNotFound, id)
	}
	if err != nil {
		return view.TaskView{}, err
	}
	tv := view.TaskView{Task: viewTask(tk), Body: tk.Body, Result: tk.Result, Head: tk.Head, WorkHead: tk.WorkHead,
		Timeline: []view.TaskEvent{}, Verdicts: []view.Verdict{}}
	hist, err := d.tasks.History(ctx, id)
	if err != nil {
		return view.TaskView{}, err
	}
	for _, e := range hist {
		tv.Timeline = append(tv.Timeline, view.TaskEvent{ID: e.ID, At: e.At, From: e.From, To: e.To,
			Event: e.TransitionReason, Actor: e.Actor, Reason: e.Reason, AbortReason: e.AbortReason})
	}
	vs, err := d.tasks.Verdicts(ctx, id)
	if err != nil {
		return view.TaskView{}, err
	}
	for _, v := range vs {
		tv.Verdicts = append(tv.Verdicts, view.Verdict{Round: v.Round, Reviewer: v.Reviewer, Verdict: v.Verdict, Text: v.Text, At: v.At})
	}
	sp, err := d.tasks.Spend(ctx, id)
	if err != nil {
		return view.TaskView{}, err
	}
	tv.Spend = view.Spend{Sessions: sp.Sessions, TokensIn: sp.TokensIn, TokensOut: sp.TokensOut, CostUSD: sp.CostUSD}
	cfg, _ := d.current()
	tv.Base = reviewBase(cfg, d.trees.BaseCommit())
	if d.merge.queue != nil {
		e, err := d.merge.queue.Store().Latest(ctx, id)
		switch {
		case err == nil:
			tv.Merge = d.taskMerge(e)
			if e.State == merge.Merged && e.Target != "" {
				tv.Base = e.Target // the target before the merge: after it, it holds the head
			}
		case !errors.Is(err, merge.ErrNotFound):
			return view.TaskView{}, err
		}
	}
	if tk.Head != "" {
		c, err := d.trees.Compare(ctx, tv.Base, tk.Head)
		if err != nil {
			tv.DiffError = err.Error()
		} else {
			tv.DiffStat = c.DiffStat
		}
	}
	return tv, nil
}

// taskMerge is a merge queue entry as the task view shows it.
func (d *Daemon) taskMerge(e merge.Entry) *view.TaskMerge {
	m := &view.TaskMerge{State: string(e.State), Result: e.Result, Head: e.Head, Target: e.Target, Detail: e.Detail,
		Attempts: e.Attempts, GateSeq: e.GateSeq, EnqueuedAt: e.EnqueuedAt, FinishedAt: e.FinishedAt}
	if e.State == merge.Merged {
		m.Commit = e.Candidate
	}
	if e.GateSeq != 0 {
		m.GateLog = d.gateTail(e.GateSeq)
	}
	return m
}

// gateTail is the end of gate run seq's log (its last lines, at most
// gateTailBytes), or why it cannot be read.
func (d *Daemon) gateTail(seq uint32) string {
	rc, _, err := d.kit.logs.Open(merge.LogName, seq)
	if err != nil {
		return "[" + err.Error() + "]"
	}
	defer rc.Close()
	tail, err := readTail(rc, gateTailBytes)
	if err != nil {
		return "[" + err.Error() + "]"
	}
	return lastLines(tail, gateTailLines)
}

// readTail reads r to its end and returns its last n bytes.
func readTail(r io.Reader, n int) (string, error) {
	if s, ok := r.(io.Seeker); ok {
		if end, err := s.Seek(0, io.SeekEnd); err == nil {
			if _, err := s.Seek(max(0, end-int64(n)), io.SeekStart); err != nil {
				return "", err
			}
		}
	}
	buf := make([]byte, 0, 2*n)
	chunk := make([]byte, 32<<10)
	for {
		k, err := r.Read(chunk)
		buf = append(buf, chunk[:k]...)
		if len(buf) > n {
			buf = append(buf[:0], buf[len(buf)-n:]...)
		}
		if errors.Is(err, io.EOF) {
			return string(buf), nil
		}
		if err != nil {
			return "", err
		}
	}
}

// lastLines is the last n lines of s, the first of them whole unless s was
// cut inside it.
func lastLines(s string, n int) string {
	s = strings.TrimRight(s, "\n")
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
