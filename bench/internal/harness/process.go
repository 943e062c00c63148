package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Process is a swarmd started by a harness, its output appended to a log
// file.
type Process struct {
	Cmd  *exec.Cmd
	Done chan struct{} // closed once it has exited and its log is closed
	once sync.Once
}

// StartProcess starts cmd with its standard output and error appended to
// logPath.
func StartProcess(cmd *exec.Cmd, logPath string) (*Process, error) {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	p := &Process{Cmd: cmd, Done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.Done) }()
	return p, nil
}

// Kill kills the process, unless it has exited, and waits for it.
func (p *Process) Kill() {
	p.once.Do(func() {
		select {
		case <-p.Done:
		default:
			_ = p.Cmd.Process.Signal(syscall.SIGKILL)
			<-p.Done
		}
	})
}

// Stop sends SIGTERM and waits grace for an exit 0; past it the process is
// killed.
func (p *Process) Stop(grace time.Duration) error {
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Done:
		if c := p.Cmd.ProcessState.ExitCode(); c != 0 {
			return fmt.Errorf("swarmd exited %d after SIGTERM", c)
		}
		return nil
	case <-time.After(grace):
		p.Kill()
		return errors.New("swarmd did not stop within " + grace.String() + " of SIGTERM")
	}
}
