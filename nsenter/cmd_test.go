//go:build linux

package nsenter

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDefaultNamespaces(t *testing.T) {
	want := []Namespace{Mount, UTS, IPC, Net, PID}
	if diff := cmp.Diff(want, DefaultNamespaces()); diff != "" {
		t.Fatalf("DefaultNamespaces() (-want +got):\n%s", diff)
	}
	DefaultNamespaces()[0] = "changed"
	if DefaultNamespaces()[0] != Mount {
		t.Fatal("DefaultNamespaces returns a shared slice")
	}
}

func TestParseNamespaces(t *testing.T) {
	ok := map[string][]Namespace{
		"mnt,uts,net":         {Mount, UTS, Net},
		" net , mnt ":         {Net, Mount},
		"pid,pid,ipc":         {PID, IPC},
		"cgroup,user":         {Cgroup, User},
		"mnt,,uts,":           {Mount, UTS},
		"all":                 {Mount, UTS, IPC, Net, PID, Cgroup, User},
		" all ":               {Mount, UTS, IPC, Net, PID, Cgroup, User},
		"mnt,uts,ipc,net,pid": DefaultNamespaces(),
	}
	for in, want := range ok {
		got, err := ParseNamespaces(in)
		if err != nil {
			t.Errorf("ParseNamespaces(%q): %v", in, err)
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("ParseNamespaces(%q) (-want +got):\n%s", in, diff)
		}
	}
	bad := map[string]struct {
		contains []string
		unknown  bool
	}{
		"mnt,netz": {[]string{`"netz"`, "mnt, uts, ipc, net, pid, cgroup, user, or all"}, true},
		"mount":    {[]string{`"mount"`, "valid names"}, true},
		"time":     {[]string{`"time"`}, true},
		"MNT":      {[]string{`"MNT"`}, true},
		"":         {[]string{"no namespace"}, false},
		" , ":      {[]string{"no namespace"}, false},
		"all,net":  {[]string{`"all" alone`}, false},
	}
	for in, w := range bad {
		_, err := ParseNamespaces(in)
		if err == nil {
			t.Errorf("ParseNamespaces(%q): no error", in)
			continue
		}
		for _, s := range w.contains {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("ParseNamespaces(%q) = %q, want it to contain %q", in, err, s)
			}
		}
		if got := errors.Is(err, ErrUnknownNamespace); got != w.unknown {
			t.Errorf("ParseNamespaces(%q): errors.Is(err, ErrUnknownNamespace) = %v, want %v", in, got, w.unknown)
		}
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []struct {
		name string
		mode fs.FileMode
	}{{"a/prog", 0o755}, {"b/prog", 0o755}, {"c/noexec", 0o644}, {"c/prog", 0o755}} {
		p := filepath.Join(dir, f.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), f.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "a", "dironly"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := func(ds ...string) string { return "PATH=" + strings.Join(ds, ":") }
	a, b, c := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "c")
	cases := []struct {
		prog, dir string
		env       []string
		want      string // "" for an error
	}{
		{"prog", "/", []string{path(a, b)}, filepath.Join(a, "prog")},
		{"prog", "/", []string{path(b, a)}, filepath.Join(b, "prog")},
		{"prog", "/", []string{"PATH=/nonexistent", path(b, a)}, filepath.Join(b, "prog")}, // the last PATH wins, as in os/exec
		{"prog", dir, []string{"PATH=a"}, filepath.Join(a, "prog")},                        // relative entries are relative to Dir
		{"prog", c, []string{"PATH=:/nonexistent"}, filepath.Join(c, "prog")},              // empty entry: Dir
		{"noexec", "/", []string{path(c)}, ""},
		{"dironly", "/", []string{path(a)}, ""},
		{"prog", "/", []string{path("/nonexistent")}, ""},
		{"sh", "/", []string{"HOME=/"}, "/usr/bin/sh"}, // no PATH: the default one
		{filepath.Join(a, "prog"), "/", nil, filepath.Join(a, "prog")},
		{"./prog", b, nil, filepath.Join(b, "prog")},
		{"./noexec", c, nil, ""},
	}
	if _, err := os.Stat("/usr/bin/sh"); err != nil {
		cases[8].want = "/bin/sh"
	}
	for _, tc := range cases {
		got, err := lookPath(tc.prog, tc.env, tc.dir)
		if tc.want == "" {
			if err == nil {
				t.Errorf("lookPath(%q, %q, %q) = %q, want an error", tc.prog, tc.env, tc.dir, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("lookPath(%q, %q, %q) = %q, %v; want %q", tc.prog, tc.env, tc.dir, got, err, tc.want)
		}
	}
	_, err := lookPath("prog", []string{path("/nonexistent")}, "/")
	if !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("not found: %v, want it to wrap exec.ErrNotFound", err)
	}
}

// requireRoot fails the test when not run as root: entering namespaces needs
// CAP_SYS_ADMIN, and CI runs as root.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test enters namespaces and needs root (CI runs as root)")
	}
}

