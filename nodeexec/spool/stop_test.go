//go:build linux

package spool_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/spool"
)

// fakeAgent creates a spool in a new directory and starts, in place of the
// agent, a shell that sets the given SIGTERM trap ("" for none) and loops
// (the spool's directory is in its command line, and its $0); it records
// the shell's PID in the spool's PIDFile. The shell is killed at the end.
func fakeAgent(t *testing.T, trap string) (dir string, cmd *exec.Cmd) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "run")
	if _, err := spool.Create(dir); err != nil {
		t.Fatal(err)
	}
	script := `: > "$0.ready"; while :; do sleep 0.05; done`
	if trap != "" {
		script = "trap " + trap + " TERM; " + script
	}
	cmd = exec.Command("sh", "-c", script, dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(waited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-waited })
	if err := os.WriteFile(filepath.Join(dir, spool.PIDFile), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Ready once its trap is set.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(dir + ".ready"); err == nil {
			return dir, cmd
		}
		if time.Now().After(deadline) {
			t.Fatal("the fake agent did not start")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// alive reports whether pid is a running process (not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}

func TestCreateRecordsPID(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if _, err := spool.Create(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, spool.PIDFile))
	if f := strings.Fields(string(b)); err != nil || len(f) != 2 || f[0] != strconv.Itoa(os.Getpid()) {
		t.Errorf("PIDFile holds %q (%v), want this process's PID %d", b, err, os.Getpid())
	}
}

func TestStop(t *testing.T) {
	// Bounds every Stop that should return by itself.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	t.Run("signals the agent and waits for the exit status", func(t *testing.T) {
		// As the agent: on SIGTERM it ends its command and records the status.
		dir, cmd := fakeAgent(t, `'echo 143 > "$0/exit"; exit 143'`)
		start := time.Now()
		if err := spool.Stop(ctx, dir, 10*time.Millisecond); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if code, ok := spool.ReadExit(dir); !ok || code != 143 {
			t.Errorf("exit status %d (%v) after Stop, want 143", code, ok)
		}
		if !waitGone(cmd.Process.Pid) {
			t.Error("the agent still runs after Stop")
		}
		t.Logf("stopped in %s", time.Since(start))
	})

	// A warm agent got its command line after it started: its own command
	// line does not name the spool; the start time recorded beside its PID
	// identifies it, and tells a reused PID apart.
	t.Run("by start time: an agent whose command line does not name the spool", func(t *testing.T) {
		dir, cmd := fakeAgent(t, `'echo 143 > "$1/exit"; exit 143'`)
		// A second agent, with the spool only in $1 after a placeholder $0.
		warm := exec.Command("sh", "-c", `trap 'echo 143 > "$1/exit"; exit 143' TERM; : > "$1.warm"; while :; do sleep 0.05; done`, "agent-warm", dir)
		if err := warm.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = warm.Process.Kill(); _ = warm.Wait() }()
		_ = cmd.Process.Kill()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if _, err := os.Stat(dir + ".warm"); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the warm fake agent did not start")
			}
		}
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(warm.Process.Pid) + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		_, rest, _ := strings.Cut(string(stat), ") ")
		start := strings.Fields(rest)[19]
		// The wrong start time: a reused PID, not signalled.
		if err := os.WriteFile(filepath.Join(dir, spool.PIDFile), []byte(strconv.Itoa(warm.Process.Pid)+" 1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := spool.Stop(ctx, dir, 10*time.Millisecond); err == nil || !strings.Contains(err.Error(), "gone without") || !alive(warm.Process.Pid) {
			t.Errorf("wrong start time: Stop %v, alive %v; want the agent reported gone and left alone", err, alive(warm.Process.Pid))
		}
		if err := os.WriteFile(filepath.Join(dir, spool.PIDFile), []byte(strconv.Itoa(warm.Process.Pid)+" "+start+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := spool.Stop(ctx, dir, 10*time.Millisecond); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if code, ok := spool.ReadExit(dir); !ok || code != 143 {
			t.Errorf("exit status %d (%v) after Stop, want 143", code, ok)
		}
	})

	t.Run("a run that ended is left alone", func(t *testing.T) {
		dir, cmd := fakeAgent(t, "")
		if err := os.WriteFile(filepath.Join(dir, spool.ExitFile), []byte("0\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := spool.Stop(ctx, dir, 10*time.Millisecond); err != nil {
			t.Errorf("Stop: %v", err)
		}
		if !alive(cmd.Process.Pid) {
			t.Error("Stop signalled the process of a run that had ended")
		}
	})

	t.Run("a reused PID is not signalled", func(t *testing.T) {
		dir, _ := fakeAgent(t, "")
		other := exec.Command("sleep", "60")
		if err := other.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
		if err := os.WriteFile(filepath.Join(dir, spool.PIDFile), []byte(strconv.Itoa(other.Process.Pid)), 0o600); err != nil {
			t.Fatal(err)
		}
		err := spool.Stop(ctx, dir, 10*time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), "gone without the command's exit status") {
			t.Errorf("Stop: %v, want the agent reported gone", err)
		}
		if !alive(other.Process.Pid) {
			t.Error("Stop signalled a process that does not run the spool")
		}
	})

	t.Run("an agent that does not end: until ctx ends", func(t *testing.T) {
		dir, cmd := fakeAgent(t, "''")
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		if err := spool.Stop(cctx, dir, 10*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Stop: %v, want the context's end", err)
		}
		if !alive(cmd.Process.Pid) {
			t.Error("the agent ignoring SIGTERM is gone")
		}
	})

	t.Run("no spool", func(t *testing.T) {
		if err := spool.Stop(ctx, filepath.Join(t.TempDir(), "none"), 0); !errors.Is(err, spool.ErrNotFound) {
			t.Errorf("Stop: %v, want ErrNotFound", err)
		}
	})
}

