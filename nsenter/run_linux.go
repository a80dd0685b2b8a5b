//go:build linux

package nsenter

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// enterOrder is the order in which namespaces are entered, util-linux
// nsenter's: user first (checked only, see ErrUserNamespace), mount last.
func enterOrder() []Namespace {
	return []Namespace{User, Cgroup, IPC, UTS, Net, PID, Mount}
}

// cloneFlag is the setns nstype of each namespace kind.
func (n Namespace) cloneFlag() (int, bool) {
	switch n {
	case Mount:
		return unix.CLONE_NEWNS, true
	case UTS:
		return unix.CLONE_NEWUTS, true
	case IPC:
		return unix.CLONE_NEWIPC, true
	case Net:
		return unix.CLONE_NEWNET, true
	case PID:
		return unix.CLONE_NEWPID, true
	case Cgroup:
		return unix.CLONE_NEWCGROUP, true
	case User:
		return unix.CLONE_NEWUSER, true
	}
	return 0, false
}

// Run enters the namespaces, starts the command and waits for it. It returns
// the command's exit code (128+N when it was killed by signal N) with a nil
// error, whatever that code is.
//
// The error is non-nil, and exitCode -1, when the command could not be
// started or waited for:
//   - an invalid Cmd (Target <= 0, no Path nor Args, a namespace unknown:
//     wrapping ErrUnknownNamespace);
//   - Target not a running process (wrapping fs.ErrNotExist);
//   - a namespace not enterable: ErrUserNamespace, or the EPERM/EINVAL of
//     setns (typically for lack of CAP_SYS_ADMIN), or of opening
//     /proc/PID/ns/* (ptrace access);
//   - the program not found in the target's filesystem (wrapping
//     exec.ErrNotFound) or not executable (wrapping ErrNotExecutable);
//   - Dir missing (wrapping fs.ErrNotExist);
//   - ctx done before the start, or while the command ran: the command is
//     then killed with SIGKILL (processes it started are not), or with
//     ProcessGroup its whole group gets SIGTERM then SIGKILL, and the error
//     wraps ctx.Err().
//
// When the command ran to its end but copying its Stdin/Stdout/Stderr
// failed, Run returns the exit code together with that I/O error.
func (c *Cmd) Run(ctx context.Context) (exitCode int, err error) {
	nss, err := c.namespaces()
	if err != nil {
		return -1, err
	}
	if c.Target <= 0 {
		return -1, fmt.Errorf("nsenter: target PID %d: give the PID (> 0) of the process whose namespaces to enter", c.Target)
	}
	path := c.Path
	args := c.Args
	if path == "" && len(args) > 0 {
		path = args[0]
	}
	if path == "" {
		return -1, errors.New("nsenter: no command: set Path or Args")
	}
	if len(args) == 0 {
		args = []string{path}
	}
	env := c.Env
	if env == nil {
		env = os.Environ()
	}
	dir := c.Dir
	if dir == "" {
		dir = "/"
	}
	if err := ctx.Err(); err != nil {
		return -1, fmt.Errorf("nsenter: not started: %w", err)
	}

	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	work := func(done chan<- result) {
		// Deliberately no UnlockOSThread: the thread's namespaces and
		// fs_struct no longer match the process's, so the runtime must
		// destroy it when this goroutine returns.
		runtime.LockOSThread()
		code, err := c.run(ctx, nss, path, args, env, dir)
		done <- result{code, err}
	}
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			work(done) // locked already; work leaves the thread tainted
			return
		}
		// This is the main thread, which the runtime never destroys (it
		// parks it for good instead, and /proc/self/ns/* would then show
		// the target's namespaces, kept alive by it). Keep it occupied,
		// untouched, so that the working goroutine lands on another thread.
		inner := make(chan result, 1)
		go work(inner)
		r := <-inner
		runtime.UnlockOSThread()
		done <- r
	}()
	r := <-done
	return r.code, r.err
}

