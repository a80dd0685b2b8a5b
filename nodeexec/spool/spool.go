// Package spool keeps a command's output and exit status on the node side of
// a run, so that a client whose exec stream was cut (the API server
// restarted, a connection between the API server and the kubelet dropped)
// can attach again and receive the rest: no byte lost, none doubled, stdout
// and stderr still apart, and the command's real exit status.
//
// The agent (`nodeexec agent nsenter|container-exec --spool DIR`) runs the
// command with its standard output and error written to DIR/stdout and
// DIR/stderr, and streams those files to its own standard output and error
// as they grow (Spool.Serve); when the command ends it writes its exit
// status to DIR/exit. A command written to a file never waits for the
// client: when the stream is cut, the command runs on and its output is kept.
// `nodeexec agent attach --spool DIR --stdout-offset N --stderr-offset M`
// (Attach) streams the files again from the offsets the client had received,
// until the exit status is there and both files are read to their end, and
// exits with that status.
//
// The agents keep their spools under one directory, DefaultParent, each in
// DefaultParent/NAME where NAME is one path element (CheckDir, CheckName):
// an agent refuses any other --spool, so that a request can neither create
// a spool elsewhere nor make Sweep look anywhere else. A directory is a
// spool only when it holds the spool's own files (its PIDFile, StdoutFile
// and StderrFile) and nothing else: Exists, Attach and Stop refuse any other
// directory at once, and Sweep removes no other directory.
//
// The files live in the agent container's own filesystem: they go with the
// agent pod (the pod backends delete theirs after the run), or, for the
// resident agents, are removed by Sweep once their run ended more than
// DefaultRetention ago. Output is kept whole on the node until then: a run
// that prints a gigabyte uses a gigabyte of the node's disk while it lasts.
//
// The package uses the standard library only and never prints.
package spool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Names of the files in a spool directory.
const (
	StdoutFile = "stdout"
	StderrFile = "stderr"
	// ExitFile holds the exit status in decimal, written (atomically, by
	// rename) once the command ended and all its output was written.
	ExitFile = "exit"
	// PIDFile holds, in decimal, the PID of the process that created the
	// spool — the agent that runs its command, which Stop signals — and,
	// after a space, its start time (field 22 of /proc/PID/stat, clock
	// ticks since boot), by which Stop knows a reused PID.
	PIDFile = "pid"
)

// Defaults.
const (
	// DefaultParent is the directory, in the agent container's filesystem,
	// under which the agents keep their spools.
	DefaultParent = "/tmp/nodeexec/spool"
	// DefaultRetention is how long after its run ended a spool is kept by a
	// resident agent before Sweep removes it; a spool whose run never wrote
	// its exit status is removed after DefaultAbandoned.
	DefaultRetention = 10 * time.Minute
	DefaultAbandoned = 24 * time.Hour
	// DefaultPollInterval is how often Attach looks for new output.
	DefaultPollInterval = 50 * time.Millisecond
)

// ErrNotFound is returned by Attach and Stop (wrapped) when dir is not a
// spool: the command never started there, its agent container was
// restarted, or dir is some other directory.
var ErrNotFound = errors.New("no spool")

// ErrBadDir is returned by CheckDir and CheckName (wrapped) for a directory
// or a name that is not one of the agents' spools: DefaultParent/NAME, NAME
// one path element.
var ErrBadDir = errors.New("not a spool directory")

// MaxNameLength bounds a spool's name, in bytes.
const MaxNameLength = 253

// CheckName checks that name can name a spool: 1 to MaxNameLength letters,
// digits, '.', '_' and '-', not starting with '.' (so neither "." nor ".."
// nor a hidden name): one path element. Pod names and the resident agents'
// random names are such names. Errors wrap ErrBadDir.
func CheckName(name string) error {
	if name == "" || len(name) > MaxNameLength || name[0] == '.' {
		return fmt.Errorf("spool name %q: %w: give 1 to %d letters, digits, '.', '_' or '-', not starting with '.'", name, ErrBadDir, MaxNameLength)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("spool name %q: %w: %q is not allowed (give letters, digits, '.', '_' or '-': one path element)", name, ErrBadDir, r)
		}
	}
	return nil
}

