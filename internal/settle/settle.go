// Package settle records what became of a session, exactly once: a
// finished session's outcome (its row's end, the mail its prompt carried,
// its task report, its review verdict, its spend) in one transaction, and
// what a session that never started or an agent that stopped leaves behind.
//
// An outcome is never dropped. It is appended to the session's log first
// (the outbox: restart recovery applies it from there if the daemon dies
// before the store has it), then written in one transaction, retried with
// backoff for as long as the store is busy, slow or away; one the store
// refuses for good is recorded in part (the session's end, its mail, its
// task's work head), so that no session stays unsettled. Every write is
// fenced by session: a task report and a mail acknowledgement apply only to
// what the session was given, so a later session can never settle an
// earlier one's work.
package settle

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/swarmd/swarmd/internal/logs"
	"github.com/swarmd/swarmd/internal/mailbox"
	"github.com/swarmd/swarmd/internal/review"
	"github.com/swarmd/swarmd/internal/runner"
	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/task"
	"github.com/swarmd/swarmd/internal/taskboard"
)

// Mail is what settling needs of the mailbox. *mailbox.Mailbox satisfies it.
type Mail interface {
	AckTx(ctx context.Context, tx *sql.Tx, sessionID string, ended time.Time) (int, error)
	UnackTx(ctx context.Context, tx *sql.Tx, sessionID, note string) (int, error)
	UnconsumeTx(ctx context.Context, tx *sql.Tx, sessionID string) (int, error)
}

// Tasks is what settling needs of the task board. *taskboard.Board
// satisfies it.
type Tasks interface {
	DoneTx(ctx context.Context, tx *sql.Tx, id int64, h taskboard.Holder, summary, head string) error
	ReadTx(ctx context.Context, tx *sql.Tx, id int64) (taskboard.Task, error)
	DoneReadTx(ctx context.Context, tx *sql.Tx, t taskboard.Task, h taskboard.Holder, summary, head string) error
	KeepWorkTx(ctx context.Context, tx *sql.Tx, id int64, h taskboard.Holder, head string) error
	FailTx(ctx context.Context, tx *sql.Tx, id int64, h taskboard.Holder, reason string) error
	VerdictTx(ctx context.Context, tx *sql.Tx, id int64, reviewer, head string, pass bool, feedback string) (taskboard.Task, error)
	GaveUpSince(ctx context.Context, id int64, reviewer string, since time.Time) (taskboard.Task, bool, error)
	StartHeldTx(ctx context.Context, tx *sql.Tx, id int64, h taskboard.Holder) (func(context.Context) error, error)
	UnclaimTx(ctx context.Context, tx *sql.Tx, session string, started int64) error
	Orphan(ctx context.Context, agent, why string) ([]taskboard.Task, error)
	GiveBack(ctx context.Context, agent, why string) ([]taskboard.Task, error)
}

// Backoff bounds of the retries while the store refuses a write.
const (
	firstBackoff = 5 * time.Millisecond
	maxBackoff   = time.Second
)

// Settler implements runner.Settler on a store. Mail and Tasks may be nil
// (no mailbox, no task board).
type Settler struct {
	DB      *store.DB
	Mail    Mail
	Tasks   Tasks
	Signals review.Signals
	Logger  *zap.Logger
	// Now is the clock of settled_at; nil is time.Now.
	Now func() time.Time
	// Observe, if set, is told of every settled outcome: how long after
	// the session's end it was recorded, and how long of that was spent
	// waiting for the store (retries after a refusal). It must be quick.
	Observe func(agent string, latency, waited time.Duration)
	// Settled, if set, is told of every session whose outcome Settle
	// committed: its log is no longer needed for restart recovery. It
	// must be quick.
	Settled func(agent string, seq uint32)
	// GaveUp, if set, is told of a task that a settled review verdict left
	// FAILED for good, once the outcome is committed (by Settle, or by
	// Recover from the log): nobody works on it any more until a person
	// retries it. failure is the loop's reason (max_iterations); "" when
	// its record could not be read and the loop resumed as failed.
	GaveUp func(task int64, reviewer, failure, feedback string)
	// Orphaned, if set, is told of the tasks Stopped took from an agent
	// whose stop was the work's failure: some may be FAILED, their
	// retries used up.
	Orphaned func(agent, why string, moved []taskboard.Task)
	// Group, if set, is shared by every Settler of the process (one per
	// agent): outcomes waiting for the store at once are committed together
	// only if they wait in one group. nil is a group of this Settler's own.
	Group *Group

	own Group
}

