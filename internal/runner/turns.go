package runner

import "github.com/swarmd/swarmd/internal/backend"

// Auditor records the tool calls of every session (swarmd audit). It is
// called from a session's output goroutine, so it must be quick: enqueue,
// never wait for a disk.
type Auditor interface {
	ToolCall(ToolRecord)
}

// ToolRecord is one tool call of one session.
type ToolRecord struct {
	Agent     string
	SessionID string
	Seq       uint32
	Call      backend.ToolCall
}

// onTool is the session's Spec.OnTool: every call goes to the Auditor.
func (r *Runner) onTool() func(backend.ToolCall) {
	a := r.cfg.Audit
	if a == nil {
		return nil
	}
	rec := ToolRecord{Agent: r.cfg.Name, SessionID: r.seq.id, Seq: r.seq.n}
	return func(c backend.ToolCall) {
		rec := rec
		rec.Call = c
		a.ToolCall(rec)
	}
}
