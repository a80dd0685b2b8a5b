//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// resumeScript prints 30 numbered lines on stdout, 0.3 s apart, every fifth
// also on stderr, and exits 3: a run long enough to be cut in the middle.
const resumeScript = `i=1; while [ $i -le 30 ]; do echo "line$i"; if [ $((i % 5)) -eq 0 ]; then echo "err$i" >&2; fi; sleep 0.3; i=$((i+1)); done; exit 3`

// TestAPIServerRestartResumes: a fault hits while a run streams its output:
// the API server is killed and started again 3 s later (nsenter and runtime
// backends, and a resident agent), or a node's kubelet or containerd is
// stopped for 4 s, or the API server frozen for 6 s (debugpod). The command
// runs on in the node's agent, which keeps its output and exit status (its
// spool); the client reconnects and receives the rest: every stdout line
// exactly once and in order, stderr apart, and the command's own exit
// status 3, not 125. The ephemeral backend keeps the exit status (the
// container's status) but not the output after the cut, and says so.
// debugpod's API server restart (exit 125, outcome unknown) is
// TestAPIServerRestartPodDeleted. Nothing is left behind.
func TestAPIServerRestartResumes(t *testing.T) {
	if env.cluster == nil {
		t.Skip("needs the local test cluster's fault injection (NODEEXEC_E2E_KUBECONFIG is set)")
	}
	ctx := t.Context()
	node := env.nodes[0]
	t.Cleanup(func() {
		restoreCluster(context.WithoutCancel(ctx), t)
	})
	ns := tempNamespace(ctx, t, "nodeexec-e2e-resume-", map[string]string{"pod-security.kubernetes.io/enforce": "privileged"})
	agentNS := uniqueName("nodeexec-e2e-resume-agents-")
	t.Cleanup(func() {
		_, _, _ = cli(context.WithoutCancel(ctx), "", "agent", "uninstall", "--namespace", agentNS, "--timeout", "2m")
	})
	if _, stderr, code := cli(ctx, "", "agent", "install", "--namespace", agentNS, "--agent-image", agentImage(), "--timeout", "2m"); code != 0 {
		t.Fatalf("agent install: exit %d\n%s", code, stderr)
	}
	target := rtTargetPod(ctx, t, node, "exec sleep 3600", true)

	base := []string{"--kubeconfig", env.kubeconfig, "-n", ns, "-v", "1", "run", "--no-prefix", "--timeout", "3m", "--agent-image", agentImage()}
	nsenterArgs := []string{"--backend", "nsenter", "--node", node}
	restartAPI := func(ctx context.Context) error { return env.cluster.RestartAPIServer(ctx, 3*time.Second) }
	pause := func(stop, start func(context.Context) error, d time.Duration) func(context.Context) error {
		return func(ctx context.Context) error {
			if err := stop(ctx); err != nil {
				return err
			}
			time.Sleep(d)
			return start(ctx)
		}
	}
	onNode := func(f func(context.Context, string) error) func(context.Context) error {
		return func(ctx context.Context) error { return f(ctx, node) }
	}
	cases := []struct {
		name    string
		args    []string
		fault   func(context.Context) error
		resumed bool // the stream is cut, so the client must have reconnected
		partial bool // ephemeral: the exit status survives (the container's status), output after the cut does not
	}{
		{"API server restart/nsenter", nsenterArgs, restartAPI, true, false},
		{"API server restart/runtime", []string{"--backend", "runtime", "--pod", "default/" + target.Name, "--container", "app",
			"--runtime-endpoint", "/run/nodeexec-testcluster/containerd-" + node + ".sock"}, restartAPI, true, false},
		{"API server restart/resident", []string{"--backend", "nsenter", "--node", node, "--use-resident", "--resident-namespace", agentNS}, restartAPI, true, false},
		{"API server restart/ephemeral", []string{"--backend", "ephemeral", "--pod", "default/" + target.Name, "--container", "app", "--image", env.image}, restartAPI, false, true},
		{"kubelet stopped 4s/nsenter", nsenterArgs, pause(onNode(env.cluster.StopKubelet), onNode(env.cluster.StartKubelet), 4*time.Second), true, false},
		{"containerd stopped 4s/nsenter", nsenterArgs, pause(onNode(env.cluster.StopContainerd), onNode(env.cluster.StartContainerd), 4*time.Second), true, false},
		// A frozen API server keeps its connections: the stream stalls, then goes on.
		{"API server frozen 6s/debugpod", []string{"--node", node, "--image", env.image}, pause(env.cluster.FreezeAPIServer, env.cluster.ThawAPIServer, 6*time.Second), false, false},
	}
	var want strings.Builder
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&want, "line%d\n", i)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The faults before this case may have left the node's kubelet
			// re-opening its pod watch with a long backoff.
			kubeletsWatching(ctx, t, node)
			args := append(append(append([]string{}, base...), tc.args...), "--", "sh", "-c", resumeScript)
			cmd := exec.CommandContext(ctx, env.cli, args...)
			var out, errOut syncBuffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			start := time.Now()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if !waitFor(60*time.Second, func() bool { return strings.Contains(out.String(), "line4\n") }) {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("the command did not start: stdout %q\nstderr:\n%s", out.String(), errOut.String())
			}
			if err := tc.fault(ctx); err != nil {
				t.Fatal(err)
			}
			back := time.Since(start)
			_ = cmd.Wait()
			code := cmd.ProcessState.ExitCode()
			t.Logf("%s: fault over %.1fs after the start; client exit %d after %.1fs; stderr:\n%s",
				tc.name, back.Seconds(), code, time.Since(start).Seconds(), errOut.String())
			if code != 3 {
				t.Errorf("exit %d, want the command's own 3 (0 would be a silent success, 125 a lost outcome)", code)
			}
			stderr := errOut.String()
			if tc.partial {
				// The exit status is the command's; what was received is in
				// order and once, and the loss is said.
				if got := out.String(); !strings.HasPrefix(want.String(), got) || !strings.Contains(got, "line4\n") {
					t.Errorf("stdout is not the start of the lines, once each:\n%s", got)
				}
				if !strings.Contains(stderr, "output after the break is lost") || !strings.Contains(stderr, "exited with code 3") {
					t.Errorf("stderr does not say that output was lost and the command's code")
				}
				return
			}
			if got := out.String(); got != want.String() {
				t.Errorf("stdout is not every line once, in order:\n%s", got)
			}
			for i := 5; i <= 30; i += 5 {
				if n := strings.Count(stderr, fmt.Sprintf("err%d\n", i)); n != 1 {
					t.Errorf("stderr has err%d %d times, want once", i, n)
				}
			}
			if tc.resumed && !strings.Contains(stderr, "reconnecting") {
				t.Errorf("the stream was not cut and resumed (no reconnection logged at -v 1): the test proves nothing")
			}
		})
	}
	if !waitFor(60*time.Second, func() bool { return len(managedPods(ctx, t, ns)) == 0 }) {
		t.Errorf("%d managed pods left in %s", len(managedPods(ctx, t, ns)), ns)
	}
}