// Record is an outcome as the outbox keeps it: everything Apply needs,
// with the signal already read from the result, so that recovery applies
// what the running daemon would have.
type Record struct {
	Session   store.SessionRecord `json:"session"`
	Completed bool                `json:"completed"`
	Note      string              `json:"note,omitempty"`
	Task      int64               `json:"task,omitempty"`
	Review    int64               `json:"review,omitempty"`
	// ReviewHead is the commit the review session was shown: the reviewed
	// task's frozen head then ("" for a task with none). Its verdict
	// applies only while that is still the task's frozen head.
	ReviewHead string `json:"review_head,omitempty"`
	Mail       int    `json:"mail,omitempty"`   // messages the prompt carried
	Signal     string `json:"signal,omitempty"` // review.Signal's name: done, pass, fail; "" none
	Text       string `json:"text,omitempty"`   // the result text: the task's summary or reason, the verdict's feedback
}

// maxRecordText caps the result text an outbox record keeps (the log has
// the whole of it just above).
const maxRecordText = 256 << 10

// Result is what Apply did.
type Result struct {
	// Already: the session was settled before (an earlier attempt's commit,
	// or recovery): nothing was applied now.
	Already bool
	// Signalled: the session completed with a signal.
	Signalled bool
	// Acked is how many messages were acknowledged; Reported says what
	// became of the task or review ("" nothing).
	Acked    int
	Reported string
	// Batch is how many outcomes were committed in the transaction that
	// committed this one (1: alone).
	Batch int
	// GaveUp is the task the review verdict left FAILED for good (0:
	// none), GaveUpWhy the review loop's reason (max_iterations; "" for a
	// loop whose record could not be read).
	GaveUp    int64
	GaveUpWhy string
	// Refused is why the store refused the whole outcome for good when
	// only part of it was recorded (settleInPart): the session's end, its
	// mail, its task's work head; nil when the whole of it was.
	Refused error
}

// RecordOf is the outbox record of a runner's settlement.
func (s *Settler) RecordOf(st runner.Settlement) Record {
	rec := Record{Session: sessionRow(st.Session), Completed: st.Completed, Note: st.Note, Task: st.Task, Review: st.Review,
		ReviewHead: st.ReviewHead, Mail: st.Mail}
	rec.Session.Task = cmp.Or(st.Task, st.Review) // what the session worked on or reviewed: the task's spend
	if st.Completed {
		if sig := s.Signals.Scan(st.Result); sig != review.NoSignal {
			rec.Signal = sig.String()
			if rec.Task != 0 || rec.Review != 0 {
				rec.Text = st.Result
				if len(rec.Text) > maxRecordText {
					rec.Text = rec.Text[:maxRecordText]
				}
			}
		}
	}
	return rec
}

// sessionRow is the sessions table's row of an ended session.
func sessionRow(s runner.SessionRecord) store.SessionRecord {
	ended := s.Result.Ended
	return store.SessionRecord{
		SessionID: s.SessionID, Agent: s.Agent, Seq: s.Seq, Started: s.Result.Started, Ended: &ended,
		Outcome: s.OutcomeLabel(), ExitCode: s.Result.ExitCode, Signal: s.Result.Signal,
		AbortReason: s.Result.AbortReason, Reason: s.Result.Reason, Duration: s.Result.Ended.Sub(s.Result.Started),
		HeadBefore: s.HeadBefore, HeadAfter: s.HeadAfter, LogPath: s.LogPath,
		TokensIn: s.Result.Usage.InputTokens, TokensOut: s.Result.Usage.OutputTokens,
		CostUSD: s.Result.Usage.CostUSD, ToolCalls: s.Result.ToolCalls, ResultText: s.Result.Text,
		Commits: s.Commits, CPU: s.Result.CPU,
	}
}

