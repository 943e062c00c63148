package taskboard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/swarmd/swarmd/internal/store"
	"github.com/swarmd/swarmd/internal/task"
)

// Reserve keeps task id from being given to a new task: it stores a
// CANCELLED task under that id, titled after it, with why as its result.
// A store restored from a backup has not the tasks made since, and their
// ids are in the repository still (their lines, swarm/task/N; their merge
// commits' trailers): a new task given one of them would take over its
// line, and its merge would name the same task as the older one's. The
// board numbers a new task after the highest id it holds, so one reserved
// id keeps every id below it too. An id the board holds is ErrState.
func (b *Board) Reserve(ctx context.Context, id int64, why string) (Task, error) {
	why = strings.TrimSpace(why)
	switch {
	case id <= 0:
		return Task{}, invalidf("task id %d is not positive", id)
	case why == "" || strings.ContainsAny(why, "\r\n"):
		return Task{}, invalidf("a reserved id needs a reason, one line")
	case len(why) > MaxBodyBytes:
		return Task{}, invalidf("reason is %d bytes, over the %d-byte limit", len(why), MaxBodyBytes)
	}
	title := fmt.Sprintf("task %d, made after the backup this board was restored from", id)
	var out Task
	err := b.write(ctx, "reserve", func(tx *sql.Tx) error {
		if _, err := getTask(ctx, tx, id); err == nil {
			return fmt.Errorf("task %d is on the board: %w", id, ErrState)
		} else if !errors.Is(err, ErrNotFound) {
			return err
		}
		now := b.now()
		if _, err := tx.ExecContext(ctx, `INSERT INTO tasks (id, title, state, result, created_by, created_at, updated_at)
			VALUES (?, ?, ?, ?, 'operator', ?, ?)`, id, title, task.Cancelled.String(), why, now, now); err != nil {
			return fmt.Errorf("taskboard: reserve: %w", err)
		}
		if !b.db.IsFile() {
			// An id given explicitly does not move PostgreSQL's identity,
			// whose next value would then be a reserved one.
			if _, err := tx.ExecContext(ctx, `SELECT setval(pg_get_serial_sequence('tasks', 'id'), (SELECT MAX(id) FROM tasks))`); err != nil {
				return fmt.Errorf("taskboard: reserve: %w", err)
			}
		}
		if _, err := tx.ExecContext(store.Deferred(ctx), `INSERT INTO events (at, agent, from_state, event, to_state, effect, actor, reason,
			session_id, seq, task_id) VALUES (?, '', '', '', ?, 'task', 'operator', ?, '', 0, ?)`,
			now, task.Cancelled.String(), "reserved: "+why, id); err != nil {
			return fmt.Errorf("taskboard: reserve: %w", err)
		}
		var err error
		out, err = getTask(ctx, tx, id)
		return err
	})
	return out, err
}