// namespaces returns the validated, deduplicated namespaces to enter, in
// entering order.
func (c *Cmd) namespaces() ([]Namespace, error) {
	req := c.Namespaces
	if len(req) == 0 {
		req = DefaultNamespaces()
	}
	want := map[Namespace]bool{}
	for _, n := range req {
		if _, ok := n.cloneFlag(); !ok {
			return nil, fmt.Errorf("nsenter: %w %q: valid names are %s", ErrUnknownNamespace, string(n), validNames())
		}
		want[n] = true
	}
	var out []Namespace
	for _, n := range enterOrder() {
		if want[n] {
			out = append(out, n)
		}
	}
	return out, nil
}

// nsFile is an opened /proc/PID/ns/<ns> file.
type nsFile struct {
	ns Namespace
	f  *os.File
}

// run does the work of Run on a locked OS thread that it leaves tainted.
func (c *Cmd) run(ctx context.Context, nss []Namespace, path string, args, env []string, dir string) (int, error) {
	// Open everything that must come from the caller's own view first.
	files, err := openNamespaces(c.Target, nss)
	if err != nil {
		return -1, err
	}
	defer func() {
		for _, nf := range files {
			nf.f.Close()
		}
	}()
	stdin, stdout, stderr := c.Stdin, c.Stdout, c.Stderr
	if stdin == nil || stdout == nil || stderr == nil {
		// The target's filesystem may have no /dev/null.
		null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
		if err != nil {
			return -1, fmt.Errorf("nsenter: %w", err)
		}
		defer null.Close()
		if stdin == nil {
			stdin = null
		}
		if stdout == nil {
			stdout = null
		}
		if stderr == nil {
			stderr = null
		}
	}

	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return -1, fmt.Errorf("nsenter: unshare(CLONE_FS) for a private root and working directory: %w", err)
	}
	mounted := false
	for _, nf := range files {
		flag, _ := nf.ns.cloneFlag()
		if err := unix.Setns(int(nf.f.Fd()), flag); err != nil {
			return -1, fmt.Errorf("nsenter: entering the %s namespace of process %d (setns): %w", nf.ns, c.Target, err)
		}
		if nf.ns == Mount {
			mounted = true
		}
	}
	where := "the caller's filesystem"
	if mounted {
		where = fmt.Sprintf("the filesystem of process %d", c.Target)
	}

	// Looked up now, on this thread: in the target's filesystem.
	prog, err := lookPath(path, env, dir)
	if err != nil {
		return -1, fmt.Errorf("nsenter: %s in %s: %w", path, where, err)
	}
	var cmd *exec.Cmd
	if c.ProcessGroup {
		// Cancellation is ours (endGroup): exec's would SIGKILL the leader
		// only, and too early.
		cmd = exec.Command(prog)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	} else {
		cmd = exec.CommandContext(ctx, prog)
	}
	cmd.Args = args
	cmd.Env = env
	cmd.Dir = dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.WaitDelay = waitDelay
	// Start forks on this thread: the child inherits its namespaces.
	if err := cmd.Start(); err != nil {
		if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.ENOEXEC) {
			err = fmt.Errorf("%w: %w", ErrNotExecutable, err)
		}
		return -1, fmt.Errorf("nsenter: starting %s in %s: %w", prog, where, err)
	}
	var ended, exited chan struct{}
	if c.ProcessGroup {
		killAfter := c.KillAfter
		if killAfter <= 0 {
			killAfter = DefaultKillAfter
		}
		exited = make(chan struct{})
		ended = make(chan struct{})
		go func() {
			defer close(ended)
			select {
			case <-exited:
				return
			case <-ctx.Done():
			}
			endGroup(cmd.Process.Pid, killAfter, exited)
		}()
	}
	werr := cmd.Wait()
	if exited != nil {
		close(exited)
	}
	st := cmd.ProcessState
	if st == nil {
		return -1, fmt.Errorf("nsenter: waiting for %s: %w", prog, werr)
	}
	ws, _ := st.Sys().(syscall.WaitStatus)
	if ctx.Err() != nil && ws.Signaled() && (ws.Signal() == syscall.SIGKILL || c.ProcessGroup) {
		if c.ProcessGroup {
			// What the group's leader left behind gets the rest of the
			// grace period, then SIGKILL.
			<-ended
		}
		return -1, fmt.Errorf("nsenter: %s killed (signal %d): %w", prog, ws.Signal(), ctx.Err())
	}
	code := st.ExitCode()
	if ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	var ee *exec.ExitError
	switch {
	case werr == nil, errors.As(werr, &ee), errors.Is(werr, exec.ErrWaitDelay):
		// ErrWaitDelay: the command exited; what it left running kept its
		// output open, which is not the command's result.
		return code, nil
	default:
		return code, fmt.Errorf("nsenter: copying the stdio of %s: %w", prog, werr)
	}
}