// Settle records a finished session's outcome: it appends the record to
// the session's log, then applies it (Apply), retrying with backoff while
// the store refuses it for a reason that passes (Transient), telling wait
// of each refusal; an outcome the store refuses for good is recorded in
// part (settleInPart), and the session settled all the same. It returns
// once the outcome is recorded, or when ctx ends (the outcome is then in
// the log, for recovery), or on an error no retry can fix (the database is
// gone, or even the part was refused).
func (s *Settler) Settle(ctx context.Context, st runner.Settlement, wait func(err error)) (runner.SettleResult, error) {
	rec := s.RecordOf(st)
	if b, err := json.Marshal(rec); err != nil {
		s.logger().Error("encode the session's outcome", zap.String("session", st.Session.SessionID), zap.Error(err))
	} else if rec.Session.LogPath != "" {
		if err := logs.AppendOutcome(rec.Session.LogPath, b); err != nil {
			// Not fatal: the store is the record; the log only covers a crash.
			s.logger().Warn("keep the session's outcome in its log", zap.String("session", st.Session.SessionID), zap.Error(err))
		}
	}
	var waited time.Duration
	since := time.Now() // the board's clock (taskboard.Options.Now), before any attempt
	res, err := s.record(ctx, "settle session "+st.Session.SessionID, rec, wait, &waited)
	if err != nil {
		return runner.SettleResult{}, err
	}
	if s.Observe != nil && rec.Session.Ended != nil {
		s.Observe(rec.Session.Agent, s.now().Sub(*rec.Session.Ended), waited)
	}
	if s.Settled != nil {
		s.Settled(rec.Session.Agent, rec.Session.Seq)
	}
	s.tellGaveUp(ctx, rec, &res, since, waited, wait)
	return runner.SettleResult{Signalled: res.Signalled}, nil
}

// tellGaveUp tells GaveUp of the task rec's verdict left FAILED for good,
// once rec is recorded (res, after attempts from since that waited for
// the store that long), whether a live session's end or restart recovery
// recorded it: the operator is told of either alike.
func (s *Settler) tellGaveUp(ctx context.Context, rec Record, res *Result, since time.Time, waited time.Duration, wait func(error)) {
	if res.Already && waited > 0 {
		// An attempt refused meanwhile committed unseen (on PostgreSQL a
		// connection can die between the COMMIT and its answer): what it
		// did is read back, for the one thing told only after the commit.
		res.GaveUp, res.GaveUpWhy = s.gaveUpUnseen(ctx, rec, since, wait)
	}
	if res.GaveUp != 0 && s.GaveUp != nil {
		s.GaveUp(res.GaveUp, rec.Session.Agent, res.GaveUpWhy, rec.Text)
	}
}

// gaveUpUnseen is the task that rec's verdict left FAILED for good, and
// why, when an attempt at settling rec at since or later committed unseen;
// 0 when it left none, or when it is not known before ctx ends (logged).
// Only a completed review's FAIL can: the read costs nothing to the rest.
func (s *Settler) gaveUpUnseen(ctx context.Context, rec Record, since time.Time, wait func(error)) (int64, string) {
	if s.Tasks == nil || rec.Review == 0 || !rec.Completed || rec.Signal != review.Fail.String() {
		return 0, ""
	}
	type gaveUp struct {
		t  taskboard.Task
		ok bool
	}
	g, err := retry(ctx, s, fmt.Sprintf("read what the verdict on task %d did", rec.Review), wait, nil, func() (gaveUp, error) {
		t, ok, err := s.Tasks.GaveUpSince(ctx, rec.Review, rec.Session.Agent, since)
		if err != nil {
			err = s.DB.Wrap("settle session "+rec.Session.SessionID, err)
		}
		return gaveUp{t, ok}, err
	})
	if err != nil {
		s.logger().Warn("a verdict settled unseen: whether it failed its task for good is not known", zap.String("session", rec.Session.SessionID),
			zap.Int64("task", rec.Review), zap.Error(err))
		return 0, ""
	}
	if !g.ok {
		return 0, ""
	}
	return rec.Review, g.t.ReviewFailure
}

// retry runs f until it succeeds, fails for good, or ctx ends.
func retry[T any](ctx context.Context, s *Settler, op string, wait func(error), waited *time.Duration, f func() (T, error)) (T, error) {
	delay := firstBackoff
	var since time.Time
	for {
		v, err := f()
		if err == nil || !s.DB.Transient(err) {
			if !since.IsZero() && waited != nil {
				*waited = time.Since(since)
			}
			if err == nil && !since.IsZero() {
				s.logger().Info(op+": recorded after waiting for the store", zap.Duration("waited", time.Since(since)))
			}
			return v, err
		}
		if since.IsZero() {
			since = time.Now()
			s.logger().Warn(op+": the store refused the write; retrying until it takes it", zap.Error(err))
		}
		if wait != nil {
			wait(err)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			var zero T
			return zero, fmt.Errorf("%s: %w (last refusal: %w)", op, ctx.Err(), err)
		case <-t.C:
		}
		delay = min(2*delay, maxBackoff)
	}
}

