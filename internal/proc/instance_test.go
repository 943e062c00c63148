package proc

import (
	"strings"
	"testing"
)

func TestInstanceAlive(t *testing.T) {
	self := newInstance([]byte{1, 2})
	buf := make([]byte, 0, 512)
	if !instanceAlive([]byte(self), buf) {
		t.Fatalf("own instance %q reported gone", self)
	}
	f := strings.SplitN(self, ".", 3)
	for _, gone := range []string{
		f[0] + ".1." + f[2], // same pid, another start time: a reused pid
		"999999999.1.ab",    // no such pid
		"0123456789abcdef",  // an older swarmd's random instance
		"x.y.z", "", "1.2",
	} {
		if instanceAlive([]byte(gone), buf) {
			t.Errorf("instance %q reported alive", gone)
		}
	}
}