// Path is the directory of the spool named name: DefaultParent/name. It
// does not check name (CheckName).
func Path(name string) string { return DefaultParent + "/" + name }

// CheckDir checks that dir is a spool directory of the agents':
// DefaultParent/NAME exactly as written (no "//", "." or ".." elements, no
// trailing '/'), NAME passing CheckName. The agent refuses any other
// --spool. Errors wrap ErrBadDir and name the fix.
func CheckDir(dir string) error {
	if name, ok := strings.CutPrefix(dir, DefaultParent+"/"); ok && CheckName(name) == nil {
		return nil
	}
	return fmt.Errorf("spool directory %q: %w: give %s/NAME, NAME one path element of 1 to %d letters, digits, '.', '_' or '-', not starting with '.'",
		dir, ErrBadDir, DefaultParent, MaxNameLength)
}

// files are the names a spool directory may hold.
var files = []string{PIDFile, PIDFile + ".tmp", StdoutFile, StderrFile, ExitFile, ExitFile + ".tmp"}

// state is what a directory is to this package.
type state int

const (
	missing  state = iota // nothing there
	foreign               // not a spool: not a directory, or it holds what a spool does not
	creating              // only a spool's files, but not yet all of PIDFile, StdoutFile and StderrFile
	complete              // a spool: PIDFile, StdoutFile, StderrFile and nothing but a spool's files
)

// inspect says what dir is, without following a symbolic link at dir, and
// how many of a spool's files it holds.
func inspect(dir string) (state, int) {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return missing, 0
	}
	if err != nil || !fi.IsDir() {
		return foreign, 0
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return foreign, 0
	}
	core := 0
	for _, e := range entries {
		if !e.Type().IsRegular() || !slices.Contains(files, e.Name()) {
			return foreign, 0
		}
		switch e.Name() {
		case PIDFile, StdoutFile, StderrFile:
			core++
		}
	}
	if core == 3 {
		return complete, len(entries)
	}
	return creating, len(entries)
}

// notSpool is the error for dir of state st (not complete), wrapping ErrNotFound.
func notSpool(dir string, st state) error {
	switch st {
	case missing:
		return fmt.Errorf("spool: %s: %w", dir, ErrNotFound)
	case foreign:
		return fmt.Errorf("spool: %s: %w: it is not a directory holding only a spool's files (%s)", dir, ErrNotFound, strings.Join(files, ", "))
	default:
		return fmt.Errorf("spool: %s: %w: it lacks a spool's %s, %s or %s file", dir, ErrNotFound, PIDFile, StdoutFile, StderrFile)
	}
}

// ErrExists is returned by Create (wrapped) when dir already exists: each run
// has its own spool, and a second start of the same run must not run the
// command again.
var ErrExists = errors.New("spool exists")

// Spool is the node side of one run: see the package documentation.
type Spool struct {
	dir      string
	out, err *os.File // written by the command (through the writers)
	wake     chan struct{}

	mu       sync.Mutex
	finished bool
	code     int
}