func (s *Settler) retry(ctx context.Context, op string, wait func(error), waited *time.Duration, f func() (Result, error)) (Result, error) {
	return retry(ctx, s, op, wait, waited, f)
}

// record applies rec (Apply), retrying while the store refuses it for a
// reason that passes, and settles its session in part (settleInPart) when
// the store refuses the whole of it for good. waited, if not nil, is
// added the time spent waiting for the store.
func (s *Settler) record(ctx context.Context, op string, rec Record, wait func(error), waited *time.Duration) (Result, error) {
	var w time.Duration
	res, err := s.retry(ctx, op, wait, &w, func() (Result, error) { return s.Apply(ctx, rec) })
	addWait(waited, w)
	if err == nil || !s.forGood(ctx, err) {
		return res, err
	}
	return s.settleInPart(ctx, op, rec, err, wait, waited)
}

// forGood reports whether err, an attempt's last, is a refusal of the
// outcome itself that no retry passes: not the store slow or away, not ctx
// ended, not the database gone or read-only, not its engine failing (an
// I/O error, memory, a corrupt page: store.EngineFault). Every write fails
// then, and the outcome waits in the log for a store that takes it whole;
// recorded in part, its task report would be lost for an engine's fault.
func (s *Settler) forGood(ctx context.Context, err error) bool {
	return ctx.Err() == nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) &&
		!errors.Is(err, store.ErrDatabaseGone) && !errors.Is(err, store.ErrReadOnly) && !s.DB.Transient(err) &&
		!store.EngineFault(err)
}

// settleInPart settles rec's session when the store refused its whole
// outcome for good (why: a constraint, a value out of range, a bug in one
// part of it; nothing a retry passes): a session left unsettled shows its
// mail again as new with no note, session after session, and its task
// report is lost all the same. It records, in a transaction of its own,
// what cannot fail for the report's reasons: the session's row with its
// end (outcome, exit, spend), settled; its mail acknowledged if it
// completed, noted if not, as the whole outcome would have; and where its
// task's line stands (Tasks.KeepWorkTx), so that the next session on the
// task goes on from this one's commits instead of resetting its branch to
// the line's last head; then, should the board refuse that too, the same
// without it. The task report and the review verdict are not applied: the
// task stays with its agent, whose next session continues it, as with a
// report the board refuses. Why is an event of the session's
// (store.EventSettledInPart) in the same transaction, and an error log
// line. Exactly once as Apply is: the row's settled_at is read in the
// transaction, so a session an earlier attempt settled (its commit unseen)
// is left alone (Result.Already), and so is one the part's own lost commit
// settled. If the part fails for good too, the error is returned: logged,
// and the session left to the caller as before.
func (s *Settler) settleInPart(ctx context.Context, op string, rec Record, why error, wait func(error), waited *time.Duration) (Result, error) {
	id := rec.Session.SessionID
	log := s.logger().With(zap.String("session", id), zap.String("agent", rec.Session.Agent),
		zap.Int64("task", rec.Task), zap.Int64("review", rec.Review))
	tries := []bool{false}
	if s.Tasks != nil && rec.Task != 0 && rec.Session.HeadAfter != "" {
		tries = []bool{true, false}
	}
	var (
		res      Result
		err      error
		attempts int // of the part: past the first, one may have committed unseen
	)
	for _, keepWork := range tries {
		var w time.Duration
		res, err = s.retry(ctx, op+" in part", wait, &w, func() (Result, error) {
			attempts++
			return s.group().apply(ctx, s, func(ctx context.Context, tx *sql.Tx) (Result, error) {
				return s.applyInPartTx(ctx, tx, rec, why, keepWork)
			})
		})
		addWait(waited, w)
		if err == nil || !s.forGood(ctx, err) {
			break
		}
		if keepWork {
			log.Error("the session's task's work head cannot be recorded either: settling the session without it",
				zap.NamedError("refused", why), zap.Error(err))
		}
	}
	switch {
	case err != nil && s.forGood(ctx, err):
		log.Error("the session's outcome cannot be recorded, not even in part: the session stays unsettled",
			zap.NamedError("refused", why), zap.Error(err))
		return Result{}, fmt.Errorf("%w (and in part: %w)", why, err)
	case err != nil:
		return Result{}, err
	case res.Already && attempts == 1:
		// An attempt at the whole outcome committed unseen: it is
		// recorded whole after all.
		log.Warn("the session's outcome was refused for good, but an earlier attempt had recorded it whole", zap.Error(why))
	case res.Already:
		// The part's own commit unseen, or the whole's: the session's
		// event says which.
		res.Refused = why
		log.Error("the session's outcome was refused for good: the session is settled in part, without its task report or review verdict, "+
			"or whole by an earlier attempt whose commit went unseen (a "+store.EventSettledInPart+" event of the session's says which)", zap.Error(why))
	default:
		log.Error("the session's outcome was refused for good: the session is settled without its task report or review verdict "+
			"(the task stays with its agent)", zap.Error(why))
	}
	return res, nil
}

