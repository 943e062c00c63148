package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/spf13/cobra"

	"github.com/swarmd/swarmd/internal/control"
	"github.com/swarmd/swarmd/internal/tui"
	"github.com/swarmd/swarmd/internal/view"
)

// topLogTail is where a followed log starts: its last 64 KiB.
const topLogTail = 64 << 10

// onceEvents is how many events a printed frame shows.
const onceEvents = 20

// topOptions are `swarmd top`'s.
type topOptions struct {
	*operateOptions
	Once bool // one frame of plain text
}

// NewTopCommand is `swarmd top`.
func NewTopCommand(s Streams) *cobra.Command { return newTopCmd(&operateOptions{IO: s}, nil) }

// newTopCmd is `swarmd top`; runF (nil: topRun) runs it.
func newTopCmd(o *operateOptions, runF func(context.Context, *topOptions) error) *cobra.Command {
	opts := &topOptions{operateOptions: o}
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Live terminal dashboard: agents, tasks, merge queue, events",
		Long: `A full-screen dashboard of the running daemon, over its control socket: every agent with its
state and visual state (● running, ◐ stalled, ◔ spawning, ⇄ merging, □ idle, ‖ paused,
○ dead), session seq and age, time since its last output, errors and spend; the tasks by state; the
merge queue; the live event feed. It follows the daemon as things change (nothing is polled).

Keys: ↑/↓ select, enter follows the selected agent's live log (esc back), t views a task (the
selected agent's, or any id typed: its timeline, verdicts, diff stat, merge and gate log, spend; esc
back), s/S stop/start it, p/r pause/resume it, m sends it mail, / filters, ? help, q quits.

When the output is not a terminal, or TERM is dumb, it prints one frame of plain text and exits
(--once does so anywhere).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return orRun(runF, topRun)(cmd.Context(), opts) },
	}
	cmd.Flags().BoolVar(&opts.Once, "once", false, "print one frame of plain text and exit")
	cmd.Flags().StringVarP(&o.ConfigPath, "config", "c", "swarmd.yaml", "config file (names the state dir)")
	return cmd
}

func topRun(ctx context.Context, opts *topOptions) error {
	s := opts.IO
	cfg, err := opts.config()
	if err != nil {
		return err
	}
	path := cfg.SocketPath()
	cl := &view.Client{HTTP: control.NewClient(path).HTTP()}
	snap, err := cl.Snapshot(ctx)
	if err != nil {
		return topErr(err, path)
	}
	out, isFile := s.Out.(*os.File)
	dumb := s.Getenv("TERM") == "dumb"
	if opts.Once || dumb || !isFile || !IsTerminal(out) {
		return printFrame(ctx, s, control.NewClient(path), snap, dumb)
	}
	return runTop(ctx, cl, s)
}

// topErr turns "nothing listens on the socket" into the usual usage error.
func topErr(err error, path string) error {
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
		return usage(fmt.Errorf("%w (no control socket at %s)", control.ErrNoDaemon, path))
	}
	return fmt.Errorf("top: %w", err)
}

// printFrame prints the dashboard once, as plain text sized to show every
// agent, with the latest events.
func printFrame(ctx context.Context, s Streams, cc *control.Client, snap view.Snapshot, ascii bool) error {
	width := 100
	if c, err := strconv.Atoi(s.Getenv("COLUMNS")); err == nil && c >= 40 {
		width = c
	}
	m := tui.New(tui.Options{ASCII: ascii})
	next, _ := m.Update(tea.WindowSizeMsg{Width: width, Height: max(24, len(snap.Agents)+16)})
	next, _ = next.Update(tui.TickMsg(snap.At))
	next, _ = next.Update(tui.UpdateMsg{Update: view.Update{Kind: view.KindSnapshot, Snapshot: &snap}})
	err := cc.Events(ctx, "", max(0, snap.LastEventID-onceEvents), false, func(e control.Event) error {
		next, _ = next.Update(tui.UpdateMsg{Update: view.Update{Kind: view.KindEvent, Event: &e}})
		return nil
	})
	if err != nil {
		return fmt.Errorf("top: events: %w", err)
	}
	_, err = fmt.Fprintln(s.Out, next.(tui.Model).Render())
	return err
}

// runTop runs the full-screen dashboard until q.
func runTop(ctx context.Context, cl *view.Client, s Streams) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	be := &topBackend{ctx: ctx, cl: cl}
	p := tea.NewProgram(tui.New(tui.Options{Backend: be, Color: true, Tick: time.Second}),
		tea.WithContext(ctx), tea.WithInput(s.In), tea.WithOutput(s.Out))
	be.p = p
	var wg sync.WaitGroup
	wg.Go(func() { be.stream(ctx) })
	_, err := p.Run()
	cancel()
	be.StopLog()
	wg.Wait()
	be.wait()
	if errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil {
		return nil
	}
	return err
}

// topBackend connects the model to the daemon: the live stream, the log
// being followed, the actions.
type topBackend struct {
	ctx context.Context
	cl  *view.Client
	p   *tea.Program

	mu        sync.Mutex
	logCancel context.CancelFunc
	logs      sync.WaitGroup
}

// stream feeds the model the read model's updates, reconnecting after the
// last event it saw when the stream ends (the daemon restarted, the model
// fell behind).
func (b *topBackend) stream(ctx context.Context) {
	after, wait := view.NoResume, 250*time.Millisecond
	for ctx.Err() == nil {
		err := b.cl.Stream(ctx, after, 50, func(u view.Update) error {
			if u.Kind == view.KindEvent {
				after = u.Event.ID
			}
			if u.Kind == view.KindSnapshot && after == view.NoResume {
				after = u.Snapshot.LastEventID
			}
			wait = 250 * time.Millisecond
			b.p.Send(tui.UpdateMsg{Update: u})
			return nil
		})
		if ctx.Err() != nil {
			return
		}
		if err == nil || errors.Is(err, io.EOF) {
			err = errors.New("the daemon ended the stream")
		}
		b.p.Send(tui.ConnMsg{Err: err})
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

func (b *topBackend) Act(agentName, verb string) tea.Cmd {
	return func() tea.Msg {
		return tui.ActionDoneMsg{What: verb + " " + agentName, Err: b.cl.Act(b.ctx, agentName, verb, false)}
	}
}

func (b *topBackend) Mail(to, body string, urgent bool) tea.Cmd {
	return func() tea.Msg {
		_, err := b.cl.Mail(b.ctx, view.MailRequest{To: to, Body: body, Urgent: urgent})
		return tui.ActionDoneMsg{What: "mail to " + to, Err: err}
	}
}

// Task reads one task's view for the task view.
func (b *topBackend) Task(id int64) tea.Cmd {
	return func() tea.Msg {
		tv, err := b.cl.Task(b.ctx, id)
		return tui.TaskMsg{ID: id, View: tv, Err: err}
	}
}

// FollowLog follows one agent's log, ending any other follow.
func (b *topBackend) FollowLog(agentName string) tea.Cmd {
	b.StopLog()
	ctx, cancel := context.WithCancel(b.ctx)
	b.mu.Lock()
	b.logCancel = cancel
	b.mu.Unlock()
	b.logs.Go(func() {
		err := b.cl.Log(ctx, view.LogRequest{Agent: agentName, Tail: topLogTail, Follow: true}, func(c view.LogChunk) error {
			b.p.Send(tui.LogMsg{Agent: agentName, LogChunk: c})
			return nil
		})
		if ctx.Err() == nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the daemon ended the log")
			}
			b.p.Send(tui.LogEndMsg{Agent: agentName, Err: err})
		}
	})
	return nil
}

func (b *topBackend) StopLog() {
	b.mu.Lock()
	cancel := b.logCancel
	b.logCancel = nil
	b.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

func (b *topBackend) wait() { b.logs.Wait() }