// Create makes the spool directory dir (its parents too, mode 0700), which
// must not exist yet (else an error wrapping ErrExists), its PIDFile (the
// calling process's PID) and its empty stdout and stderr files.
func Create(dir string) (*Spool, error) {
	if dir == "" || !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("spool: directory %q: give an absolute path", dir)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("spool: %s: %w (a run starts once)", dir, ErrExists)
		}
		return nil, fmt.Errorf("spool: %w", err)
	}
	pid := strconv.Itoa(os.Getpid())
	if start, ok := startTime(os.Getpid()); ok {
		pid += " " + strconv.FormatUint(start, 10)
	}
	if err := writeAtomic(dir, PIDFile, pid); err != nil {
		return nil, err
	}
	s := &Spool{dir: dir, wake: make(chan struct{}, 1)}
	var err error
	if s.out, err = os.OpenFile(filepath.Join(dir, StdoutFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600); err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	if s.err, err = os.OpenFile(filepath.Join(dir, StderrFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600); err != nil {
		s.out.Close()
		return nil, fmt.Errorf("spool: %w", err)
	}
	return s, nil
}

// writeAtomic writes value and a newline to the file name in dir, through
// a temporary name and a rename: a reader sees all of it or nothing.
func writeAtomic(dir, name, value string) error {
	tmp := filepath.Join(dir, name+".tmp")
	if err := os.WriteFile(tmp, []byte(value+"\n"), 0o600); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	return nil
}

// Dir is the spool's directory.
func (s *Spool) Dir() string { return s.dir }

// Stdout and Stderr are the command's standard output and error: they write
// to the spool's files and never wait for a reader.
func (s *Spool) Stdout() io.Writer { return &writer{f: s.out, wake: s.wake} }
func (s *Spool) Stderr() io.Writer { return &writer{f: s.err, wake: s.wake} }

type writer struct {
	f    *os.File
	wake chan struct{}
}

func (w *writer) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if n > 0 {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	return n, err
}

// Finish records the command's exit status: it closes the output files and
// writes ExitFile (to a temporary name, then renamed). Call it once, after
// the command ended and nothing writes to Stdout or Stderr any more.
func (s *Spool) Finish(code int) error {
	errs := errors.Join(s.out.Close(), s.err.Close())
	if err := writeAtomic(s.dir, ExitFile, strconv.Itoa(code)); err != nil {
		return errors.Join(err, errs)
	}
	s.mu.Lock()
	s.finished, s.code = true, code
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	if errs != nil {
		return fmt.Errorf("spool: %w", errs)
	}
	return nil
}

func (s *Spool) exit() (int, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.code, s.finished, nil
}

// Serve copies the spool's output files to stdout and stderr as they grow,
// from their start, until Finish was called and both were copied to their
// end; it returns the exit status given to Finish and the sizes of the
// files, for the Trailer that the agent writes last. It returns early with an
// error when ctx ends or a write fails (the client's stream is gone: the
// command runs on, and its output stays in the files for Attach).
func (s *Spool) Serve(ctx context.Context, stdout, stderr io.Writer) (End, error) {
	return follow(ctx, s.dir, 0, 0, stdout, stderr, s.wake, 0, s.exit)
}

// Attach streams the spool in dir to stdout and stderr, from the offsets
// (bytes already received of each), until its command ended and both files
// were copied to their end, looking for new output every poll (default
// DefaultPollInterval); it returns the command's exit status and the
// files' sizes. Errors: dir
// is not a spool (Exists; wrapping ErrNotFound), an offset beyond what the file
// holds, its agent gone without the exit status (wrapping ErrAgentGone:
// killed, as a container runtime may kill an exec whose stream it lost;
// what it had written is streamed first), ctx's end, a failed read or
// write.
func Attach(ctx context.Context, dir string, stdoutOffset, stderrOffset int64, stdout, stderr io.Writer, poll time.Duration) (End, error) {
	if st, _ := inspect(dir); st != complete {
		return End{}, notSpool(dir, st)
	}
	if poll <= 0 {
		poll = DefaultPollInterval
	}
	return follow(ctx, dir, stdoutOffset, stderrOffset, stdout, stderr, nil, poll, func() (int, bool, error) {
		if code, ok := ReadExit(dir); ok {
			return code, true, nil
		}
		if pid, start, ok := readPID(dir); ok && !runsSpool(pid, start, dir) {
			if code, ok := ReadExit(dir); ok { // it ended meanwhile
				return code, true, nil
			}
			return 0, false, fmt.Errorf("spool: %s: %w (PID %d)", dir, ErrAgentGone, pid)
		}
		return 0, false, nil
	})
}

// ErrAgentGone is wrapped by Attach's and Stop's errors when the process
// that runs the spool's command (its PIDFile) is gone without recording the
// command's exit status: the outcome is unknown.
var ErrAgentGone = errors.New("its agent is gone without the command's exit status")

// Exists reports whether dir is a spool: a directory (not a symbolic link)
// holding the spool's PIDFile, StdoutFile and StderrFile, and no file a
// spool does not have.
func Exists(dir string) bool {
	st, _ := inspect(dir)
	return st == complete
}

// ReadExit returns the exit status recorded in dir, and whether there is one.
func ReadExit(dir string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(dir, ExitFile))
	if err != nil {
		return 0, false
	}
	code, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, false
	}
	return code, true
}

