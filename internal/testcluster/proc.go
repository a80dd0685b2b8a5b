package testcluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// procRecord identifies a process this package started: its host PID and its start
// time (field 22 of /proc/PID/stat, in clock ticks since boot), so that a recycled
// PID is never mistaken for ours. PID files hold "PID START\n".
type procRecord struct {
	PID   int
	Start uint64
}

// parseStat extracts the state, parent PID and start time from /proc/PID/stat.
// The command name (field 2) may contain spaces and parentheses, so fields are
// counted from the last ')'.
func parseStat(s string) (state byte, ppid int, start uint64, err error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0, 0, 0, fmt.Errorf("malformed stat %q", s)
	}
	f := strings.Fields(s[i+2:]) // f[0] is field 3 (state)
	if len(f) < 20 {
		return 0, 0, 0, fmt.Errorf("malformed stat %q", s)
	}
	ppid, err = strconv.Atoi(f[1])
	if err != nil {
		return 0, 0, 0, fmt.Errorf("malformed stat ppid: %w", err)
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("malformed stat starttime: %w", err)
	}
	return f[0][0], ppid, start, nil
}

func readStat(pid int) (state byte, ppid int, start uint64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	return parseStat(string(b))
}

func recordOf(pid int) (procRecord, error) {
	_, _, start, err := readStat(pid)
	if err != nil {
		return procRecord{}, fmt.Errorf("process %d: %w", pid, err)
	}
	return procRecord{PID: pid, Start: start}, nil
}

// alive reports whether the recorded process still runs. Zombies count as stopped
// (orphans are reaped late on some machines).
func (r procRecord) alive() bool {
	if r.PID <= 0 {
		return false
	}
	state, _, start, err := readStat(r.PID)
	return err == nil && start == r.Start && state != 'Z' && state != 'X'
}

func (r procRecord) String() string { return fmt.Sprintf("%d %d\n", r.PID, r.Start) }

func parsePidFile(s string) (procRecord, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return procRecord{}, fmt.Errorf("malformed pid file %q", s)
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil {
		return procRecord{}, fmt.Errorf("malformed pid file: %w", err)
	}
	start, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return procRecord{}, fmt.Errorf("malformed pid file: %w", err)
	}
	return procRecord{PID: pid, Start: start}, nil
}

func (l layout) pidFile(name string) string { return filepath.Join(l.o.RunDir, name+".pid") }

func (l layout) readProc(name string) (procRecord, error) {
	b, err := os.ReadFile(l.pidFile(name))
	if err != nil {
		return procRecord{}, err
	}
	return parsePidFile(string(b))
}

// recordedProcs lists the names of all PID files in RunDir.
func (l layout) recordedProcs() []string {
	m, _ := filepath.Glob(filepath.Join(l.o.RunDir, "*.pid"))
	names := make([]string, 0, len(m))
	for _, f := range m {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".pid"))
	}
	return names
}

// Process names (PID files, log files).
func initProc(n nodeSpec) string       { return "init-" + n.Name }
func containerdProc(n nodeSpec) string { return "containerd-" + n.Name }
func kubeletProc(n nodeSpec) string    { return "kubelet-" + n.Name }

const (
	procEtcd      = "etcd"
	procAPIServer = "kube-apiserver"
	procCM        = "kube-controller-manager"
	procScheduler = "kube-scheduler"
	procSockFwd   = "apiserver-sock" // in the hub: unix socket -> 127.0.0.1:6443
	procHostFwd   = "apiserver-fwd"  // on the host: 127.0.0.1:APIPort -> unix socket
)

// daemonPath is the PATH daemons get (containerd finds its shim, the shim finds runc).
const daemonPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// nsTarget says where a daemon runs.
type nsTarget struct {
	// InitPID: enter the PID and mount namespaces of this process (a node's init).
	// 0 keeps the host's.
	InitPID int
	// Netns: path of the network namespace to enter; "" keeps the host's.
	Netns string
}

// command returns the argv that runs argv inside t, and whether the daemon ends up as
// a child of the returned command's process (nsenter --pid forks).
func (t nsTarget) command(argv []string) ([]string, bool) {
	if t.InitPID == 0 && t.Netns == "" {
		return argv, false
	}
	// nsenter --net (not `ip netns exec`, which makes a new mount namespace per call:
	// containerd and the kubelet must share one)
	pre := []string{"nsenter"}
	if t.InitPID > 0 {
		pre = append(pre, "-t", strconv.Itoa(t.InitPID), "--pid", "--mount")
	}
	if t.Netns != "" {
		pre = append(pre, "--net="+t.Netns)
	}
	pre = append(pre, "--")
	return append(pre, argv...), t.InitPID > 0
}