func randomHex(t *testing.T) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// target is a process in new namespaces, started with util-linux unshare
// (the test's tool, not the package's).
type target struct {
	pid      int    // host PID of the namespaces' PID 1 (a sh)
	hostname string // its UTS hostname
}

// startTarget starts `unshare --uts --mount --net --pid --ipc --cgroup --fork
// --mount-proc --kill-child sh -c SCRIPT`, where the script sets a unique
// hostname, mounts a tmpfs on /mnt holding a marker file and an executable
// /mnt/bin/only-here, then sleeps. It returns once the script is ready; the
// processes are killed at the end of the test.
func startTarget(t *testing.T) target {
	t.Helper()
	requireRoot(t)
	tg := target{hostname: "nsenter-test-" + randomHex(t)}
	script := fmt.Sprintf(`set -e
hostname %s
mount -t tmpfs tmpfs /mnt
echo %s > /mnt/marker
mkdir /mnt/bin
printf '#!/bin/sh\necho only-in-target "$@"\n' > /mnt/bin/only-here
chmod +x /mnt/bin/only-here
echo ready
sleep 300`, tg.hostname, tg.hostname)
	cmd := exec.Command("unshare", "--uts", "--mount", "--net", "--pid", "--ipc", "--cgroup",
		"--fork", "--mount-proc", "--kill-child", "sh", "-c", script)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("unshare: %v", err)
	}
	t.Cleanup(func() {
		if tg.pid > 0 {
			_ = syscall.Kill(tg.pid, syscall.SIGKILL)
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if strings.TrimSpace(s) != "ready" {
			t.Fatalf("unshare target did not start: %q, stderr: %s", s, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("unshare target not ready after 20s")
	}
	upid := cmd.Process.Pid
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", upid, upid))
	if err != nil {
		t.Fatal(err)
	}
	kids := strings.Fields(string(b))
	if len(kids) != 1 {
		t.Fatalf("unshare (PID %d) has children %q, want one", upid, kids)
	}
	if tg.pid, err = strconv.Atoi(kids[0]); err != nil {
		t.Fatal(err)
	}
	return tg
}

// run runs c and returns its exit code and standard output, failing the test
// on an error.
func run(t *testing.T, c Cmd) (int, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	c.Stdout, c.Stderr = &out, &errOut
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, err := c.Run(ctx)
	if err != nil {
		t.Fatalf("Run(%+v): %v (stderr: %s)", c.Args, err, errOut.String())
	}
	if errOut.Len() > 0 {
		t.Logf("stderr of %q: %s", c.Args, errOut.String())
	}
	return code, out.String()
}

// sh returns c running `sh -c script`.
func sh(target int, nss []Namespace, script string) Cmd {
	return Cmd{Target: target, Namespaces: nss, Path: "sh", Args: []string{"sh", "-c", script}}
}

// nsLinks returns the /proc/PID/ns/<ns> link targets of pid, such as
// "uts:[4026531838]", for the namespaces other than mnt's and user's.
func nsLinks(t *testing.T, pid string) map[Namespace]string {
	t.Helper()
	m := map[Namespace]string{}
	for _, n := range []Namespace{Mount, UTS, IPC, Net, PID, Cgroup, User} {
		l, err := os.Readlink(fmt.Sprintf("/proc/%s/ns/%s", pid, n))
		if err != nil {
			t.Fatal(err)
		}
		m[n] = l
	}
	return m
}

func TestRunDefaultNamespaces(t *testing.T) {
	tg := startTarget(t)
	code, out := run(t, sh(tg.pid, nil, `hostname
cat /mnt/marker
ip -o link show | cut -d: -f2 | tr -d ' ' | paste -sd, -
tr '\0\n' '  ' < /proc/1/cmdline; echo
echo "pid=$$"`))
	if code != 0 {
		t.Fatalf("exit code %d, output %q", code, out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("output %q: want 5 lines", out)
	}
	if lines[0] != tg.hostname {
		t.Errorf("uts: hostname %q, want the target's %q", lines[0], tg.hostname)
	}
	if lines[1] != tg.hostname {
		t.Errorf("mnt: /mnt/marker holds %q, want %q (the target's tmpfs)", lines[1], tg.hostname)
	}
	if lines[2] != "lo" {
		t.Errorf("net: interfaces %q, want only lo", lines[2])
	}
	if !strings.HasPrefix(lines[3], "sh -c set -e") || !strings.Contains(lines[3], tg.hostname) {
		t.Errorf("pid: /proc/1/cmdline is %q, want the target's init (sh -c with hostname %s)", lines[3], tg.hostname)
	}
	if pid, err := strconv.Atoi(strings.TrimPrefix(lines[4], "pid=")); err != nil || pid <= 1 || pid > 100 {
		t.Errorf("pid: the command's PID is %q, want a small PID in the target's namespace", lines[4])
	}
}

func TestRunWithoutNetSeesHostNetwork(t *testing.T) {
	tg := startTarget(t)
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, i := range ifs {
		want = append(want, i.Name)
	}
	if len(want) < 2 {
		t.Fatalf("the host has interfaces %q: this test needs one besides lo", want)
	}
	code, out := run(t, sh(tg.pid, []Namespace{Mount, UTS, IPC, PID}, `hostname; ip -o link show | cut -d: -f2 | tr -d ' '`))
	if code != 0 {
		t.Fatalf("exit code %d", code)
	}
	got := strings.Fields(out)
	if len(got) == 0 || got[0] != tg.hostname {
		t.Fatalf("output %q: want the target's hostname %s first", out, tg.hostname)
	}
	got = got[1:]
	for i := range got {
		got[i], _, _ = strings.Cut(got[i], "@") // veth@ifN
	}
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("interfaces without entering net (-host +got):\n%s", diff)
	}
}

// TestRunEntersExactlyTheNamespacesAsked enters each namespace alone and
// checks, through /proc/self/ns of the command, that it is in the target's
// namespace of that kind and in the caller's for every other kind.
func TestRunEntersExactlyTheNamespacesAsked(t *testing.T) {
	tg := startTarget(t)
	theirs := nsLinks(t, strconv.Itoa(tg.pid))
	ours := nsLinks(t, "self")
	for _, n := range []Namespace{Mount, UTS, IPC, Net, PID, Cgroup} {
		if theirs[n] == ours[n] {
			t.Fatalf("the target shares our %s namespace", n)
		}
	}
	kinds := []Namespace{Mount, UTS, IPC, Net, PID, Cgroup, User}
	cases := [][]Namespace{{UTS}, {IPC}, {Net}, {PID}, {Cgroup}, {User}, {Mount, PID}, {Cgroup, IPC, UTS, Net}, {Mount, UTS, IPC, Net, PID, Cgroup, User}}
	for _, nss := range cases {
		t.Run(joinNames(nss), func(t *testing.T) {
			var script strings.Builder
			for _, k := range kinds {
				fmt.Fprintf(&script, "readlink /proc/self/ns/%s\n", k)
			}
			code, out := run(t, sh(tg.pid, nss, script.String()))
			if code != 0 {
				t.Fatalf("exit code %d, output %q", code, out)
			}
			got := strings.Fields(out)
			if len(got) != len(kinds) {
				t.Fatalf("output %q", out)
			}
			for i, k := range kinds {
				want, whose := ours[k], "ours"
				// A command in the target's pid namespace sees that
				// namespace's /proc only when mnt is entered too.
				if slices.Contains(nss, k) {
					want, whose = theirs[k], "the target's"
				}
				if got[i] != want {
					t.Errorf("%s namespace %s, want %s (%s)", k, got[i], want, whose)
				}
			}
		})
	}
}

func joinNames(nss []Namespace) string {
	s := make([]string, len(nss))
	for i, n := range nss {
		s[i] = string(n)
	}
	return strings.Join(s, ",")
}

func TestRunPIDNeedsMountForItsProc(t *testing.T) {
	tg := startTarget(t)
	// mnt without pid: the target's /proc belongs to its pid namespace, where
	// the command has no PID, so /proc/self resolves to nothing.
	code, out := run(t, sh(tg.pid, []Namespace{Mount}, `readlink /proc/self || echo no-self; tr '\0' ' ' < /proc/1/cmdline`))
	if code != 0 || !strings.HasPrefix(out, "no-self\n") || !strings.Contains(out, tg.hostname) {
		t.Errorf("mnt only: exit %d, output %q; want no /proc/self and the target's PID 1", code, out)
	}
	code, out = run(t, sh(tg.pid, []Namespace{Mount, PID}, `read -r pid rest < /proc/self/stat; test "$pid" = $$ && echo self-ok`))
	if code != 0 || out != "self-ok\n" {
		t.Errorf("mnt,pid: exit %d, output %q; want /proc/self to be the command", code, out)
	}
}

func TestRunLooksUpPathInTarget(t *testing.T) {
	tg := startTarget(t)
	env := []string{"PATH=/mnt/bin:/usr/bin:/bin"}
	code, out := run(t, Cmd{Target: tg.pid, Path: "only-here", Args: []string{"only-here", "a", "b c"}, Env: env})
	if code != 0 || out != "only-in-target a b c\n" {
		t.Errorf("exit %d, output %q; want only-here found in the target's /mnt/bin", code, out)
	}
	// Path defaults to Args[0].
	code, out = run(t, Cmd{Target: tg.pid, Args: []string{"only-here"}, Env: env})
	if code != 0 || out != "only-in-target\n" {
		t.Errorf("Args only: exit %d, output %q", code, out)
	}
	// Without the target's mount namespace, the program is not there.
	_, err := (&Cmd{Target: tg.pid, Namespaces: []Namespace{UTS, Net}, Path: "only-here", Env: env}).Run(context.Background())
	if !errors.Is(err, exec.ErrNotFound) || !strings.Contains(err.Error(), "only-here") {
		t.Errorf("without mnt: %v, want an error wrapping exec.ErrNotFound naming only-here", err)
	}
}

func TestRunDirAndEnv(t *testing.T) {
	tg := startTarget(t)
	code, out := run(t, Cmd{Target: tg.pid, Path: "/bin/sh", Args: []string{"sh", "-c", `pwd; cat marker; echo "$FOO"; echo "${HOME-unset}"`},
		Dir: "/mnt", Env: []string{"FOO=bar baz", "PATH=/usr/bin:/bin"}})
	want := fmt.Sprintf("/mnt\n%s\nbar baz\nunset\n", tg.hostname)
	if code != 0 || out != want {
		t.Errorf("Dir /mnt: exit %d, output %q, want %q", code, out, want)
	}
	t.Setenv("NSENTER_TEST_VAR", "inherited")
	code, out = run(t, sh(tg.pid, nil, `pwd; echo "$NSENTER_TEST_VAR"`))
	if code != 0 || out != "/\ninherited\n" {
		t.Errorf("defaults: exit %d, output %q, want / and the inherited environment", code, out)
	}
	_, err := (&Cmd{Target: tg.pid, Path: "/bin/sh", Dir: "/no/such/dir"}).Run(context.Background())
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing Dir: %v, want an error wrapping fs.ErrNotExist", err)
	}
}

func TestRunExitCodesAndStdio(t *testing.T) {
	requireRoot(t)
	self := os.Getpid()
	all, err := ParseNamespaces("all")
	if err != nil {
		t.Fatal(err)
	}
	for script, want := range map[string]int{"exit 0": 0, "exit 7": 7, "exit 255": 255, "kill -TERM $$": 128 + 15, "kill -KILL $$": 128 + 9} {
		// Our own namespaces, all of them: entering where one already is
		// works, the user namespace included (nothing to enter).
		code, _ := run(t, sh(self, all, script))
		if code != want {
			t.Errorf("%s: exit code %d, want %d", script, code, want)
		}
	}
	var out, errOut bytes.Buffer
	c := sh(self, []Namespace{UTS}, `cat; echo to-stderr >&2; exit 3`)
	c.Stdin, c.Stdout, c.Stderr = strings.NewReader("from stdin\n"), &out, &errOut
	code, err := c.Run(context.Background())
	if err != nil || code != 3 || out.String() != "from stdin\n" || errOut.String() != "to-stderr\n" {
		t.Errorf("stdio: code %d, err %v, stdout %q, stderr %q", code, err, out.String(), errOut.String())
	}
	// Nil streams are the null device.
	c = sh(self, nil, `read x || echo eof; echo lost; echo lost >&2`)
	code, err = c.Run(context.Background())
	if err != nil || code != 0 {
		t.Errorf("nil streams: code %d, err %v", code, err)
	}
	// *os.File streams are passed as they are.
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c = sh(self, nil, `echo file`)
	c.Stdout = f
	if code, err := c.Run(context.Background()); err != nil || code != 0 {
		t.Fatalf("file stdout: %d, %v", code, err)
	}
	if b, _ := os.ReadFile(f.Name()); string(b) != "file\n" {
		t.Errorf("file stdout holds %q", b)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRunCancelKillsCommand(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	c := sh(os.Getpid(), []Namespace{UTS, Net}, `echo $$; exec sleep 300`)
	c.Stdout = &out
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		code, err := c.Run(ctx)
		done <- result{code, err}
	}()
	var pid int
	for pid == 0 {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the command did not start: output %q", out.String())
		}
		if s, ok := strings.CutSuffix(out.String(), "\n"); ok {
			pid, _ = strconv.Atoi(s)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err != nil || !strings.HasPrefix(string(b), "sleep\x00300") {
		t.Fatalf("PID %d is %q (%v), want the sleep", pid, b, err)
	}
	cancel()
	select {
	case r := <-done:
		if r.code != -1 || !errors.Is(r.err, context.Canceled) {
			t.Errorf("cancelled Run = %d, %v; want -1 and an error wrapping context.Canceled", r.code, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return 10s after the cancellation")
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the command (PID %d) still exists after the cancellation: %v", pid, err)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("took %s", d)
	}
}

// TestRunLeftoverOutputHolder: a command exits leaving a process that holds
// its stdout pipe; Run returns the command's exit code soon after.
func TestRunLeftoverOutputHolder(t *testing.T) {
	requireRoot(t)
	var out syncBuffer
	c := sh(os.Getpid(), []Namespace{UTS}, `sleep 30 & echo $!; exit 5`)
	c.Stdout = &out
	start := time.Now()
	code, err := c.Run(context.Background())
	if pid, perr := strconv.Atoi(strings.TrimSpace(out.String())); perr == nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	} else {
		t.Errorf("output %q", out.String())
	}
	if err != nil || code != 5 {
		t.Errorf("Run = %d, %v; want 5, nil", code, err)
	}
	if d := time.Since(start); d > waitDelay+5*time.Second {
		t.Errorf("Run took %s, want about the %s wait delay", d, waitDelay)
	}
}

func TestRunErrors(t *testing.T) {
	requireRoot(t)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	self := os.Getpid()
	noexec := filepath.Join(t.TempDir(), "noexec")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		ctx      context.Context
		cmd      Cmd
		is       error
		contains string
	}{
		{"zero target", context.Background(), Cmd{Path: "true"}, nil, "target PID 0"},
		{"negative target", context.Background(), Cmd{Target: -4, Path: "true"}, nil, "target PID -4"},
		{"no such process", context.Background(), Cmd{Target: 1 << 30, Path: "true"}, fs.ErrNotExist, "process 1073741824 does not exist"},
		{"unknown namespace", context.Background(), Cmd{Target: self, Namespaces: []Namespace{UTS, "netz"}, Path: "true"}, ErrUnknownNamespace, `"netz"`},
		{"no command", context.Background(), Cmd{Target: self}, nil, "no command"},
		{"not found", context.Background(), Cmd{Target: self, Path: "no-such-program-nsenter", Env: []string{"PATH=/bin"}}, exec.ErrNotFound, "no-such-program-nsenter"},
		{"not executable", context.Background(), Cmd{Target: self, Path: noexec}, ErrNotExecutable, noexec},
		{"a directory", context.Background(), Cmd{Target: self, Path: "/"}, ErrNotExecutable, "exec /: not executable"},
		{"no such file", context.Background(), Cmd{Target: self, Path: "/no/such/prog"}, exec.ErrNotFound, "/no/such/prog"},
		{"cancelled before", done, Cmd{Target: self, Path: "true"}, context.Canceled, "not started"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, err := tc.cmd.Run(tc.ctx)
			if err == nil || code != -1 {
				t.Fatalf("Run = %d, %v; want -1 and an error", code, err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %q does not wrap %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.contains) {
				t.Errorf("error %q does not contain %q", err, tc.contains)
			}
		})
	}
}

func TestRunRefusesAnotherUserNamespace(t *testing.T) {
	requireRoot(t)
	cmd := exec.Command("unshare", "--user", "sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	ours, err := os.Readlink("/proc/self/ns/user")
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/user", pid)); err == nil && l != ours {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("unshare --user did not enter a new user namespace")
		}
	}
	for _, nss := range [][]Namespace{{User}, {Mount, UTS, User}} {
		var out bytes.Buffer
		c := Cmd{Target: pid, Namespaces: nss, Path: "sh", Args: []string{"sh", "-c", "echo ran"}, Stdout: &out}
		code, err := c.Run(context.Background())
		if code != -1 || !errors.Is(err, ErrUserNamespace) || !strings.Contains(err.Error(), "multi-threaded") {
			t.Errorf("%v: Run = %d, %v; want -1 and ErrUserNamespace", nss, code, err)
		}
		if out.Len() > 0 {
			t.Errorf("%v: the command ran: %q", nss, out.String())
		}
	}
	// The other namespaces of that process can be entered without it.
	code, out := run(t, sh(pid, []Namespace{UTS, Mount}, "echo ran"))
	if code != 0 || out != "ran\n" {
		t.Errorf("without user: %d, %q", code, out)
	}
}

// TestRunLeavesTheProcessAlone runs commands concurrently in a target's
// namespaces and then checks that no thread of the test process is left in
// the target's namespaces or with another root: the tainted threads are gone.
func TestRunLeavesTheProcessAlone(t *testing.T) {
	tg := startTarget(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out bytes.Buffer
			c := sh(tg.pid, nil, fmt.Sprintf("hostname; exit %d", i))
			c.Stdout = &out
			code, err := c.Run(context.Background())
			if err != nil || code != i || out.String() != tg.hostname+"\n" {
				errs <- fmt.Errorf("run %d: code %d, err %v, output %q", i, code, err, out.String())
			}
		}()
	}
	wg.Wait()
	// And some in a row: each Run's goroutine may land on the main thread,
	// which the runtime never destroys.
	for i := range 16 {
		var out bytes.Buffer
		c := sh(tg.pid, []Namespace{Mount, UTS, PID}, "hostname")
		c.Stdout = &out
		if code, err := c.Run(context.Background()); err != nil || code != 0 || out.String() != tg.hostname+"\n" {
			t.Errorf("sequential run %d: code %d, err %v, output %q", i, code, err, out.String())
		}
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if h, err := os.Hostname(); err != nil || h == tg.hostname {
		t.Errorf("os.Hostname() = %q, %v", h, err)
	}
	ours := nsLinks(t, "self")
	wantRoot, err := os.Readlink("/proc/self/root")
	if err != nil {
		t.Fatal(err)
	}
	// A locked thread exits just after its goroutine returns: allow a moment.
	var bad []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		bad = nil
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			for _, n := range []Namespace{Mount, UTS, Net, PID, IPC, Cgroup} {
				l, err := os.Readlink(fmt.Sprintf("/proc/self/task/%s/ns/%s", task.Name(), n))
				if err == nil && l != ours[n] {
					bad = append(bad, fmt.Sprintf("thread %s in %s", task.Name(), l))
				}
			}
			// PID namespace for children, and root.
			l, err := os.Readlink(fmt.Sprintf("/proc/self/task/%s/ns/pid_for_children", task.Name()))
			if err == nil && l != ours[PID] {
				bad = append(bad, fmt.Sprintf("thread %s with pid_for_children %s", task.Name(), l))
			}
			if r, err := os.Readlink(fmt.Sprintf("/proc/self/task/%s/root", task.Name())); err == nil && r != wantRoot {
				bad = append(bad, fmt.Sprintf("thread %s with root %s", task.Name(), r))
			}
		}
		if len(bad) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(bad) > 0 {
		t.Errorf("threads left in the target's namespaces: %s", strings.Join(bad, "; "))
	}
}

// TestRunProcessGroup: with ProcessGroup, the end of the context ends the
// command and what it started (SIGTERM to the group), and a process that
// ignores SIGTERM gets SIGKILL after KillAfter.
func TestRunProcessGroup(t *testing.T) {
	requireRoot(t)
	var out syncBuffer
	c := sh(os.Getpid(), []Namespace{UTS}, `sleep 300 & echo $!; sh -c 'trap "" TERM; echo $$; while :; do sleep 0.1; done' & wait`)
	c.Stdout = &out
	c.ProcessGroup = true
	c.KillAfter = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	code, err := c.Run(ctx)
	if code != -1 || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run = %d, %v; want -1 and an error wrapping the context's", code, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Run took %s, want about 1s + 1s", d)
	}
	pids := strings.Fields(out.String())
	if len(pids) != 2 {
		t.Fatalf("output %q: want the two background PIDs", out.String())
	}
	for _, p := range pids {
		pid, _ := strconv.Atoi(p)
		deadline := time.Now().Add(3 * time.Second)
		for syscall.Kill(pid, 0) == nil {
			if b, _ := os.ReadFile("/proc/" + p + "/stat"); strings.Contains(string(b), ") Z ") {
				break // a zombie waiting for its reaper: ended
			}
			if time.Now().After(deadline) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				t.Errorf("PID %s of the command's group survived", p)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