// applyInPartTx is settleInPart's work in tx; keepWork: the task's work
// head too.
func (s *Settler) applyInPartTx(ctx context.Context, tx *sql.Tx, rec Record, why error, keepWork bool) (Result, error) {
	res := Result{Signalled: rec.Completed && rec.Signal != ""}
	settled, err := s.DB.SettleSessionHeld(ctx, tx, rec.Session, s.now())
	if err != nil {
		return res, err
	}
	already, err := settled()
	if err != nil || already {
		res.Already = already
		return res, err
	}
	res.Refused = why
	e := store.EventRecord{At: s.now(), Agent: rec.Session.Agent, From: inPartState, Event: store.EventSettledInPart, To: inPartState,
		Actor: "daemon", SessionID: rec.Session.SessionID, Seq: rec.Session.Seq,
		Reason: "session " + rec.Session.SessionID + " settled without its task report or review verdict, refused for good: " + why.Error()}
	if err := s.DB.EventTx(ctx, tx, e); err != nil {
		return res, err
	}
	if keepWork {
		err := s.Tasks.KeepWorkTx(ctx, tx, rec.Task, taskboard.Holder{Agent: rec.Session.Agent, Session: rec.Session.SessionID}, rec.Session.HeadAfter)
		if err != nil && !refusedReport(err) {
			return res, fmt.Errorf("settle session %s: keep the work of task %d: %w", rec.Session.SessionID, rec.Task, err)
		}
	}
	if err := s.mailTx(ctx, tx, rec, &res); err != nil {
		return res, fmt.Errorf("settle session %s: %w", rec.Session.SessionID, err)
	}
	return res, nil
}

// inPartState is the agent state an EventSettledInPart names: its session
// is over.
const inPartState = "SessionComplete"

// addWait adds d to *waited, if waited is not nil.
func addWait(waited *time.Duration, d time.Duration) {
	if waited != nil {
		*waited += d
	}
}

// Apply writes rec in one transaction (shared with the other outcomes
// waiting for the store at the time, each under a savepoint of its own):
// the session's row with its end, marked settled; its mail acknowledged
// (it completed) or noted (it did not); its task reported and its review's
// verdict recorded by the signal it carried, each only if this session
// holds them. A session settled before is left alone (Result.Already).
func (s *Settler) Apply(ctx context.Context, rec Record) (Result, error) {
	return s.group().apply(ctx, s, func(ctx context.Context, tx *sql.Tx) (Result, error) { return s.applyTx(ctx, tx, rec) })
}

// group is where s's writes wait for the store: the shared Group, or s's own.
func (s *Settler) group() *Group {
	if s.Group != nil {
		return s.Group
	}
	return &s.own
}

// applyTx is Apply's work in tx.
func (s *Settler) applyTx(ctx context.Context, tx *sql.Tx, rec Record) (Result, error) {
	var res Result
	id := rec.Session.SessionID
	fail := func(err error) (Result, error) { return Result{}, fmt.Errorf("settle session %s: %w", id, err) }
	sig := review.NoSignal
	if rec.Signal != "" {
		var err error
		if sig, err = review.ParseSignal(rec.Signal); err != nil {
			return fail(err)
		}
	}
	res.Signalled = rec.Completed && sig != review.NoSignal
	settled, err := s.DB.SettleSessionHeld(ctx, tx, rec.Session, s.now())
	if err != nil {
		return res, err
	}
	// A worker's DONE moves its task, which the report reads first: read
	// now, it carries the settlement's write to the server (held back on
	// PostgreSQL), one round trip for both under the swarm's lock. A
	// failure of the write (its lease's check among them) is the read's.
	var read *taskRead
	if s.Tasks != nil && rec.Completed && sig == review.Done && rec.Task != 0 && rec.Review == 0 {
		t, err := s.Tasks.ReadTx(ctx, tx, rec.Task)
		if err != nil && !errors.Is(err, taskboard.ErrNotFound) {
			return res, s.DB.Wrap("settle session "+id, err)
		}
		read = &taskRead{t: t, err: err}
	}
	already, err := settled()
	if err != nil || already {
		res.Already = already
		return res, err
	}
	if err := s.report(ctx, tx, rec, sig, &res, read); err != nil {
		return fail(err)
	}
	if err := s.mailTx(ctx, tx, rec, &res); err != nil {
		return fail(err)
	}
	return res, nil
}