// openNamespaces opens /proc/PID/ns/<ns> for each namespace, and checks that
// User, if asked for, needs no entering. The returned files are in nss's
// order, User left out.
func openNamespaces(pid int, nss []Namespace) ([]nsFile, error) {
	var files []nsFile
	fail := func(err error) ([]nsFile, error) {
		for _, nf := range files {
			nf.f.Close()
		}
		return nil, err
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("nsenter: target process %d does not exist: %w", pid, err)
		}
		return nil, fmt.Errorf("nsenter: target process %d: %w", pid, err)
	}
	for _, n := range nss {
		p := fmt.Sprintf("/proc/%d/ns/%s", pid, n)
		if n == User {
			same, err := sameNamespace(p, "/proc/self/ns/user")
			if err != nil {
				return fail(fmt.Errorf("nsenter: user namespace of process %d: %w", pid, err))
			}
			if !same {
				return fail(fmt.Errorf("nsenter: process %d: %w", pid, ErrUserNamespace))
			}
			continue // already there; setns to one's own user namespace is EINVAL
		}
		f, err := os.Open(p)
		if err != nil {
			return fail(fmt.Errorf("nsenter: opening the %s namespace of process %d: %w", n, pid, err))
		}
		files = append(files, nsFile{n, f})
	}
	return files, nil
}

// sameNamespace reports whether two /proc/*/ns/* links name one namespace.
func sameNamespace(a, b string) (bool, error) {
	var sa, sb unix.Stat_t
	if err := unix.Stat(a, &sa); err != nil {
		return false, &fs.PathError{Op: "stat", Path: a, Err: err}
	}
	if err := unix.Stat(b, &sb); err != nil {
		return false, &fs.PathError{Op: "stat", Path: b, Err: err}
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino, nil
}

// lookPath finds prog as execvp does, in the current thread's filesystem:
// a name with a slash is used as is (relative to dir), otherwise the first
// executable regular file of that name in env's PATH (default defaultPath;
// empty entries mean dir).
func lookPath(prog string, env []string, dir string) (string, error) {
	if strings.Contains(prog, "/") {
		p := prog
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := executable(p); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return "", fmt.Errorf("%w: %w", exec.ErrNotFound, err)
			}
			return "", err
		}
		return p, nil
	}
	pathEnv, ok := "", false
	for i := len(env) - 1; i >= 0; i-- {
		if v, found := strings.CutPrefix(env[i], "PATH="); found {
			pathEnv, ok = v, true
			break
		}
	}
	if !ok {
		pathEnv = defaultPath
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" || !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, prog)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("not found in PATH %s: %w", pathEnv, exec.ErrNotFound)
}

// executable returns nil when p is a regular file with an execute bit, an
// error wrapping fs.ErrNotExist when there is no such file, one wrapping
// ErrNotExecutable otherwise.
func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return &fs.PathError{Op: "exec", Path: p, Err: ErrNotExecutable}
	}
	return nil
}

// endGroup sends SIGTERM to process group pgid, then, once the group's
// leader has exited (leaderExited closed) and the group is empty or grace
// has passed since the SIGTERM, SIGKILL to what is left of it.
func endGroup(pgid int, grace time.Duration, leaderExited <-chan struct{}) {
	_ = unix.Kill(-pgid, unix.SIGTERM)
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	exited := leaderExited
	for {
		select {
		case <-deadline.C:
			_ = unix.Kill(-pgid, unix.SIGKILL)
			return
		case <-exited:
			exited = nil
		case <-tick.C:
			if exited == nil && unix.Kill(-pgid, 0) == unix.ESRCH {
				return
			}
		}
	}
}
