package merge

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/swarmd/swarmd/internal/store"
)

// Where the target was last known is kept in the store too (merge_target,
// one row per clone and target), so that a move nobody looked at before the
// daemon stopped (or was killed), or one made while no daemon ran, is
// recorded at the next start rather than taken for the baseline. The row is
// written with what makes the queue know a tip, in the same transaction:
//
//   - the queue's merges (finishBatch: the tip it moved the target to),
//     and the move it is about to make (beginBatch: pending, from the batch's
//     target to its last candidate), so that a move whose record was cut
//     off (the daemon killed between the ref's move and finishBatch) is
//     known as the queue's;
//   - a move someone else made, with its target_moved event (Record; the
//     queue's own write, when it built on a move nobody had claimed);
//   - the daemon's own moves for the queue (Taking, then Took: a follow of
//     the remote's target, uncounted merges set aside);
//   - the baseline at start (Settle), with the events of what it found.
//
// Writes are ordered by the queue's count of its changes (owned.gen): a
// look's write that commits after the queue's later merge does not take
// the row back.

// MoveReporter words the target_moved events the queue records itself, and
// is told of them once they are committed (the daemon logs and counts
// them).
type MoveReporter interface {
	// Reason is m's kind (advanced, rewound, moved) and its event's
	// reason; seen says when it was seen.
	Reason(ctx context.Context, m Move, seen string) (kind, reason string)
	// Recorded is called once m's event is committed.
	Recorded(m Move, kind, reason string)
}

// known is a clone's row of merge_target.
type known struct {
	tip, pendingFrom, pendingTo string
}

// movedEvent is a target_moved event to record.
type movedEvent struct {
	m            Move
	kind, reason string
}

// tipWrite is a tip the queue knows from now on, to be written with the
// queue's records: gen is the queue's count after it, events the moves
// someone else made that it found.
type tipWrite struct {
	tip    string
	gen    uint64
	events []movedEvent
}

// tracks reports whether the store keeps this clone's row.
func (s *Store) tracks() bool { return s.clone != "" }

func (s *Store) readKnown(ctx context.Context, q querier) (known, bool, error) {
	var k known
	err := q.QueryRowContext(ctx, `SELECT tip, pending_from, pending_to FROM merge_target WHERE clone = ? AND into_branch = ?`,
		s.clone, s.into).Scan(&k.tip, &k.pendingFrom, &k.pendingTo)
	if errors.Is(err, sql.ErrNoRows) {
		return known{}, false, nil
	}
	if err != nil {
		return known{}, false, fmt.Errorf("merge queue: read where %s was last known: %w", s.into, err)
	}
	return k, true, nil
}

// writeTip makes w.tip the known tip (unless a later change of the
// queue's is written already) and records w's events, in tx.
func (s *Store) writeTip(ctx context.Context, tx *sql.Tx, w *tipWrite) error {
	if w == nil || !s.tracks() {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `UPDATE merge_target SET tip = ?, gen = ?, pending_from = '', pending_to = '', updated_at = ?
		WHERE clone = ? AND into_branch = ? AND gen < ?`, w.tip, int64(w.gen), s.stamp(), s.clone, s.into, int64(w.gen)); err != nil {
		return fmt.Errorf("merge queue: record %s at %s: %w", s.into, short(w.tip), err)
	}
	return s.movedEvents(ctx, tx, w.events)
}

// writePending records the move from to to as begun, in tx.
func (s *Store) writePending(ctx context.Context, tx *sql.Tx, from, to string) error {
	if !s.tracks() {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `UPDATE merge_target SET pending_from = ?, pending_to = ?, updated_at = ?
		WHERE clone = ? AND into_branch = ?`, from, to, s.stamp(), s.clone, s.into); err != nil {
		return fmt.Errorf("merge queue: record the move of %s to %s: %w", s.into, short(to), err)
	}
	return nil
}

// dropPending forgets the move to to as begun (writePending), in tx, while
// it is still the one recorded: the batch that would have made it ended
// without moving the target (a red gate, a rebuild, a stop). Kept, it would
// make a start that finds the target at to, or past it, take that for the
// queue's own move cut off before its record: anyone who moved the target
// onto a candidate the gate failed would go unreported.
func (s *Store) dropPending(ctx context.Context, tx *sql.Tx, to string) error {
	if !s.tracks() || to == "" {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `UPDATE merge_target SET pending_from = '', pending_to = '', updated_at = ?
		WHERE clone = ? AND into_branch = ? AND pending_to = ?`, s.stamp(), s.clone, s.into, to); err != nil {
		return fmt.Errorf("merge queue: forget the move of %s to %s: %w", s.into, short(to), err)
	}
	return nil
}

