package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	ucli "github.com/urfave/cli/v2"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/nodeexec/nodeexec/internal/asciicast"
	"github.com/nodeexec/nodeexec/nodeexec"
)

// shell --record: the session in asciinema's asciicast v2 format.

func shellRecordFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "record", Usage: "write the session to `FILE` in asciicast v2 (replay it with asciinema play FILE): what the terminal printed and its resizes, with their times; created with mode 0600, refused when it exists (see --force)"},
		&ucli.BoolFlag{Name: "record-input", Usage: "with --record, also record what is typed (off by default: a password typed at a prompt that does not echo it would be in the file)"},
		&ucli.BoolFlag{Name: "force", Usage: "with --record, overwrite an existing file"},
	}
}

// recordOptions are shell's --record flags, checked.
type recordOptions struct {
	path  string
	input bool
	force bool
}

// checkRecordFlags checks --record, --record-input and --force without
// creating anything: the file must not exist (unless --force, and then it
// must be a regular file) and its directory must exist and be writable.
func checkRecordFlags(c *ucli.Context) (recordOptions, error) {
	o := recordOptions{path: c.String("record"), input: c.Bool("record-input"), force: c.Bool("force")}
	if o.path == "" {
		switch {
		case c.IsSet("record"):
			return o, errors.New("--record: empty file name: give a path, e.g. --record session.cast")
		case o.input:
			return o, errors.New("--record-input records into the --record file: give --record FILE too")
		case o.force:
			return o, errors.New("--force overwrites the --record file: give --record FILE too")
		}
		return o, nil
	}
	switch st, err := os.Stat(o.path); {
	case err == nil && st.IsDir():
		return o, fmt.Errorf("--record %s: is a directory: give a file name in it", o.path)
	case err == nil && !o.force:
		return o, fmt.Errorf("--record %s: the file exists: give --force to overwrite it, or another path", o.path)
	case err == nil && !st.Mode().IsRegular():
		return o, fmt.Errorf("--record %s: not a regular file (%s): give another path", o.path, st.Mode().Type())
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return o, fmt.Errorf("--record %s: %w", o.path, err)
	}
	dir := filepath.Dir(o.path)
	if st, err := os.Stat(dir); err != nil {
		return o, fmt.Errorf("--record %s: its directory: %w", o.path, err)
	} else if !st.IsDir() {
		return o, fmt.Errorf("--record %s: %s is not a directory", o.path, dir)
	}
	if err := syscall.Access(dir, 2 /* W_OK */); err != nil {
		return o, fmt.Errorf("--record %s: cannot create files in %s: %w", o.path, dir, err)
	}
	return o, nil
}

// shellRecording is a session being recorded.
type shellRecording struct {
	path string
	f    *os.File
	w    *asciicast.Writer
}

// startRecording creates the --record file (mode 0600; O_EXCL unless
// --force) and writes its header: the terminal's size (80x24 without a
// terminal), the start, the command, a title naming the node and the
// caller's TERM. It then routes req's output (and with --record-input its
// input) through the recording; sizes records the terminal's resizes.
func startRecording(o recordOptions, req *nodeexec.Request, size remotecommand.TerminalSize, now func() time.Time) (*shellRecording, error) {
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if o.force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(o.path, flags, 0o600)
	if err != nil {
		return nil, fmt.Errorf("--record %s: %w", o.path, err)
	}
	if size.Width == 0 || size.Height == 0 {
		size = remotecommand.TerminalSize{Width: 80, Height: 24}
	}
	h := asciicast.Header{
		Width:   int(size.Width),
		Height:  int(size.Height),
		Command: strings.Join(req.Command, " "),
		Title:   "nodeexec shell " + req.Node,
	}
	if t := req.Env["TERM"]; t != "" {
		h.Env = map[string]string{"TERM": t}
	}
	w, err := asciicast.NewWriter(f, h, now)
	if err != nil {
		f.Close()
		os.Remove(o.path)
		return nil, fmt.Errorf("--record %s: %w", o.path, err)
	}
	r := &shellRecording{path: o.path, f: f, w: w}
	req.Stdout = w.Tee(req.Stdout, asciicast.Output)
	if req.Stderr != nil {
		req.Stderr = w.Tee(req.Stderr, asciicast.Output)
	}
	if o.input && req.Stdin != nil {
		req.Stdin = w.TeeReader(req.Stdin)
	}
	return r, nil
}

// sizes returns q, recording each new size as a resize event; q itself
// when r is nil (no --record).
func (r *shellRecording) sizes(q remotecommand.TerminalSizeQueue) remotecommand.TerminalSizeQueue {
	if r == nil {
		return q
	}
	return recordingSizes{q: q, w: r.w}
}

// finishIfStarted is finish, nil when r is nil (no --record).
func (r *shellRecording) finishIfStarted() error {
	if r == nil {
		return nil
	}
	return r.finish()
}

// recordingSizes records each new terminal size as a resize event.
type recordingSizes struct {
	q remotecommand.TerminalSizeQueue
	w *asciicast.Writer
}

func (s recordingSizes) Next() *remotecommand.TerminalSize {
	sz := s.q.Next()
	if sz != nil {
		_ = s.w.Resize(int(sz.Width), int(sz.Height))
	}
	return sz
}

// finish ends the recording and closes the file. The error names --record:
// a recording that could not be written in full is never reported as done.
func (r *shellRecording) finish() error {
	err := r.w.Close()
	if cerr := r.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("--record %s: the recording is incomplete: %w", r.path, err)
	}
	return nil
}