// mailTx acknowledges in tx the mail rec's session was shown, if it
// completed, or notes why it did not (rec.Note).
func (s *Settler) mailTx(ctx context.Context, tx *sql.Tx, rec Record, res *Result) error {
	if s.Mail == nil || rec.Mail == 0 {
		return nil // the prompt claimed no mail: none to acknowledge or note
	}
	var err error
	if rec.Completed {
		res.Acked, err = s.Mail.AckTx(ctx, tx, rec.Session.SessionID, *rec.Session.Ended)
	} else {
		_, err = s.Mail.UnackTx(ctx, tx, rec.Session.SessionID, rec.Note)
	}
	return err
}

// refusedReport reports whether err is a task report or a verdict the
// board refuses (report): not an error of the settlement.
func refusedReport(err error) bool {
	return errors.Is(err, taskboard.ErrState) || errors.Is(err, taskboard.ErrNotHolder) || errors.Is(err, taskboard.ErrInvalid)
}

// report applies the signal to the session's review and task. A report the
// board refuses because the state moved on (the session reported it itself
// with `swarmd task done`, or the operator cancelled the task), because
// this session no longer holds it (the fence did its job), or because the
// report itself is not one the board takes (a DONE that freezes no commit
// under a merge queue: the worktree's HEAD could not be read) is not an
// error: it is logged, and the session is settled all the same. Failing
// the settlement for it would leave the session unsettled for good, its
// mail shown again as new, and its outbox record failing every restart's
// recovery.
func (s *Settler) report(ctx context.Context, tx *sql.Tx, rec Record, sig review.Signal, res *Result, read *taskRead) error {
	if s.Tasks == nil {
		return nil
	}
	agent, id := rec.Session.Agent, rec.Session.SessionID
	if done := rec.Completed && sig == review.Done; rec.Task != 0 && rec.Session.HeadAfter != "" && !done {
		// Where the task's line stands, however the session ended: the
		// next session on it starts there. (A DONE freezes it below, and
		// keeps it in the same write.)
		err := s.Tasks.KeepWorkTx(ctx, tx, rec.Task, taskboard.Holder{Agent: agent, Session: id}, rec.Session.HeadAfter)
		if err != nil && !refusedReport(err) {
			return fmt.Errorf("keep the work of task %d: %w", rec.Task, err)
		}
	}
	if !rec.Completed {
		return nil
	}
	if rec.Review != 0 && (sig == review.Pass || sig == review.Fail) {
		// On the commit the session was shown: a task reported done at
		// another since is refused (ErrState) like any stale report.
		t, err := s.Tasks.VerdictTx(ctx, tx, rec.Review, agent, rec.ReviewHead, sig == review.Pass, rec.Text)
		switch {
		case err == nil:
			res.Reported = fmt.Sprintf("review of task %d: %s", rec.Review, sig)
			if t.StateName == task.Failed.String() {
				res.GaveUp, res.GaveUpWhy = rec.Review, t.ReviewFailure
			}
		case refusedReport(err):
			s.logger().Info("review verdict not applied", zap.String("session", id), zap.Error(err))
		default:
			return fmt.Errorf("review verdict on task %d: %w", rec.Review, err)
		}
	}
	if rec.Task != 0 && (sig == review.Done || sig == review.Fail) {
		h := taskboard.Holder{Agent: agent, Session: id}
		var err error
		switch {
		case sig == review.Done && read != nil && read.err != nil:
			err = read.err
		case sig == review.Done && read != nil:
			// Frozen here: the review and the merge take exactly this commit.
			err = s.Tasks.DoneReadTx(ctx, tx, read.t, h, rec.Text, rec.Session.HeadAfter)
		case sig == review.Done:
			err = s.Tasks.DoneTx(ctx, tx, rec.Task, h, rec.Text, rec.Session.HeadAfter)
		default:
			err = s.Tasks.FailTx(ctx, tx, rec.Task, h, cmp.Or(strings.TrimSpace(rec.Text), "FAIL"))
		}
		switch {
		case err == nil:
			res.Reported = fmt.Sprintf("task %d: %s", rec.Task, sig)
		case refusedReport(err):
			s.logger().Info("task report not applied", zap.String("session", id), zap.Int64("task", rec.Task), zap.Error(err))
		default:
			return fmt.Errorf("report task %d: %w", rec.Task, err)
		}
	}
	return nil
}