func (s *Store) movedEvents(ctx context.Context, tx *sql.Tx, evs []movedEvent) error {
	for _, ev := range evs {
		if _, err := tx.ExecContext(store.Deferred(ctx), `INSERT INTO events (at, agent, from_state, event, to_state, effect, actor, reason,
			session_id, seq) VALUES (?, ?, '', 'target_moved', '', '', 'swarmd', ?, '', 0)`, s.stamp(), LogName, oneLine(ev.reason)); err != nil {
			return fmt.Errorf("merge queue: event target_moved: %w", err)
		}
	}
	return nil
}

// Settle compares the target, as Open found it, with where the store last
// knew it to be, records each move someone else made meanwhile
// (target_moved, seen "at the daemon's start"), and makes the target's tip
// the known one: the daemon calls it once at start, before the queue runs
// or anything looks at the target. What is found:
//
//   - no row: nothing to compare with (a new store, a new clone); the
//     baseline is the tip;
//   - the known tip: nothing moved;
//   - the pending move's tip, or a tip that holds it: the queue's move
//     (or the daemon's follow) that landed with its record cut off; a
//     pending move that started where the store did not know the target
//     to be was built on someone else's move, recorded from the known tip
//     to the pending move's start; a tip past the pending one, from there;
//   - anything else: someone else's move from the known tip to it.
func (q *Queue) Settle(ctx context.Context) error {
	s := q.store
	if !s.tracks() {
		return nil
	}
	cur, gen := q.owned.now()
	var evs []movedEvent
	err := s.write(ctx, "settle the target", func(tx *sql.Tx) error {
		k, ok, err := s.readKnown(ctx, tx)
		if err != nil {
			return err
		}
		var moves []Move
		switch {
		case !ok || k.tip == cur:
		case k.pendingTo != "" && q.holdsPending(ctx, k.pendingTo, cur):
			if k.pendingFrom != k.tip {
				moves = append(moves, Move{From: k.tip, To: k.pendingFrom})
			}
			if cur != k.pendingTo {
				moves = append(moves, Move{From: k.pendingTo, To: cur})
			}
		default:
			moves = append(moves, Move{From: k.tip, To: cur})
		}
		evs = q.events(ctx, moves, "at the daemon's start")
		if err := s.movedEvents(ctx, tx, evs); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO merge_target (clone, into_branch, tip, gen, updated_at) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (clone, into_branch) DO UPDATE SET tip = excluded.tip, gen = excluded.gen, pending_from = '', pending_to = '',
			updated_at = excluded.updated_at`, s.clone, s.into, cur, int64(gen), s.stamp())
		return err
	})
	if err != nil {
		return fmt.Errorf("merge queue: settle %s at %s: %w", q.opts.Into, short(cur), err)
	}
	q.recorded(evs)
	return nil
}

// holdsPending reports whether tip is the pending move's, or holds it.
func (q *Queue) holdsPending(ctx context.Context, pending, tip string) bool {
	if tip == pending {
		return true
	}
	ok, err := q.repo.isAncestor(ctx, pending, tip)
	return err == nil && ok
}

// events words moves as events seen as seen.
func (q *Queue) events(ctx context.Context, moves []Move, seen string) []movedEvent {
	evs := make([]movedEvent, 0, len(moves))
	for _, m := range moves {
		kind, reason := "moved", fmt.Sprintf("%s moved from %.12s to %.12s by someone other than the merge queue, seen %s", q.opts.Into, m.From, m.To, seen)
		if q.opts.Moves != nil {
			kind, reason = q.opts.Moves.Reason(ctx, m, seen)
		}
		evs = append(evs, movedEvent{m: m, kind: kind, reason: reason})
	}
	return evs
}

// recorded tells the reporter of committed events.
func (q *Queue) recorded(evs []movedEvent) {
	if q.opts.Moves == nil {
		return
	}
	for _, ev := range evs {
		q.opts.Moves.Recorded(ev.m, ev.kind, ev.reason)
	}
}

// Record records s, a move someone else made that Claim took, as a
// target_moved event with reason, and its tip as known, in one
// transaction. A found move (Found) is recorded with found set: its tip is
// known once the row is still where it started (the queue's own write of
// the move it built on it failed).
func (q *Queue) Record(ctx context.Context, m Move, claimed Sighting, found bool, reason string) error {
	s := q.store
	ev := []movedEvent{{m: m, reason: reason}}
	return s.write(ctx, "record a move of the target", func(tx *sql.Tx) error {
		if err := s.movedEvents(ctx, tx, ev); err != nil {
			return err
		}
		if !s.tracks() {
			return nil
		}
		var err error
		if found {
			_, err = tx.ExecContext(ctx, `UPDATE merge_target SET tip = ?, updated_at = ? WHERE clone = ? AND into_branch = ? AND tip = ?`,
				m.To, s.stamp(), s.clone, s.into, m.From)
		} else {
			gen := int64(claimed.gen + 1) // the claim's change
			_, err = tx.ExecContext(ctx, `UPDATE merge_target SET tip = ?, gen = ?, updated_at = ? WHERE clone = ? AND into_branch = ? AND gen < ?`,
				m.To, gen, s.stamp(), s.clone, s.into, gen)
		}
		return err
	})
}

// Taking records that the daemon is about to move the target from old to
// tip for the queue (the remote's target taken, uncounted merges set
// aside): a start that finds the target at tip knows the move as the
// daemon's own, whether or not Took recorded it.
//
// The move is pending in memory too, from now until Took (or NotTaken):
// a look at the target between the daemon's move and Took (a session's
// end, the watch) sees it as the queue's, as it does the queue's own
// advance, instead of reporting it as someone else's.
func (q *Queue) Taking(ctx context.Context, old, tip string) error {
	q.owned.advancing(tip)
	s := q.store
	if !s.tracks() {
		return nil
	}
	err := s.write(ctx, "record a move of the target begun", func(tx *sql.Tx) error {
		return s.writePending(ctx, tx, old, tip)
	})
	if err != nil {
		q.owned.done()
	}
	return err
}

// NotTaken forgets a move Taking began that the daemon did not make (the
// target could not be fast-forwarded).
func (q *Queue) NotTaken() { q.owned.done() }

// Took records a move of the target from old to tip that the daemon made
// for the queue (Taking before it): not someone else's. An old the queue
// did not know is someone else's move, as for the queue's own moves: it is
// recorded with it, or left to the next look when the store refuses.
func (q *Queue) Took(ctx context.Context, old, tip string) error {
	if !q.store.tracks() {
		q.owned.moved(old, tip)
		return nil
	}
	f, gen := q.owned.move(old, tip)
	w := &tipWrite{tip: tip, gen: gen}
	if f != nil {
		w.events = q.events(ctx, []Move{*f}, "as the daemon took the remote's "+q.opts.Into)
	}
	err := q.store.write(ctx, "record the target taken", func(tx *sql.Tx) error { return q.store.writeTip(ctx, tx, w) })
	if err != nil {
		if f != nil {
			q.owned.addFound(*f)
		}
		return err
	}
	q.recorded(w.events)
	return nil
}

// KnownTips are the tips of into the store knows, by clone (merge_target).
func (s *Store) KnownTips(ctx context.Context, into string) (map[string]string, error) {
	rows, err := s.db.ReadSQL().QueryContext(ctx, `SELECT clone, tip FROM merge_target WHERE into_branch = ?`, into)
	if err != nil {
		return nil, fmt.Errorf("merge queue: read where %s was last known: %w", into, err)
	}
	defer rows.Close()
	tips := map[string]string{}
	for rows.Next() {
		var clone, tip string
		if err := rows.Scan(&clone, &tip); err != nil {
			return nil, fmt.Errorf("merge queue: read where %s was last known: %w", into, err)
		}
		tips[clone] = tip
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("merge queue: read where %s was last known: %w", into, err)
	}
	return tips, nil
}

// SetKnownTip makes tip the known tip of clone's into, with no move
// pending: a restored store's, whose target the queue's own merges moved
// after the backup (else the next start would record them as a move
// someone else made).
func (s *Store) SetKnownTip(ctx context.Context, clone, into, tip string) error {
	return s.write(ctx, "set where "+into+" is known", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE merge_target SET tip = ?, pending_from = '', pending_to = '', updated_at = ?
			WHERE clone = ? AND into_branch = ?`, tip, s.stamp(), clone, into)
		return err
	})
}
