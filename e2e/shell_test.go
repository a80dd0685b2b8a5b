//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/internal/asciicast"
	"github.com/nodeexec/nodeexec/internal/testcluster"
	"github.com/nodeexec/nodeexec/nodeexec"
)

// uniqueName is prefix plus 8 random hex digits.
func uniqueName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// tempNamespace creates a namespace with labels, deleted when the test ends,
// and waits until pods can be created in it (its default ServiceAccount).
func tempNamespace(ctx context.Context, t *testing.T, prefix string, labels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: uniqueName(prefix), Labels: labels}}
	if _, err := env.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.client.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), ns.Name, metav1.DeleteOptions{})
	})
	if err := testcluster.WaitDefaultServiceAccount(ctx, env.client, ns.Name); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// managedPods lists the nodeexec pods in ns.
func managedPods(ctx context.Context, t *testing.T, ns string) []corev1.Pod {
	t.Helper()
	list, err := env.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: nodeexec.LabelManagedBy + "=" + nodeexec.ManagedByValue})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// tmuxSession is a detached tmux session running one shell command, as a
// person at a 120x40 terminal would. Each session has its own tmux server
// (socket -L name): with one shared server, the server exiting after the
// previous test killed the last session made the next new-session fail
// ("server exited unexpectedly").
type tmuxSession struct {
	t    *testing.T
	name string
}