// startDaemon starts argv detached (own session, stdin /dev/null, output appended to
// <state>/logs/<name>.log) inside t, records its host PID in <run>/<name>.pid and
// returns it. A daemon whose PID file names a live process is left alone.
// forks says the daemon is the first child of the started command (nsenter --pid,
// unshare --fork) rather than the command itself.
func (r *runner) startDaemon(name string, t nsTarget, argv []string, forks bool) (procRecord, error) {
	if rec, err := r.l.readProc(name); err == nil && rec.alive() {
		r.logf("%s already running (pid %d)", name, rec.PID)
		return rec, nil
	}
	closeInheritedOnExec()
	logPath := filepath.Join(r.l.logs, name+".log")
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return procRecord{}, fmt.Errorf("start %s: %w", name, err)
	}
	defer lf.Close()
	full, nsForks := t.command(argv)
	forks = forks || nsForks
	cmd := exec.Command(full[0], full[1:]...)
	cmd.Env = []string{"PATH=" + daemonPath}
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return procRecord{}, fmt.Errorf("start %s: %w", name, err)
	}
	// Reap the started command when it exits (after the daemon); the daemon itself
	// must outlive this process, so no context is attached to it.
	go func() { _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	if forks {
		pid, err = waitChild(pid, 10*time.Second)
		if err != nil {
			return procRecord{}, fmt.Errorf("start %s: %w (log %s: %s)", name, err, logPath, tail(logPath, 5))
		}
	}
	rec, err := recordOf(pid)
	if err != nil {
		return procRecord{}, fmt.Errorf("start %s: %w (log %s: %s)", name, err, logPath, tail(logPath, 5))
	}
	if err := writeFileAtomic(r.l.pidFile(name), []byte(rec.String()), 0o644); err != nil {
		return procRecord{}, fmt.Errorf("start %s: %w", name, err)
	}
	r.logf("started %s (pid %d)", name, rec.PID)
	return rec, nil
}

// waitChild returns the host PID of the first child of pid.
func waitChild(pid int, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		if err == nil {
			if f := strings.Fields(string(b)); len(f) > 0 {
				return strconv.Atoi(f[0])
			}
		}
		if state, _, _, err := readStat(pid); err != nil || state == 'Z' {
			return 0, fmt.Errorf("process %d exited before starting its child", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, fmt.Errorf("process %d started no child within %s", pid, timeout)
}

// stopProcs sends SIGTERM to every named recorded process that is alive, waits up to
// timeout for all of them, SIGKILLs the rest, and removes their PID files. Only
// processes recorded in PID files (PID and start time matching) are signalled.
func (r *runner) stopProcs(timeout time.Duration, names ...string) {
	type target struct {
		name string
		rec  procRecord
		ppid int // its nsenter wrapper, resumed if stopped (wakeWrapper)
	}
	var live []target
	for _, name := range names {
		rec, err := r.l.readProc(name)
		if err == nil && rec.alive() {
			_, ppid, _, _ := readStat(rec.PID)
			if err := syscall.Kill(rec.PID, syscall.SIGTERM); err == nil {
				live = append(live, target{name, rec, ppid})
			}
		}
	}
	deadline := time.Now().Add(timeout)
	for _, t := range live {
		for t.rec.alive() && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if t.rec.alive() {
			r.logf("%s (pid %d) did not stop within %s: SIGKILL", t.name, t.rec.PID, timeout)
			_ = syscall.Kill(t.rec.PID, syscall.SIGKILL)
			for i := 0; i < 100 && t.rec.alive(); i++ {
				time.Sleep(50 * time.Millisecond)
			}
		}
		r.wakeWrapper(t.ppid)
		r.logf("stopped %s (pid %d)", t.name, t.rec.PID)
	}
	for _, name := range names {
		_ = os.Remove(r.l.pidFile(name))
	}
}

// tail returns the last n lines of a file, joined by " | ", for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// runner carries the resolved options and layout through one operation.
type runner struct {
	o Options
	l layout
}

func newRunner(o Options) *runner { return &runner{o: o, l: newLayout(o)} }

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.o.Log, "[testcluster %s] %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// timing logs "TIMING <step> <seconds>s" for the time since start.
func (r *runner) timing(step string, start time.Time) {
	fmt.Fprintf(r.o.Log, "TIMING %s %.1fs\n", step, time.Since(start).Seconds())
}

// run runs a short command and returns its combined output; the error includes it.
func (r *runner) run(ctx context.Context, name string, args ...string) (string, error) {
	return runEnv(ctx, nil, "", name, args...)
}

// runEnv is run with extra environment variables (added to this process's) and a
// working directory.
func runEnv(ctx context.Context, env []string, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(lastBytes(out, 2000)))
	}
	return string(out), nil
}

func lastBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// writeFileAtomic writes via a temporary file and rename.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// copyFile copies src to dst (atomically).
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst + ".tmp")
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(dst+".tmp", dst)
}

// poll calls f every interval until it returns true, ctx ends, or timeout passes.
// The last error f returned is included in the timeout error.
func poll(ctx context.Context, timeout, interval time.Duration, what string, f func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		ok, err := f(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("waiting for %s: %w (last error: %v)", what, ctx.Err(), last)
			}
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(interval):
		}
	}
}
