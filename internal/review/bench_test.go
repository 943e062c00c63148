package review

import (
	"strings"
	"testing"
)

// BenchmarkScan measures Scan on a structured backend's full result text
// (MaxResultText-sized) whose signal line is followed by a code fence.
func BenchmarkScan(b *testing.B) {
	text := strings.Repeat("Changed the parser and added tests.\n", 56) + "DONE: parser rewritten\n```\n"
	var s Signals
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		if s.Scan(text) != Done {
			b.Fatal("no DONE")
		}
	}
}
