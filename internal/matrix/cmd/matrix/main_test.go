package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	c, err := parseFlags([]string{"-columns", "1.37.1/debian,1.34.4/2.3.7", "-run", "^(TestA|TestB)$"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.columns) != 2 || c.out != "bench/matrix.json" || c.doc != "docs/compatibility.md" || c.nodes != 2 || c.timeout != 30*time.Minute {
		t.Errorf("got %+v", c)
	}
	if want := "go run ./internal/matrix/cmd/matrix -columns 1.37.1/debian,1.34.4/2.3.7 -run '^(TestA|TestB)$'"; c.command != want {
		t.Errorf("command %q, want %q", c.command, want)
	}
}

// TestParseFlagsRefused: bad input is refused naming the flag, before
// anything is built or started (parseFlags does nothing else).
func TestParseFlagsRefused(t *testing.T) {
	ok := []string{"-columns", "1.37.1/debian", "-run", "TestA"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-run", "TestA"}, "-columns is empty"},
		{[]string{"-columns", "1.37/debian", "-run", "TestA"}, "-columns: column \"1.37/debian\""},
		{[]string{"-columns", "1.37.1/containerd-2", "-run", "TestA"}, "-columns: column"},
		{[]string{"-columns", "1.37.1/debian"}, "-run is empty"},
		{[]string{"-columns", "1.37.1/debian", "-run", "Test(A"}, "-run \"Test(A\" is not a regular expression"},
		{append(ok, "-out", ""), "-out is empty"},
		{append(ok, "-logs", ""), "-logs is empty"},
		{append(ok, "-nodes", "1"), "-nodes 1"},
		{append(ok, "-timeout", "0s"), "-timeout 0s"},
		{append(ok, "extra"), "unexpected arguments"},
		{append(ok, "-nodes", "two"), "invalid value \"two\" for flag -nodes"},
	} {
		_, err := parseFlags(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFlags(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

func TestCheckModuleRoot(t *testing.T) {
	if err := checkModuleRoot("../../../.."); err != nil {
		t.Errorf("the module root: %v", err)
	}
	if err := checkModuleRoot("."); err == nil || !strings.Contains(err.Error(), "run from the root") {
		t.Errorf("a subdirectory: %v", err)
	}
}

func TestTailWriter(t *testing.T) {
	w := &tailWriter{n: 2}
	_, _ = io.WriteString(w, "a\nb\n\nc")
	_, _ = io.WriteString(w, "d\ne")
	if got := strings.Join(w.lines(), "|"); got != "b|cd|e" {
		t.Errorf("got %q", got)
	}
}

func TestLock(t *testing.T) {
	path := t.TempDir() + "/lock"
	unlock, err := lock(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	if _, err := lock(ctx, path); err == nil || !strings.Contains(err.Error(), "-lock") {
		t.Errorf("a held lock: %v, want a timeout naming -lock", err)
	}
	unlock()
	again, err := lock(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	again()
}
