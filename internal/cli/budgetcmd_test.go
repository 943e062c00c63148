package cli

import "testing"

// TestBudgetRequestAmounts: an amount is US dollars from 0 to a billion;
// anything else is refused, naming it, before the daemon is asked.
func TestBudgetRequestAmounts(t *testing.T) {
	for _, ok := range []string{"0", "7.50", "25", "1e9"} {
		if req, err := budgetRequest([]string{"alice", ok}, false, false); err != nil || req.Scope != "alice" {
			t.Errorf("budget set alice %s: %+v, %v", ok, req, err)
		}
	}
	for amount, want := range map[string]string{
		"-5":    `budget set: "-5" is not an amount of US dollars, 0 or more (such as 25 or 7.50)`,
		"NaN":   `budget set: "NaN" is not an amount of US dollars, 0 or more (such as 25 or 7.50)`,
		"1e300": "budget set: 1e300 US dollars is over the $1000000000.00 limit of a budget (for no limit: --clear)",
	} {
		_, err := budgetRequest([]string{"alice", amount}, false, false)
		wantUsage(t, err, want)
	}
}