func startTmux(t *testing.T, command string) *tmuxSession {
	t.Helper()
	s := &tmuxSession{t: t, name: uniqueName("nodeexec-e2e-")}
	if out, err := exec.Command("tmux", "-L", s.name, "new-session", "-d", "-s", s.name, "-x", "120", "-y", "40", command).CombinedOutput(); err != nil {
		t.Fatalf("tmux new-session: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("tmux", "-L", s.name, "kill-server").Run() })
	return s
}

func (s *tmuxSession) tmux(args ...string) string {
	s.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-L", s.name}, args...)...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("tmux %v: %v: %s", args, err, out)
	}
	return string(out)
}

// screen is the visible pane.
func (s *tmuxSession) screen() string { return s.tmux("capture-pane", "-p", "-t", s.name) }

// typeLine types line and Enter.
func (s *tmuxSession) typeLine(line string) {
	s.tmux("send-keys", "-t", s.name, "-l", line)
	s.tmux("send-keys", "-t", s.name, "Enter")
}

// waitScreen waits until the screen matches re and returns the match's groups.
func (s *tmuxSession) waitScreen(timeout time.Duration, re string) []string {
	s.t.Helper()
	rx := regexp.MustCompile(re)
	var m []string
	var scr string
	if !waitFor(timeout, func() bool { scr = s.screen(); m = rx.FindStringSubmatch(scr); return m != nil }) {
		s.t.Fatalf("screen did not show %q within %s; screen:\n%s", re, timeout, scr)
	}
	return m
}

// shellCommandLine runs the CLI's shell in sh, then prints its exit status
// and whether the terminal is back in canonical mode, and stays open.
// flags are added to shell's command line (no quoting: plain words).
func shellCommandLine(ns, node string, flags ...string) string {
	return fmt.Sprintf("sh -c 'NODEEXEC_IMAGE=%s %s --kubeconfig %s -n %s shell %s %s; echo EXIT=$?; stty -a | grep -o -- \"-*icanon\" | sed s/^/MODE=/; sleep 600'",
		env.image, env.cli, env.kubeconfig, ns, strings.Join(flags, " "), node)
}

// The prompt of a root login shell: the last non-empty line ends in "#".
const promptRE = `(?m)^\S*[#$] *$`

func TestShellInteractive(t *testing.T) {
	ctx := t.Context()
	node := env.nodes[0]
	ns := tempNamespace(ctx, t, "nodeexec-e2e-shell-", nil)
	want, _, code := cli(ctx, "", "run", "--node", node, "--no-prefix", "--", "hostname")
	if code != 0 {
		t.Fatalf("run hostname: exit %d", code)
	}
	want = strings.TrimSpace(want)

	record := filepath.Join(t.TempDir(), "session.cast")
	s := startTmux(t, shellCommandLine(ns, node, "--record", record))
	s.waitScreen(60*time.Second, promptRE)
	if pods := managedPods(ctx, t, ns); len(pods) != 1 {
		t.Errorf("during the shell: %d nodeexec pods in %s, want 1", len(pods), ns)
	} else if pods[0].Spec.NodeName != node || !pods[0].Spec.Containers[0].TTY {
		t.Errorf("pod %s: node %q tty %v; want %q and a TTY", pods[0].Name, pods[0].Spec.NodeName, pods[0].Spec.Containers[0].TTY, node)
	}

	s.typeLine("echo HOST=$(hostname)")
	if got := s.waitScreen(10*time.Second, `(?m)^HOST=(\S+)`)[1]; got != want {
		t.Errorf("hostname in the shell %q, want the node's %q", got, want)
	}
	s.typeLine("echo SIZE=$(stty size | tr ' ' x)")
	s.waitScreen(10*time.Second, `(?m)^SIZE=40x120\s*$`)

	s.tmux("resize-window", "-t", s.name, "-x", "100", "-y", "30")
	s.waitScreen(10*time.Second, `(?m)^SIZE=40x120\s*$`) // still there after the redraw
	time.Sleep(300 * time.Millisecond)                   // let SIGWINCH reach the CLI and the resize the kubelet
	s.typeLine("echo NEWSIZE=$(stty size | tr ' ' x)")
	s.waitScreen(10*time.Second, `(?m)^NEWSIZE=30x100\s*$`)

	// Ctrl-C goes to the remote shell (raw terminal), which survives it.
	s.typeLine("sleep 30")
	time.Sleep(300 * time.Millisecond)
	s.tmux("send-keys", "-t", s.name, "C-c")
	s.typeLine("echo ALIVE=$((20+22))")
	s.waitScreen(10*time.Second, `(?m)^ALIVE=42`)

	s.typeLine("exit 3")
	s.waitScreen(30*time.Second, `(?m)^EXIT=3\s*$`)
	s.waitScreen(5*time.Second, `(?m)^MODE=icanon\s*$`)
	var left []corev1.Pod
	if !waitFor(15*time.Second, func() bool { left = managedPods(ctx, t, ns); return len(left) == 0 }) {
		t.Errorf("%d pods left in %s after the shell exited", len(left), ns)
	}
	checkRecording(t, record, node, 120, 40, []string{"HOST=" + want, "SIZE=40x120", "NEWSIZE=30x100", "ALIVE=42"}, []string{"100x30"})
}

// checkRecording reads shell --record's file: an asciicast v2 header of the
// terminal's size naming node, output events holding outputs in order,
// the resizes given, event times that never go back, no input events (not
// asked for), mode 0600; and asciinema itself replays it (asciinema cat).
func checkRecording(t *testing.T, path, node string, width, height int, outputs, resizes []string) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("the recording: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("the recording's mode %v, want 0600", st.Mode().Perm())
	}
	h, events, err := asciicast.ParseFile(path)
	if err != nil {
		t.Fatalf("the recording: %v", err)
	}
	if h.Width != width || h.Height != height || h.Title != "nodeexec shell "+node || h.Timestamp == 0 {
		t.Errorf("the recording's header %+v: want %dx%d and the title naming %s", h, width, height, node)
	}
	var out strings.Builder
	var gotResizes []string
	last := 0.0
	for _, e := range events {
		switch e.Code {
		case asciicast.Output:
			out.WriteString(e.Data)
		case asciicast.Resize:
			gotResizes = append(gotResizes, e.Data)
		default:
			t.Errorf("an event %q %q: want only output and resizes", e.Code, e.Data)
		}
		if e.Time < last {
			t.Errorf("event time %v after %v", e.Time, last)
		}
		last = e.Time
	}
	rest := out.String()
	for _, o := range outputs {
		i := strings.Index(rest, o)
		if i < 0 {
			t.Errorf("the recording lacks %q (in order) in its output:\n%s", o, out.String())
			break
		}
		rest = rest[i+len(o):]
	}
	if diff := cmp.Diff(resizes, gotResizes); diff != "" {
		t.Errorf("resizes (-want +got):\n%s", diff)
	}
	// asciinema reads /dev/tty: script(1) gives it a terminal
	played, err := exec.Command("script", "-q", "-e", "-c", "asciinema cat "+path, "/dev/null").CombinedOutput()
	if err != nil {
		t.Fatalf("asciinema cat %s: %v: %s", path, err, played)
	}
	for _, o := range outputs {
		if !strings.Contains(string(played), o) {
			t.Errorf("asciinema cat: no %q in what it replays", o)
		}
	}
}

