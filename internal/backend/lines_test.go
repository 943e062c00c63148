package backend

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// splitLines is the specification LineSplitter must match however the input
// is chunked.
func splitLines(data []byte, max int) []string {
	var out []string
	parts := bytes.Split(data, []byte{'\n'})
	for i, p := range parts {
		if i == len(parts)-1 && len(p) == 0 {
			break // nothing after the last newline
		}
		if len(p) > max {
			out = append(out, string(p[:max]))
			continue
		}
		out = append(out, string(bytes.TrimSuffix(p, []byte{'\r'})))
	}
	return out
}

func collect(max int, chunks ...[]byte) []string {
	var got []string
	l := NewLineSplitter(max, func(line []byte) { got = append(got, string(line)) })
	for _, c := range chunks {
		if n, err := l.Write(c); n != len(c) || err != nil {
			panic("short write")
		}
	}
	l.Flush()
	return got
}

func TestLineSplitter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		max    int
		chunks []string
		want   []string
	}{
		{"one write", 0, []string{"a\nbb\n\nccc"}, []string{"a", "bb", "", "ccc"}},
		{"split everywhere", 0, []string{"a", "b\n", "\n", "c", "d"}, []string{"ab", "", "cd"}},
		{"crlf", 0, []string{"a\r\n", "b\r", "\n", "\r"}, []string{"a", "b", ""}},
		{"long line in one write", 3, []string{"abcdef\nxy\n"}, []string{"abc", "xy"}},
		{"long line across writes", 3, []string{"ab", "cd", "ef", "\nxy"}, []string{"abc", "xy"}},
		{"exactly max", 3, []string{"abc", "\n", "abc\r\n"}, []string{"abc", "abc"}},
		{"cr counted in max", 3, []string{"ab\r", "x\n"}, []string{"ab\r"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var chunks [][]byte
			for _, c := range tc.chunks {
				chunks = append(chunks, []byte(c))
			}
			max := tc.max
			if max == 0 {
				max = DefaultMaxLine
			}
			if got := collect(tc.max, chunks...); !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			if want := splitLines([]byte(strings.Join(tc.chunks, "")), max); !slices.Equal(want, tc.want) {
				t.Fatalf("reference %q disagrees with the table %q", want, tc.want)
			}
		})
	}
}

func FuzzLineSplitter(f *testing.F) {
	f.Add([]byte("a\nbb\r\n\nccc"), []byte{1, 2, 3}, uint8(0))
	f.Add([]byte(`{"type":"result","is_error":false}`+"\n"), []byte{5}, uint8(8))
	f.Add([]byte("abcdef\r\nx"), []byte{0, 7}, uint8(3))
	f.Fuzz(func(t *testing.T, data, cuts []byte, maxByte uint8) {
		max := int(maxByte) % 65 // 0 means the default
		var chunks [][]byte
		rest := data
		for i := 0; len(rest) > 0; i++ {
			n := len(rest)
			if len(cuts) > 0 {
				n = min(n, 1+int(cuts[i%len(cuts)])%17)
			}
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
		}
		ref := max
		if ref == 0 {
			ref = DefaultMaxLine
		}
		got, want := collect(max, chunks...), splitLines(data, ref)
		if !slices.Equal(got, want) {
			t.Fatalf("max %d chunks %q: got %q, want %q", max, chunks, got, want)
		}
	})
}
