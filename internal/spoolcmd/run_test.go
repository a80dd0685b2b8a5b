package spoolcmd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAgentRun: `agent run` runs the command as it is and exits with its
// status; a command it cannot start is the shell's 127 or 126 with the
// reason, a killed one 128+N, and --timeout ends it with 124.
func TestAgentRun(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"exit status", []string{"run", "--", "sh", "-c", "exit 7"}, 7, ""},
		{"success", []string{"run", "--", "true"}, 0, ""},
		{"killed", []string{"run", "--", "sh", "-c", "kill -KILL $$"}, 137, ""},
		{"not found", []string{"run", "--", "/nonexistent/prog"}, 127, `command "/nonexistent/prog" was not found`},
		{"not in PATH", []string{"run", "--", "nosuchcommand-x"}, 127, `command "nosuchcommand-x" was not found`},
		{"not executable", []string{"run", "--", plain}, 126, "is not executable"},
		{"timeout", []string{"run", "--timeout", "200ms", "--", "sleep", "30"}, ExitTimedOut, "ended after --timeout"},
		{"no command", []string{"run"}, 2, "no command"},
		{"negative timeout", []string{"run", "--timeout", "-1s", "--", "true"}, 2, "--timeout -1s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			code, stderr := runAgentCmd(t, tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.says) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, tt.code, tt.says)
			}
			if d := time.Since(start); d > 4*time.Second {
				t.Errorf("took %s", d)
			}
		})
	}
}

// TestAgentCopy: `agent copy --to PATH` leaves an executable copy of the
// file at PATH and nothing else in its directory; a relative or unclean
// PATH and a missing directory are refused.
func TestAgentCopy(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	content := bytes.Repeat([]byte("nodeexec"), 100000)
	if err := os.WriteFile(src, content, 0o700); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	to := filepath.Join(out, "nodeexec")
	if err := copyExecutable(src, to); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(to)
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("copy: %v, %d bytes; want %d", err, len(got), len(content))
	}
	if fi, _ := os.Stat(to); fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", fi.Mode().Perm())
	}
	if entries, _ := os.ReadDir(out); len(entries) != 1 {
		t.Errorf("%d entries in the directory, want the copy alone", len(entries))
	}
	if err := copyExecutable(src, filepath.Join(out, "missing", "nodeexec")); err == nil {
		t.Error("a missing directory: no error")
	}
	for _, bad := range []string{"relative/nodeexec", "/a/../b"} {
		if code, stderr := runAgentCmd(t, "copy", "--to", bad); code != 2 || !strings.Contains(stderr, "clean absolute path") {
			t.Errorf("--to %q: exit %d, %q; want 2 naming the fix", bad, code, stderr)
		}
	}
}

// TestCopySource: `agent copy` copies nodeexec-spool when it is beside the
// running binary (the agent image), else the running binary itself (an
// image of nodeexec alone).
func TestCopySource(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "nodeexec")
	if got := copySource(self); got != self {
		t.Errorf("without nodeexec-spool: %s, want %s", got, self)
	}
	if err := os.Mkdir(filepath.Join(dir, BinaryName), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := copySource(self); got != self {
		t.Errorf("with a directory named %s: %s, want %s", BinaryName, got, self)
	}
	other := t.TempDir()
	self = filepath.Join(other, "nodeexec")
	small := filepath.Join(other, BinaryName)
	if err := os.WriteFile(small, []byte("small"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := copySource(self); got != small {
		t.Errorf("with nodeexec-spool beside: %s, want %s", got, small)
	}
}