// TestShellSignals kills the CLI in the middle of a shell: the pod is
// deleted and the terminal restored.
func TestShellSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			ctx := t.Context()
			ns := tempNamespace(ctx, t, "nodeexec-e2e-shell-", nil)
			record := filepath.Join(t.TempDir(), "cut.cast")
			s := startTmux(t, shellCommandLine(ns, env.nodes[1], "--record", record))
			s.waitScreen(60*time.Second, promptRE)
			if pods := managedPods(ctx, t, ns); len(pods) != 1 {
				t.Fatalf("during the shell: %d nodeexec pods in %s, want 1", len(pods), ns)
			}
			// The pane runs sh; its child is the CLI.
			shPid := strings.TrimSpace(s.tmux("list-panes", "-t", s.name, "-F", "#{pane_pid}"))
			out, err := exec.Command("pgrep", "-P", shPid).Output()
			if err != nil {
				t.Fatalf("pgrep -P %s: %v", shPid, err)
			}
			pid, err := strconv.Atoi(strings.Fields(string(out))[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := syscall.Kill(pid, sig); err != nil {
				t.Fatal(err)
			}
			s.waitScreen(30*time.Second, `(?m)^EXIT=[1-9]\d*\s*$`)
			s.waitScreen(5*time.Second, `(?m)^MODE=icanon\s*$`)
			var left []corev1.Pod
			if !waitFor(15*time.Second, func() bool { left = managedPods(ctx, t, ns); return len(left) == 0 }) {
				t.Errorf("%d pods left in %s after %s", len(left), ns, sig)
			}
			// the recording up to the signal: complete events, and it plays
			checkRecording(t, record, env.nodes[1], 120, 40, []string{"#"}, nil)
		})
	}
}

// TestShellNoTTY: with standard input not a terminal the shell runs without
// one, reading commands from stdin.
func TestShellNoTTY(t *testing.T) {
	ctx := t.Context()
	ns := tempNamespace(ctx, t, "nodeexec-e2e-shell-", nil)
	record := filepath.Join(t.TempDir(), "notty.cast")
	stdout, stderr, code := cli(ctx, "echo OUT=$((40+2))\nexit 4\n", "-n", ns, "shell", "--record", record, env.nodes[0])
	if code != 4 || !strings.Contains(stdout, "OUT=42") || !strings.Contains(stderr, "standard input is not a terminal") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 4, OUT=42 and the no-terminal notice", code, stdout, stderr)
	}
	checkRecording(t, record, env.nodes[0], 80, 24, []string{"OUT=42"}, nil)
	// an existing file without --force: refused, nothing run, the file kept
	before, _ := os.ReadFile(record)
	_, stderr, code = cli(ctx, "echo RAN\n", "-n", ns, "shell", "--record", record, env.nodes[0])
	if code != 2 || !strings.Contains(stderr, "--record "+record+": the file exists: give --force") {
		t.Errorf("an existing --record file: exit %d, stderr %q; want 2 and the --force hint", code, stderr)
	}
	if after, _ := os.ReadFile(record); !bytes.Equal(before, after) {
		t.Error("the existing --record file was changed")
	}
	// --record-input records what was read from stdin too
	stdout, _, code = cli(ctx, "echo IN=$((1+1))\n", "-n", ns, "shell", "--record", record, "--force", "--record-input", env.nodes[0])
	if code != 0 || !strings.Contains(stdout, "IN=2") {
		t.Errorf("--record-input: exit %d, stdout %q", code, stdout)
	}
	if b, _ := os.ReadFile(record); !strings.Contains(string(b), `,"i","echo IN=$((1+1))\n"]`) {
		t.Errorf("--record-input: no input event in\n%s", b)
	}
	var left []corev1.Pod
	if !waitFor(15*time.Second, func() bool { left = managedPods(ctx, t, ns); return len(left) == 0 }) {
		t.Errorf("%d pods left in %s", len(left), ns)
	}
}