// Begin records that a session is about to start (its row, committed),
// and starts the task its prompt newly claimed (b.Task) in the same
// transaction, retrying while the store refuses. A seq that another
// session of the agent has is runner.ErrSeqTaken, with the first free
// seq; the task then stays CLAIMED, for Release. A task that did not move
// (cancelled or taken back since its claim) does not keep the session
// from starting: its report will be refused as any stale holder's is.
func (s *Settler) Begin(ctx context.Context, b runner.SessionBegin, wait func(error)) (uint32, error) {
	rec := store.SessionRecord{SessionID: b.SessionID, Agent: b.Agent, Seq: b.Seq, Started: b.Started,
		HeadBefore: b.HeadBefore, LogPath: b.LogPath}
	var started func(context.Context) error
	_, err := retry(ctx, s, "record the start of session "+b.SessionID, wait, nil, func() (struct{}, error) {
		inserted, st, err := s.group().begin(ctx, s, rec, b.Task)
		if err != nil {
			return struct{}{}, err
		}
		started = st
		ok, err := inserted()
		if err == nil && !ok {
			err = s.DB.SessionBegun(ctx, rec)
		}
		return struct{}{}, err
	})
	if errors.Is(err, store.ErrSeqTaken) {
		last, merr := s.DB.MaxSeq(ctx, b.Agent)
		if merr != nil {
			return 0, errors.Join(err, merr)
		}
		return last + 1, fmt.Errorf("%w: %w", runner.ErrSeqTaken, err)
	}
	if err != nil || started == nil {
		return 0, err
	}
	// ErrState: started already by an earlier attempt whose commit's
	// answer was lost.
	if err := started(ctx); err != nil && !errors.Is(err, taskboard.ErrState) {
		s.logger().Warn("the session's task did not start with it", zap.String("session", b.SessionID),
			zap.Int64("task", b.Task), zap.Error(err))
	}
	return 0, nil
}

// Transient reports whether err is the store being slow or away.
func (s *Settler) Transient(err error) bool { return s.DB.Transient(err) }

// Fenced reports whether err is a write refused because this daemon lost
// the agent's lease (store.Lost): not one refused only because a renewal
// is late while the lease has not run out, which passes with the renewal
// (a slow store), and which a stop must not give up.
func (s *Settler) Fenced(err error) bool { return store.Lost(err) }

// Release returns the mail and the task claimed for a session that never
// started (and u.Started, the task its Begin started, unless 0), and, with
// u.Ended, closes the session's row if a Begin made it and nothing settled
// it: in one transaction, retried while the store refuses. A Begin given up
// after an attempt whose commit's answer was lost may have made the row
// unseen; left open, it showed a session running that never ran until the
// next start closed it as orphaned. The transaction applied again (its own
// answer lost) finds the row closed and the claims gone: once.
func (s *Settler) Release(ctx context.Context, u runner.Unstarted, wait func(error)) error {
	var ended *store.SessionRecord
	if u.Ended != nil {
		row := sessionRow(*u.Ended)
		ended = &row
	}
	_, err := s.retry(ctx, "return what session "+u.SessionID+" claimed", wait, nil, func() (Result, error) {
		return s.group().apply(ctx, s, func(ctx context.Context, tx *sql.Tx) (Result, error) {
			return Result{}, s.releaseTx(ctx, tx, u.SessionID, u.Started, ended)
		})
	})
	return err
}

// releaseTx is Release's work in tx.
func (s *Settler) releaseTx(ctx context.Context, tx *sql.Tx, id string, started int64, ended *store.SessionRecord) error {
	if ended != nil {
		if err := s.DB.SettleUnstartedTx(ctx, tx, *ended, s.now()); err != nil {
			return fmt.Errorf("close session %s, which never started: %w", id, err)
		}
	}
	if s.Mail != nil {
		if _, err := s.Mail.UnconsumeTx(ctx, tx, id); err != nil {
			return fmt.Errorf("return mail of session %s: %w", id, err)
		}
	}
	if s.Tasks != nil {
		if err := s.Tasks.UnclaimTx(ctx, tx, id, started); err != nil {
			return fmt.Errorf("return the task of session %s: %w", id, err)
		}
	}
	return nil
}

