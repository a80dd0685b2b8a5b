package spool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CreateGrace is how long Stop waits for a directory that holds only some
// of a spool's files to become a spool: an agent writes them within
// microseconds of creating the directory.
const CreateGrace = 2 * time.Second

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
// A directory that is not a spool (see Exists) is refused at once; one
// that holds only some of a spool's files (its agent is creating it) is
// looked at again for up to CreateGrace.
//
// Errors: dir does not exist or is not a spool (wrapping ErrNotFound), its
// agent is gone without an exit status (wrapping ErrAgentGone: the
// command's outcome is unknown),
// the signal failed, ctx's end.
func Stop(ctx context.Context, dir string, poll time.Duration) error {
	if poll <= 0 {
		poll = DefaultPollInterval
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	signalled := false
	var incomplete time.Time // when dir was first seen incomplete
	for {
		switch st, _ := inspect(dir); st {
		case missing, foreign:
			return notSpool(dir, st)
		case creating:
			if incomplete.IsZero() {
				incomplete = time.Now()
			} else if time.Since(incomplete) > CreateGrace {
				return notSpool(dir, st)
			}
		}
		if _, ended := ReadExit(dir); ended {
			return nil
		}
		// Without PIDFile, dir is being created: look again.
		if pid, start, ok := readPID(dir); ok {
			if !runsSpool(pid, start, dir) {
				if _, ended := ReadExit(dir); ended { // it ended meanwhile
					return nil
				}
				return fmt.Errorf("spool: %s: %w (PID %d)", dir, ErrAgentGone, pid)
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

// readPID returns the PID recorded in dir's PIDFile, and its start time
// (0 when not recorded).
func readPID(dir string) (pid int, start uint64, ok bool) {
	b, err := os.ReadFile(filepath.Join(dir, PIDFile))
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, 0, false
	}
	pid, err = strconv.Atoi(f[0])
	if err != nil || pid <= 0 {
		return 0, 0, false
	}
	if len(f) > 1 {
		start, _ = strconv.ParseUint(f[1], 10, 64)
	}
	return pid, start, true
}

// startTime is process pid's start time (field 22 of /proc/PID/stat), and
// false for a process that is gone or a zombie.
func startTime(pid int) (uint64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || f[0] == "Z" {
		return 0, false
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	return start, err == nil
}

// runsSpool reports whether process pid is the spool's agent: when its start
// time was recorded, a live process that started then (the agent may have
// got its command line after its start: a warm agent); else a live process
// (not a zombie: its command line is empty then) with dir among its
// arguments, as the agent running the spool's command has (`--spool DIR`).
func runsSpool(pid int, start uint64, dir string) bool {
	if start > 0 {
		got, ok := startTime(pid)
		return ok && got == start
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	return slices.Contains(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), dir)
}