// TestShellBackends opens the shell through the nsenter backend (the node's
// namespaces, entered from PID 1: a login shell on the host) and the runtime
// backend (the target container's own namespaces and root filesystem), types
// as a person would, resizes, and exits with a code of its own.
func TestShellBackends(t *testing.T) {
	ctx := t.Context()
	node := env.nodes[0]
	ns := tempNamespace(ctx, t, "nodeexec-e2e-shellb-", nil)
	target := startTargetPod(ctx, t, ns, node, "shell-target", "echo inside > /tmp/where; exec sleep 3600")
	base := fmt.Sprintf("%s --kubeconfig %s -n %s shell --agent-image %s", env.cli, env.kubeconfig, ns, agentImage())
	tests := []struct {
		name, args, prompt, probe, want string
		code                            int
	}{
		// The host's login shell.
		{"nsenter", "--backend nsenter " + node, promptRE, `echo INIT=$(tr "\0" " " </proc/1/cmdline)`, `(?m)^INIT=\S*pause`, 5},
		// busybox ash in the container: "/ # ".
		{"runtime", fmt.Sprintf("--backend runtime --pod %s/%s --container main --runtime-endpoint /run/nodeexec-testcluster/containerd-%s.sock %s", ns, target.Name, node, node),
			`(?m)^/ # *$`, "echo WHERE=$(cat /tmp/where) HOST=$(hostname)", `(?m)^WHERE=inside HOST=shell-target\s*$`, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := startTmux(t, fmt.Sprintf("sh -c '%s %s; echo EXIT=$?; sleep 600'", base, tc.args))
			s.waitScreen(60*time.Second, tc.prompt)
			s.typeLine(tc.probe)
			s.waitScreen(15*time.Second, tc.want)
			s.tmux("resize-window", "-t", s.name, "-x", "90", "-y", "25")
			time.Sleep(300 * time.Millisecond)
			s.typeLine("echo NEWSIZE=$(stty size | tr ' ' x)")
			s.waitScreen(10*time.Second, `(?m)^NEWSIZE=25x90\s*$`)
			s.typeLine(fmt.Sprintf("exit %d", tc.code))
			s.waitScreen(30*time.Second, fmt.Sprintf(`(?m)^EXIT=%d\s*$`, tc.code))
			var left []corev1.Pod
			if !waitFor(15*time.Second, func() bool { left = managedPods(ctx, t, ns); return len(left) == 0 }) {
				t.Errorf("%d nodeexec pods left in %s after the shell exited", len(left), ns)
			}
		})
	}
}

// startTargetPod creates pod name on node in ns, its one container "main"
// running sh -c script in the suite's image, and waits until it runs (at
// most 90 s): the target of the ephemeral and runtime backends.
func startTargetPod(ctx context.Context, t *testing.T, ns, node, name, script string) *corev1.Pod {
	t.Helper()
	target := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: "main", Image: env.image, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"sh", "-c", script},
			}},
		},
	}
	if _, err := env.client.CoreV1().Pods(ns).Create(ctx, target, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !waitFor(90*time.Second, func() bool {
		p, err := env.client.CoreV1().Pods(ns).Get(ctx, target.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning
	}) {
		t.Fatalf("target pod %s/%s did not start", ns, name)
	}
	return target
}