// Stopped returns the tasks of an agent that stopped to the board: orphaned
// (a retry) when the stop was the work's failure, else given back without
// a retry (taskboard.GiveBack).
func (s *Settler) Stopped(ctx context.Context, agent, reason string, failed bool, wait func(error)) error {
	if s.Tasks == nil {
		return nil
	}
	moved, err := retry(ctx, s, "requeue the tasks of "+agent, wait, nil, func() ([]taskboard.Task, error) {
		var moved []taskboard.Task
		var err error
		if failed {
			moved, err = s.Tasks.Orphan(ctx, agent, reason)
		} else {
			_, err = s.Tasks.GiveBack(ctx, agent, reason)
		}
		if err != nil {
			return nil, fmt.Errorf("requeue the tasks of %s: %w", agent, err)
		}
		return moved, nil
	})
	if err == nil && len(moved) > 0 && s.Orphaned != nil {
		s.Orphaned(agent, reason, moved)
	}
	return err
}

// Recovered is one session whose outcome restart recovery applied.
type Recovered struct {
	Session store.SessionRecord
	Result  Result
}

// Recover applies the outcomes that a killed daemon wrote to its sessions'
// logs but not to the store: every unsettled session of agents (every
// agent's when nil) whose log ends with an outcome record. Call it at
// daemon start, before any agent runs and before orphaned sessions are
// closed; the sessions it does not settle are the orphans. A record the
// store refuses for good (one this version cannot apply, say a newer
// swarmd's) is recorded in part, as Settle records it (settleInPart), and
// one refused even in part is logged and left to the orphans: a start that
// failed on it would fail every time. GaveUp is told of a task a recovered
// verdict left FAILED for good, as Settle tells it, once that outcome is
// committed: a session recovered once is settled, and never again.
func (s *Settler) Recover(ctx context.Context, agents []string) ([]Recovered, error) {
	open, err := s.DB.UnsettledSessions(ctx, agents)
	if err != nil {
		return nil, fmt.Errorf("recover outcomes: %w", err)
	}
	var out []Recovered
	for _, ss := range open {
		if ss.LogPath == "" {
			continue
		}
		b, ok, err := logs.ReadOutcome(ss.LogPath)
		if err != nil {
			s.logger().Warn("read a session's outcome from its log", zap.String("session", ss.SessionID), zap.Error(err))
			continue
		}
		if !ok {
			continue
		}
		var rec Record
		if err := json.Unmarshal(b, &rec); err != nil || rec.Session.SessionID != ss.SessionID {
			s.logger().Warn("a session's log ends with an unreadable outcome", zap.String("session", ss.SessionID),
				zap.String("log", ss.LogPath), zap.Error(err))
			continue
		}
		var waited time.Duration
		since := time.Now() // the board's clock, before any attempt (as Settle's)
		res, err := s.record(ctx, "recover session "+ss.SessionID, rec, nil, &waited)
		if err != nil {
			if !s.forGood(ctx, err) {
				return out, fmt.Errorf("recover outcomes: %w", err)
			}
			// A record the store refuses for good, even in part: failing
			// here would fail every start. The session is left unsettled,
			// for the orphan pass to close, as one whose log holds no
			// outcome.
			s.logger().Error("a session's outcome in its log cannot be recorded: the session is closed as orphaned",
				zap.String("session", ss.SessionID), zap.String("log", ss.LogPath), zap.Error(err))
			continue
		}
		s.tellGaveUp(ctx, rec, &res, since, waited, nil)
		out = append(out, Recovered{Session: rec.Session, Result: res})
	}
	return out, nil
}

func (s *Settler) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Settler) logger() *zap.Logger {
	if s.Logger == nil {
		return zap.NewNop()
	}
	return s.Logger
}

// Compile-time checks: the store's types satisfy the interfaces, and the
// Settler the runner's.
var (
	_ Mail           = (*mailbox.Mailbox)(nil)
	_ Tasks          = (*taskboard.Board)(nil)
	_ runner.Settler = (*Settler)(nil)
)

// taskRead is a session's task as read with its settlement's write (Tasks'
// ReadTx), or why it could not be.
type taskRead struct {
	t   taskboard.Task
	err error
}
