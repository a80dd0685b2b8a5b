// Package term is the CLI's local terminal handling for interactive
// sessions: raw mode that is always restored, and a
// remotecommand.TerminalSizeQueue fed by SIGWINCH (as kubectl's
// k8s.io/kubectl/pkg/util/term). It is kept out of the library, which never
// touches the process's terminal.
package term

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	mterm "github.com/moby/term"
	"k8s.io/client-go/tools/remotecommand"
)

// Fd returns the file descriptor of s and whether it is a terminal. s is
// typically os.Stdin; anything without a file descriptor is not a terminal.
func Fd(s any) (uintptr, bool) {
	return mterm.GetFdInfo(s)
}

// Raw is a terminal in raw mode.
type Raw struct {
	fd    uintptr
	state *mterm.State
	once  sync.Once
	err   error
}

// MakeRaw puts the terminal fd in raw mode (no echo, no line editing, no
// signals from Ctrl-C: every key goes to the remote side). Call Restore
// when done; it is safe to call more than once.
func MakeRaw(fd uintptr) (*Raw, error) {
	if !mterm.IsTerminal(fd) {
		return nil, fmt.Errorf("file descriptor %d is not a terminal", fd)
	}
	// Not mterm.SetRawTerminal: it installs a SIGINT handler that exits the
	// process, which would skip the caller's cleanup (the pod's deletion).
	state, err := mterm.MakeRaw(fd)
	if err != nil {
		return nil, fmt.Errorf("setting the terminal to raw mode: %w", err)
	}
	return &Raw{fd: fd, state: state}, nil
}

// Restore puts the terminal back as MakeRaw found it. Later calls return the
// first call's error.
func (r *Raw) Restore() error {
	r.once.Do(func() {
		if err := mterm.RestoreTerminal(r.fd, r.state); err != nil {
			r.err = fmt.Errorf("restoring the terminal: %w", err)
		}
	})
	return r.err
}

// Size returns the size of the terminal fd.
func Size(fd uintptr) (remotecommand.TerminalSize, error) {
	ws, err := mterm.GetWinsize(fd)
	if err != nil {
		return remotecommand.TerminalSize{}, fmt.Errorf("reading the terminal size: %w", err)
	}
	if ws.Width == 0 || ws.Height == 0 {
		return remotecommand.TerminalSize{}, errors.New("the terminal reports a zero size")
	}
	return remotecommand.TerminalSize{Width: ws.Width, Height: ws.Height}, nil
}

// SizeQueue is a remotecommand.TerminalSizeQueue that delivers the
// terminal's size first, then its new size after each SIGWINCH. Only the
// latest pending size is kept. Next returns nil once the context given to
// NewSizeQueue is done.
type SizeQueue struct {
	ctx   context.Context
	sizes chan remotecommand.TerminalSize
}

var _ remotecommand.TerminalSizeQueue = (*SizeQueue)(nil)

// NewSizeQueue watches SIGWINCH for the terminal fd until ctx is done. The
// initial size is queued at once (when it can be read).
func NewSizeQueue(ctx context.Context, fd uintptr) *SizeQueue {
	q := &SizeQueue{ctx: ctx, sizes: make(chan remotecommand.TerminalSize, 1)}
	if s, err := Size(fd); err == nil {
		q.put(s)
	}
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	go func() {
		defer signal.Stop(winch)
		for {
			select {
			case <-ctx.Done():
				return
			case <-winch:
				if s, err := Size(fd); err == nil {
					q.put(s)
				}
			}
		}
	}()
	return q
}

// put queues s, replacing a size not yet taken.
func (q *SizeQueue) put(s remotecommand.TerminalSize) {
	for {
		select {
		case q.sizes <- s:
			return
		default:
		}
		select {
		case <-q.sizes:
		default:
		}
	}
}

// Next blocks until the terminal size changes (or the first size is
// available) and returns it; nil when the queue's context is done.
func (q *SizeQueue) Next() *remotecommand.TerminalSize {
	select {
	case s := <-q.sizes:
		return &s
	case <-q.ctx.Done():
		return nil
	}
}
