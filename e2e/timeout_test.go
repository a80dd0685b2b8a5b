//go:build e2e

package e2e

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// TestTimeout: sleep 600 with a 5 s timeout ends within seconds, reports a
// timeout, and leaves no pod.
func TestTimeout(t *testing.T) {
	ctx := t.Context()
	b := backend(t, nil)
	start := time.Now()
	res, err := b.Run(ctx, nodeexec.Request{Node: env.nodes[0], Command: []string{"sleep", "600"}, Timeout: 5 * time.Second})
	took := time.Since(start)
	if !errors.Is(err, nodeexec.ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if took > 15*time.Second {
		t.Errorf("took %s to time out after 5s", took)
	}
	if nodeexec.ExitCode(err) != 124 || res.Pod == "" {
		t.Errorf("ExitCode = %d, want 124; result %+v", nodeexec.ExitCode(err), res)
	}
	assertRunPodsGone(ctx, t, "default", b.RunID())

	// The CLI says so too.
	_, stderr, code := cli(ctx, "", "run", "--node", env.nodes[0], "--timeout", "3s", "--", "sleep", "600")
	if code != 124 || !strings.Contains(stderr, "timed out") {
		t.Errorf("CLI: exit %d, want 124 and 'timed out'; stderr:\n%s", code, stderr)
	}
}

// TestCancel: cancelling the context mid-command ends the run at once and
// deletes the pod.
func TestCancel(t *testing.T) {
	b := backend(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		_, err := b.Run(ctx, nodeexec.Request{Node: env.nodes[1], Command: []string{"sh", "-c", "echo started; sleep 600"}, Stdout: &out})
		done <- err
	}()
	if !waitFor(30*time.Second, func() bool { return strings.Contains(out.String(), "started") }) {
		cancel()
		t.Fatalf("command did not start; output %q", out.String())
	}
	if pods := runPods(t.Context(), t, "default", b.RunID()); len(pods) != 1 {
		t.Errorf("pods while running: %v, want one", pods)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of cancellation")
	}
	assertRunPodsGone(t.Context(), t, "default", b.RunID())
}

// TestCLIInterrupt: Ctrl-C (SIGINT) on `nodeexec run` deletes the pod and exits.
func TestCLIInterrupt(t *testing.T) {
	ctx := t.Context()
	before := managedPodCount(ctx, t)
	cmd := exec.CommandContext(ctx, env.cli, "--kubeconfig", env.kubeconfig, "run", "--node", env.nodes[0], "--image", env.image, "--", "sh", "-c", "echo started; sleep 600")
	var out, errOut syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !waitFor(30*time.Second, func() bool { return strings.Contains(out.String(), "started") }) {
		_ = cmd.Process.Kill()
		t.Fatalf("command did not start; stdout %q stderr %q", out.String(), errOut.String())
	}
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if time.Since(start) > 10*time.Second {
		t.Errorf("exit took %s after SIGINT", time.Since(start))
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Errorf("exit = %v, want a non-zero exit; stderr:\n%s", err, errOut.String())
	}
	if !waitFor(15*time.Second, func() bool { return managedPodCount(ctx, t) == before }) {
		t.Errorf("managed pods: %d after interrupt, %d before", managedPodCount(ctx, t), before)
	}
}