// waitGone waits up to 5 s until pid is no running process.
func waitGone(pid int) bool {
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// TestNotASpool: a directory without a spool's own files (such as /dev,
// which has stdout and stderr) is refused at once by Exists, Attach and
// Stop; one the agent is creating is waited for up to CreateGrace.
func TestNotASpool(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	devLike := t.TempDir()
	for _, f := range []string{"stdout", "stderr", "null"} {
		if err := os.WriteFile(filepath.Join(devLike, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	empty := t.TempDir()
	for _, dir := range []string{devLike, "/dev", "/proc/self", empty + "/none"} {
		start := time.Now()
		if err := spool.Stop(ctx, dir, 10*time.Millisecond); !errors.Is(err, spool.ErrNotFound) || time.Since(start) > time.Second {
			t.Errorf("Stop(%s): %v after %s, want ErrNotFound at once", dir, err, time.Since(start))
		}
		if spool.Exists(dir) {
			t.Errorf("Exists(%s) = true", dir)
		}
		if _, err := spool.Attach(ctx, dir, 0, 0, nil, nil, time.Millisecond); !errors.Is(err, spool.ErrNotFound) {
			t.Errorf("Attach(%s): %v, want ErrNotFound", dir, err)
		}
	}
	// Only a spool's files, but no PID file yet: given CreateGrace, then refused.
	partial := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(partial, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(partial, spool.StdoutFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := spool.Stop(ctx, partial, 10*time.Millisecond)
	if took := time.Since(start); !errors.Is(err, spool.ErrNotFound) || took < spool.CreateGrace || took > spool.CreateGrace+time.Second {
		t.Errorf("Stop on an incomplete spool: %v after %s, want ErrNotFound after about %s", err, took, spool.CreateGrace)
	}
}

// TestAttachAgentGone: an agent killed before it recorded the exit status
// (as a container runtime may kill an exec whose stream it lost) ends
// Attach with ErrAgentGone once what it wrote is streamed, instead of
// following the files for ever; an agent alive keeps Attach following.
func TestAttachAgentGone(t *testing.T) {
	dir, cmd := fakeAgent(t, "")
	if err := os.WriteFile(filepath.Join(dir, spool.StdoutFile), []byte("before the kill\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	var out bytes.Buffer
	if _, err := spool.Attach(ctx, dir, 0, 0, &out, io.Discard, 10*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("agent alive: Attach %v, want it to follow until ctx ends", err)
	}
	cancel()
	_ = cmd.Process.Kill()
	deadline := time.Now().Add(5 * time.Second)
	for alive(cmd.Process.Pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	out.Reset()
	start := time.Now()
	_, err := spool.Attach(t.Context(), dir, 0, 0, &out, io.Discard, 10*time.Millisecond)
	if !errors.Is(err, spool.ErrAgentGone) || out.String() != "before the kill\n" || time.Since(start) > 2*time.Second {
		t.Errorf("agent killed: Attach %v after %s, stdout %q; want ErrAgentGone at once, after the output", err, time.Since(start), out.String())
	}
}
