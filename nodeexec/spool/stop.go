package spool

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Stop ends the command of the spool in dir for a client that gives up on
// the run (cancelled, or past its timeout), which would otherwise run on
// until the agent's own --timeout: it sends SIGTERM to the process that
// created dir (PIDFile) — the agent, which then ends its command as its
// --timeout does (SIGTERM to the command's process group, SIGKILL 5 s
// later) and records the exit status — and waits until dir holds the exit
// status, looking every poll (default DefaultPollInterval), or ctx ends. A
// run that has ended already is left alone. The process is signalled only
// if its command line names dir, so that a reused PID is never hit.
//
// Errors: dir does not exist (wrapping ErrNotFound), its agent is gone
// without an exit status (the command's outcome is unknown), the signal
// failed, ctx's end.
func Stop(ctx context.Context, dir string, poll time.Duration) error {
	if poll <= 0 {
		poll = DefaultPollInterval
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	signalled := false
	for {
		if _, ended := ReadExit(dir); ended {
			return nil
		}
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("spool: %s: %w", dir, ErrNotFound)
		}
		// Without PIDFile, dir is being created: look again.
		if pid, ok := readPID(dir); ok {
			if !runsSpool(pid, dir) {
				if _, ended := ReadExit(dir); ended { // it ended meanwhile
					return nil
				}
				return fmt.Errorf("spool: %s: its agent (PID %d) is gone without the command's exit status", dir, pid)
			}
			if !signalled {
				if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
					return fmt.Errorf("spool: %s: signalling its agent (PID %d): %w", dir, pid, err)
				}
				signalled = true
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("spool: %s: waiting for the command to end: %w", dir, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// readPID returns the PID recorded in dir's PIDFile.
func readPID(dir string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(dir, PIDFile))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid, err == nil && pid > 0
}

// runsSpool reports whether process pid runs (not a zombie: its command
// line is empty then) with dir among its arguments, as the agent running
// the spool's command does (`--spool DIR`).
func runsSpool(pid int, dir string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	return slices.Contains(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), dir)
}
