package runner

import "testing"

// What a prompt claimed is settled once, returned once if its session
// never started, and its new task started once.
func TestWork(t *testing.T) {
	var w work
	w.took(Prompt{Mail: 2, Task: 7, NewTask: true, Review: 9, ReviewHead: "c0ffee"})
	if !w.claimed || w.carried != 2 || w.task != 7 || w.review != 9 {
		t.Fatalf("took: %+v", w)
	}
	if got := w.startTask(); got != 7 {
		t.Errorf("startTask = %d before the begin, want 7", got)
	}
	w.begun()
	if got := w.startTask(); got != 0 {
		t.Errorf("startTask = %d after the begin, want 0: a new task starts once", got)
	}
	st := w.settlement(SessionRecord{SessionID: "s"}, "DONE")
	// The review's verdict is on the commit it was shown.
	if st.Mail != 2 || st.Task != 7 || st.Review != 9 || st.ReviewHead != "c0ffee" || st.Result != "DONE" || st.Session.SessionID != "s" {
		t.Fatalf("settlement %+v", st)
	}
	if st := w.settlement(SessionRecord{}, ""); st.Mail != 0 {
		t.Errorf("the mail was settled twice: %+v", st)
	}
	w.took(Prompt{})
	if _, ok := w.unclaim(); w.claimed || ok {
		t.Error("a prompt with no mail and no task claimed something")
	}
	w.took(Prompt{Task: 3, NewTask: true})
	started, ok := w.unclaim()
	if _, again := w.unclaim(); !ok || started != 0 || w.claimed || w.task != 0 || w.newTask || w.carried != 0 || again {
		t.Errorf("unclaim of a task never begun: %+v, started %d", w, started)
	}
	// A session that began: its new task was started with it, and goes
	// back with its claims; a task it only continued does not.
	w.took(Prompt{Task: 3, NewTask: true})
	w.startTask() // a begin that failed may have committed unseen
	if started, ok := w.unclaim(); !ok || started != 3 {
		t.Errorf("unclaim of a task its begin started: started %d, %v; want 3", started, ok)
	}
	w.took(Prompt{Task: 4})
	w.startTask()
	w.begun()
	if started, ok := w.unclaim(); !ok || started != 0 {
		t.Errorf("unclaim of a continued task: started %d, %v; want 0: it stays the agent's", started, ok)
	}
}
