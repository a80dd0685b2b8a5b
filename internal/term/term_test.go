package term

import (
	"context"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/client-go/tools/remotecommand"
)

// openPTY opens a pseudo-terminal pair; the test uses the replica side as
// its terminal and sets sizes on the primary side.
func openPTY(t *testing.T) (primary, replica *os.File) {
	t.Helper()
	p, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	if err := unix.IoctlSetPointerInt(int(p.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(p.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return p, r
}

func setSize(t *testing.T, f *os.File, w, h uint16) {
	t.Helper()
	if err := unix.IoctlSetWinsize(int(f.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: w, Row: h}); err != nil {
		t.Fatal(err)
	}
}

func TestFd(t *testing.T) {
	_, r := openPTY(t)
	if _, ok := Fd(r); !ok {
		t.Error("a pty is not a terminal")
	}
	f, err := os.CreateTemp(t.TempDir(), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, ok := Fd(f); ok {
		t.Error("a regular file is a terminal")
	}
	if _, ok := Fd(struct{}{}); ok {
		t.Error("a value without a descriptor is a terminal")
	}
}

func TestMakeRawRestore(t *testing.T) {
	_, r := openPTY(t)
	before, err := unix.IoctlGetTermios(int(r.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if before.Lflag&unix.ICANON == 0 {
		t.Fatal("a new pty is not canonical")
	}
	raw, err := MakeRaw(r.Fd())
	if err != nil {
		t.Fatal(err)
	}
	during, _ := unix.IoctlGetTermios(int(r.Fd()), unix.TCGETS)
	if during.Lflag&(unix.ICANON|unix.ECHO|unix.ISIG) != 0 {
		t.Errorf("raw mode keeps lflag %#x", during.Lflag&(unix.ICANON|unix.ECHO|unix.ISIG))
	}
	if err := raw.Restore(); err != nil {
		t.Fatal(err)
	}
	if err := raw.Restore(); err != nil {
		t.Fatalf("second Restore: %v", err)
	}
	after, _ := unix.IoctlGetTermios(int(r.Fd()), unix.TCGETS)
	if *after != *before {
		t.Errorf("termios after Restore %+v, want %+v", after, before)
	}
	if _, err := MakeRaw(^uintptr(0) >> 1); err == nil {
		t.Error("MakeRaw of a bad descriptor succeeded")
	}
}

func TestSizeQueue(t *testing.T) {
	p, r := openPTY(t)
	setSize(t, p, 120, 40)
	ctx, cancel := contextWithCancel(t)
	q := NewSizeQueue(ctx, r.Fd())
	if got := q.Next(); got == nil || *got != (remotecommand.TerminalSize{Width: 120, Height: 40}) {
		t.Fatalf("first size %v, want 120x40", got)
	}
	setSize(t, p, 100, 30)
	if err := syscall.Kill(os.Getpid(), syscall.SIGWINCH); err != nil {
		t.Fatal(err)
	}
	got := make(chan *remotecommand.TerminalSize, 1)
	go func() { got <- q.Next() }()
	select {
	case s := <-got:
		if s == nil || *s != (remotecommand.TerminalSize{Width: 100, Height: 30}) {
			t.Errorf("size after SIGWINCH %v, want 100x30", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no size after SIGWINCH")
	}
	cancel()
	if s := q.Next(); s != nil {
		t.Errorf("Next after cancel = %v, want nil", s)
	}
}

func TestSizeQueueKeepsLatest(t *testing.T) {
	_, r := openPTY(t) // size 0x0: no initial size
	ctx, cancel := contextWithCancel(t)
	defer cancel()
	q := NewSizeQueue(ctx, r.Fd())
	q.put(remotecommand.TerminalSize{Width: 1, Height: 1})
	q.put(remotecommand.TerminalSize{Width: 2, Height: 2})
	if s := q.Next(); s == nil || s.Width != 2 {
		t.Errorf("Next = %v, want the latest size 2x2", s)
	}
}

func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithCancel(t.Context())
}
