package testcluster

import (
	"regexp"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestCloseInheritedOnExec(t *testing.T) {
	// a descriptor opened without O_CLOEXEC, as a parent (flock(1)) passes it
	fd, err := syscall.Open("/dev/null", syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC != 0 {
		t.Fatalf("before: flags %#x, %v; want no FD_CLOEXEC", flags, err)
	}
	closeInheritedOnExec()
	flags, err = unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Fatalf("after: flags %#x, %v; want FD_CLOEXEC: a daemon would keep it open", flags, err)
	}
}

func TestNewBootID(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	a, err := newBootID()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := newBootID()
	if !re.MatchString(a) || a == b {
		t.Errorf("boot IDs %q, %q: want two different version-4 UUIDs", a, b)
	}
}

func TestProcTargetUnknown(t *testing.T) {
	o, err := Options{StateDir: t.TempDir(), RunDir: t.TempDir(), CacheDir: t.TempDir()}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := newRunner(o).procTarget("kube-apiserver"); err == nil {
		t.Error("procTarget without a running init: no error")
	}
}
