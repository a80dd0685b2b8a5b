//go:build e2e

package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// TestRunAllNodes: every node answers with the machine's real hostname (the
// test nodes share this VM's UTS namespace) and its own node IP (each test
// node has its own network namespace), so each command ran on its node.
func TestRunAllNodes(t *testing.T) {
	ctx := t.Context()
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	b := backend(t, nil)
	var out, errOut syncBuffer
	results, err := runner(t, b).Run(ctx, nodeexec.Targets{All: true}, nodeexec.Request{
		Command: []string{"sh", "-c", "echo host=$(hostname); ip -4 -o addr show | awk '{print \"ip=\" $4}'"},
		Stdout:  &out, Stderr: &errOut,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(env.nodes) {
		t.Fatalf("got %d results for %d nodes", len(results), len(env.nodes))
	}
	for _, r := range results {
		if r.Err != nil || r.ExitCode != 0 {
			t.Errorf("node %s: exit %d err %v", r.Node, r.ExitCode, r.Err)
		}
		if r.Backend != "debugpod" || r.Pod == "" || r.Started.IsZero() || r.Finished.Before(r.Started) {
			t.Errorf("node %s: incomplete result %+v", r.Node, r.Result)
		}
		if want := fmt.Sprintf("[%s] host=%s\n", r.Node, host); !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
		node, err := env.client.CoreV1().Nodes().Get(ctx, r.Node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range node.Status.Addresses {
			if a.Type == "InternalIP" {
				if want := fmt.Sprintf("[%s] ip=%s/", r.Node, a.Address); !strings.Contains(out.String(), want) {
					t.Errorf("node %s: output lacks its node IP %q:\n%s", r.Node, want, out.String())
				}
			}
		}
	}
	assertRunPodsGone(ctx, t, "default", b.RunID())
}

// TestShortOutputNeverLost: a command that prints and exits at once (the race
// that loses kubectl debug's output, RECIPE gotcha 7) always delivers it.
func TestShortOutputNeverLost(t *testing.T) {
	ctx := t.Context()
	b := backend(t, nil)
	for i := range 8 {
		node := env.nodes[i%len(env.nodes)]
		var out bytes.Buffer
		want := fmt.Sprintf("marker-%d\n", i)
		_, err := b.Run(ctx, nodeexec.Request{Node: node, Command: []string{"echo", strings.TrimSpace(want)}, Stdout: &out})
		if err != nil {
			t.Fatalf("run %d on %s: %v", i, node, err)
		}
		if out.String() != want {
			t.Errorf("run %d on %s: output %q, want %q", i, node, out.String(), want)
		}
	}
	assertRunPodsGone(ctx, t, "default", b.RunID())
}

// TestExitCode: exit 3 is node's code 3, an *ExitError, and a failed overall run.
func TestExitCode(t *testing.T) {
	ctx := t.Context()
	b := backend(t, nil)
	results, err := runner(t, b).Run(ctx, nodeexec.Targets{All: true}, nodeexec.Request{Command: []string{"sh", "-c", "exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(nodeexec.Failed(results)); got != len(env.nodes) {
		t.Errorf("%d nodes failed, want all %d", got, len(env.nodes))
	}
	for _, r := range results {
		var ee *nodeexec.ExitError
		if !errors.As(r.Err, &ee) || ee.Code != 3 || ee.Node != r.Node || r.ExitCode != 3 {
			t.Errorf("node %s: err %v exit %d, want *ExitError code 3", r.Node, r.Err, r.ExitCode)
		}
	}
	// The CLI: one node gives its code; several give 1.
	if _, stderr, code := cli(ctx, "", "run", "--node", env.nodes[0], "--", "sh", "-c", "exit 3"); code != 3 {
		t.Errorf("CLI one node: exit %d, want 3; stderr:\n%s", code, stderr)
	}
	if _, stderr, code := cli(ctx, "", "run", "--all", "--", "sh", "-c", "exit 3"); code != 1 || !strings.Contains(stderr, "exited with code 3") {
		t.Errorf("CLI all nodes: exit %d, want 1 and a summary naming code 3; stderr:\n%s", code, stderr)
	}
	assertRunPodsGone(ctx, t, "default", b.RunID())
}

// TestStdinAndSeparateStreams: stdin reaches the command on every node;
// stdout and stderr arrive on their own streams.
func TestStdinAndSeparateStreams(t *testing.T) {
	ctx := t.Context()
	b := backend(t, nil)
	var out, errOut syncBuffer
	input := "line one\nline two\n"
	results, err := runner(t, b).Run(ctx, nodeexec.Targets{Nodes: env.nodes}, nodeexec.Request{
		Command: []string{"sh", "-c", "cat; echo to-stderr >&2"},
		Stdin:   strings.NewReader(input),
		Stdout:  &out, Stderr: &errOut,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Err != nil {
			t.Errorf("node %s: %v", r.Node, r.Err)
		}
		for _, l := range strings.Split(strings.TrimSpace(input), "\n") {
			if want := "[" + r.Node + "] " + l + "\n"; !strings.Contains(out.String(), want) {
				t.Errorf("stdout lacks %q:\n%s", want, out.String())
			}
		}
		if want := "[" + r.Node + "] to-stderr\n"; !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut.String())
		}
	}
	if strings.Contains(out.String(), "to-stderr") || strings.Contains(errOut.String(), "line one") {
		t.Errorf("streams mixed:\nstdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	}
	// The CLI with -i, one node, no prefix: byte for byte.
	stdout, stderr, code := cli(ctx, "abc\n", "run", "-i", "--no-prefix", "--node", env.nodes[0], "--", "cat")
	if code != 0 || stdout != "abc\n" {
		t.Errorf("CLI -i: exit %d stdout %q, want 0 and %q; stderr:\n%s", code, stdout, "abc\n", stderr)
	}
	assertRunPodsGone(ctx, t, "default", b.RunID())
}

// TestScriptRunsInHostRoot: --script runs through sh in chroot /host for
// sysadmin, and in the container for baseline.
func TestScriptRunsInHostRoot(t *testing.T) {
	ctx := t.Context()
	f := t.TempDir() + "/fix.sh"
	// The busybox image has no /etc/os-release; the node's root does.
	script := "if [ -f /etc/os-release ]; then echo where=host-root; else echo where=container; fi\nexit 0\n"
	if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	for profile, want := range map[string]string{"sysadmin": "where=host-root", "baseline": "where=container"} {
		stdout, stderr, code := cli(ctx, "", "run", "--node", env.nodes[0], "--profile", profile, "--script", f)
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("profile %s: exit %d stdout %q, want %q; stderr:\n%s", profile, code, stdout, want, stderr)
		}
	}
}