// follow copies dir's files from the offsets to the writers whenever wake
// fires or every poll, until exit reports the command ended and a copy pass
// made after that found nothing more, or exit's error (after a last copy
// pass).
func follow(ctx context.Context, dir string, outOff, errOff int64, stdout, stderr io.Writer, wake <-chan struct{}, poll time.Duration, exit func() (int, bool, error)) (End, error) {
	files := [2]struct {
		name string
		off  int64
		w    io.Writer
		f    *os.File
	}{{StdoutFile, outOff, stdout, nil}, {StderrFile, errOff, stderr, nil}}
	for i := range files {
		f, err := os.Open(filepath.Join(dir, files[i].name))
		if err != nil {
			return End{}, fmt.Errorf("spool: %w", err)
		}
		defer f.Close()
		if files[i].off < 0 {
			return End{}, fmt.Errorf("spool: %s offset %d: give a non-negative offset", files[i].name, files[i].off)
		}
		if st, err := f.Stat(); err == nil && files[i].off > st.Size() {
			return End{}, fmt.Errorf("spool: %s offset %d is beyond the %d bytes the command wrote", files[i].name, files[i].off, st.Size())
		}
		if _, err := f.Seek(files[i].off, io.SeekStart); err != nil {
			return End{}, fmt.Errorf("spool: %w", err)
		}
		files[i].f = f
	}
	var tick <-chan time.Time
	if poll > 0 {
		t := time.NewTicker(poll)
		defer t.Stop()
		tick = t.C
	}
	buf := make([]byte, 64<<10)
	for {
		code, ended, exitErr := exit() // before the pass: whatever was written before the end is copied by it
		for i := range files {
			n, err := copyAvailable(files[i].w, files[i].f, buf)
			files[i].off += n
			if err != nil {
				return End{}, err
			}
		}
		if exitErr != nil {
			return End{}, exitErr
		}
		if ended {
			return End{Code: code, Stdout: files[0].off, Stderr: files[1].off}, nil
		}
		select {
		case <-wake:
		case <-tick:
		case <-ctx.Done():
			return End{}, context.Cause(ctx)
		}
	}
}

// copyAvailable copies what f holds from its offset to its current end and
// returns how many bytes w took.
func copyAvailable(w io.Writer, f *os.File, buf []byte) (int64, error) {
	if w == nil {
		w = io.Discard
	}
	var total int64
	for {
		n, err := f.Read(buf)
		if n > 0 {
			k, werr := w.Write(buf[:n])
			total += int64(k)
			if werr != nil {
				return total, fmt.Errorf("spool: writing output: %w", werr)
			}
		}
		if errors.Is(err, io.EOF) || (err == nil && n == 0) {
			return total, nil
		}
		if err != nil {
			return total, fmt.Errorf("spool: %w", err)
		}
	}
}

// Sweep removes, under parent (the agents' DefaultParent), the spools
// whose run ended (ExitFile written) more than retention before now, and
// those without an exit status older than abandoned; it ignores what it
// cannot remove and returns how many it removed. It removes only what an
// agent created: directories (not symbolic links) with a spool's name
// (CheckName) that hold a spool's files and nothing else; any other entry of
// parent is left alone. A missing parent is no error.
func Sweep(parent string, now time.Time, retention, abandoned time.Duration) int {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return 0
	}
	removed := 0
	for _, e := range entries {
		if !e.IsDir() || CheckName(e.Name()) != nil {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		if st, n := inspect(dir); st == foreign || n == 0 {
			continue // not one of ours, or an empty directory that may not be
		}
		var old bool
		if st, err := os.Stat(filepath.Join(dir, ExitFile)); err == nil {
			old = now.Sub(st.ModTime()) > retention
		} else if info, err := e.Info(); err == nil {
			old = now.Sub(info.ModTime()) > abandoned
		}
		if old && os.RemoveAll(dir) == nil {
			removed++
		}
	}
	return removed
}
