package config

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkParse: a config with every section (full.yaml, one role file).
func BenchmarkParse(b *testing.B) {
	data, err := os.ReadFile("testdata/full.yaml")
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join("testdata", "full.yaml")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data, path); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseInvalid: the error path of `swarmd config validate`.
func BenchmarkParseInvalid(b *testing.B) {
	data, err := os.ReadFile("testdata/multi_errors.yaml")
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join("testdata", "multi_errors.yaml")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data, path); err == nil {
			b.Fatal("want errors")
		}
	}
}
