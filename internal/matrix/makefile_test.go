package matrix

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMakefileTests: every test MATRIX_TESTS names in the Makefile is a
// top-level test of ./e2e, so that a rename does not silently drop it from
// the matrix, and the regex is anchored so that it selects no other.
func TestMakefileTests(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^MATRIX_TESTS \?= (.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("no MATRIX_TESTS ?= line in the Makefile")
	}
	re := strings.ReplaceAll(string(m[1]), "$$", "$")
	if !strings.HasPrefix(re, "^(") || !strings.HasSuffix(re, ")$") {
		t.Errorf("MATRIX_TESTS %q is not ^(A|B|...)$", re)
	}
	files, err := filepath.Glob("../../e2e/*_test.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no e2e tests found: %v", err)
	}
	var src strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	names := strings.Split(strings.TrimSuffix(strings.TrimPrefix(re, "^("), ")$"), "|")
	if len(names) < 5 {
		t.Errorf("MATRIX_TESTS names %d tests: %v", len(names), names)
	}
	for _, n := range names {
		if !strings.Contains(src.String(), "\nfunc "+n+"(t *testing.T) {") {
			t.Errorf("MATRIX_TESTS names %s, which is not a test in e2e/", n)
		}
	}
}
