//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"

	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkBackends measures, in one run and interleaved with its kubectl
// peer, the time to first output of a one-shot `echo ready` for every backend:
// node-level backends (debugpod, nsenter, nsenter through a resident agent)
// against `kubectl debug node/X -i --profile=sysadmin`, container-level ones
// (ephemeral, runtime) against `kubectl debug POD -i --target=C`; and the
// time until an interactive shell answers, `nodeexec shell X` against
// `kubectl debug node/X -it -- sh`, both under a pseudo-terminal. One trial of
// each pair per iteration: run with -benchtime=5x or more. Ratios are
// nodeexec/kubectl medians; the targets are each one-shot at most
// 1.0x its counterpart and the resident agent at most 0.15x kubectl debug node.
func BenchmarkBackends(b *testing.B) {
	ctx := b.Context()
	node := env.nodes[0]
	// Ephemeral containers can never be removed: kubectl's and ours get
	// their own target pods, deleted at the end.
	oursPod := benchTargetPod(ctx, b, node, "bench-target-ours")
	peerPod := benchTargetPod(ctx, b, node, "bench-target-kubectl")

	kc := func(args ...string) []string {
		return append([]string{"--kubeconfig", env.kubeconfig, "-v=6"}, args...)
	}
	ne := func(args ...string) []string {
		return append([]string{"--kubeconfig", env.kubeconfig, "run", "--image", env.image, "--no-prefix"}, args...)
	}
	nodePeer := kc("debug", "node/"+node, "-i", "--image="+env.image, "--profile=sysadmin", "--", "echo", "ready")
	podPeer := kc("debug", peerPod, "-i", "--image="+env.image, "--target=main", "--", "echo", "ready")
	type pair struct {
		name       string
		ours, peer []string
	}
	pairs := []pair{
		{"debugpod", ne("--node", node, "--", "echo", "ready"), nodePeer},
		{"nsenter", ne("--node", node, "--backend", "nsenter", "--", "echo", "ready"), nodePeer},
		{"ephemeral", ne("--backend", "ephemeral", "--pod", "default/"+oursPod, "--container", "main", "--", "echo", "ready"), podPeer},
		{"runtime", ne("--backend", "runtime", "--pod", "default/"+oursPod, "--container", "main", "--", "echo", "ready"), podPeer},
	}
	results := map[string]map[string]any{}
	measure := func(p pair) {
		var ours, theirs []trial
		for i := 0; i < b.N; i++ {
			a := func() { ours = append(ours, timeCLI(ctx, b, env.cli, p.ours)) }
			k := func() { theirs = append(theirs, timeCLI(ctx, b, kubectlPath, p.peer)) }
			if i%2 == 0 {
				a()
				k()
			} else {
				k()
				a()
			}
		}
		results[p.name] = ratioOf(ours, theirs)
	}
	for _, p := range pairs {
		measure(p)
	}

	// Resident agents: installed once, outside the timing.
	if _, stderr, code := cli(ctx, "", "agent", "install"); code != 0 {
		b.Fatalf("agent install: exit %d\n%s", code, stderr)
	}
	measure(pair{"nsenter-resident", ne("--node", node, "--backend", "nsenter", "--use-resident", "--", "echo", "ready"), nodePeer})
	if _, stderr, code := cli(ctx, "", "agent", "uninstall"); code != 0 {
		b.Errorf("agent uninstall: exit %d\n%s", code, stderr)
	}

	// Interactive shells, under a pseudo-terminal (script(1)).
	var ours, theirs []trial
	for i := 0; i < b.N; i++ {
		a := func() {
			ours = append(ours, timeShell(ctx, b, env.cli+" --kubeconfig "+env.kubeconfig+" shell --image "+env.image+" "+node))
		}
		k := func() {
			theirs = append(theirs, timeShell(ctx, b, kubectlPath+" --kubeconfig "+env.kubeconfig+" debug node/"+node+" -it --image="+env.image+" --profile=sysadmin -- sh"))
			deleteKubectlDebugPods(ctx, b)
		}
		if i%2 == 0 {
			a()
			k()
		} else {
			k()
			a()
		}
	}
	results["shell-prompt"] = ratioOf(ours, theirs)

	for name, r := range results {
		b.ReportMetric(r["ratio"].(float64), name+"-ratio")
	}
	b.ReportMetric(0, "ns/op")
	out, _ := json.MarshalIndent(map[string]any{"trials": b.N, "node": node, "image": env.image, "time_to_first_output_ms": results}, "", "  ")
	b.Logf("\n%s", out)
	if f := os.Getenv("NODEEXEC_BENCH_BACKENDS_OUT"); f != "" {
		if err := os.WriteFile(f, append(out, '\n'), 0o644); err != nil {
			b.Error(err)
		}
	}
}

// ratioOf is the medians of first output for both sides and their ratio.
func ratioOf(ours, theirs []trial) map[string]any {
	med := func(ts []trial) time.Duration {
		var ds []time.Duration
		for _, t := range ts {
			if !t.lostOutput {
				ds = append(ds, t.firstOutput)
			}
		}
		if len(ds) == 0 {
			return 0
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	lost := 0
	for _, t := range theirs {
		if t.lostOutput {
			lost++
		}
	}
	o, k := med(ours), med(theirs)
	ratio := -1.0
	if k > 0 {
		ratio = float64(o) / float64(k)
	}
	return map[string]any{"nodeexec": ms(o), "kubectl": ms(k), "ratio": ratio, "kubectl_lost_output": lost, "trials": len(ours)}
}

// benchTargetPod starts a busybox pod with container "main" on node and
// waits until it runs; it is deleted when the benchmark ends.
func benchTargetPod(ctx context.Context, b *testing.B, node, prefix string) string {
	b.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: "main", Image: env.image, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"sh", "-c", "echo target > /tmp/marker; exec sleep 3600"},
			}},
		},
	}
	created, err := env.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = env.client.CoreV1().Pods("default").Delete(context.WithoutCancel(ctx), created.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	if !waitFor(60*time.Second, func() bool {
		p, err := env.client.CoreV1().Pods("default").Get(ctx, created.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning
	}) {
		b.Fatalf("target pod %s did not start", created.Name)
	}
	return created.Name
}

// timeShell runs an interactive command under script(1), types a command at
// once and measures until its answer appears: the time until the shell is
// usable, whether or not its first prompt was seen. It then exits the shell.
func timeShell(ctx context.Context, b *testing.B, command string) trial {
	b.Helper()
	cmd := exec.CommandContext(ctx, "script", "-qfec", command, "/dev/null")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	// RE""ADY echoes as typed; only the shell's answer reads READY.
	_, _ = io.WriteString(stdin, "echo RE\"\"ADY\r")
	var t trial
	found := make(chan struct{})
	go func() {
		r := bufio.NewReader(stdout)
		var seen strings.Builder
		for {
			chunk := make([]byte, 4096)
			n, err := r.Read(chunk)
			seen.Write(chunk[:n])
			if t.firstOutput == 0 && strings.Contains(strings.ReplaceAll(seen.String(), `RE""ADY`, ""), "READY") {
				t.firstOutput = time.Since(start)
				close(found)
			}
			if err != nil {
				return
			}
		}
	}()
	select {
	case <-found:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		b.Fatalf("no shell answer within 60s from %s", command)
	}
	_, _ = io.WriteString(stdin, "exit\r")
	_ = stdin.Close()
	_ = cmd.Wait()
	t.total = time.Since(start)
	return t
}

// deleteKubectlDebugPods deletes the node-debugger pods kubectl leaves behind.
func deleteKubectlDebugPods(ctx context.Context, b *testing.B) {
	b.Helper()
	list, err := env.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range list.Items {
		if strings.HasPrefix(p.Name, "node-debugger-") {
			_ = env.client.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		}
	}
	waitFor(30*time.Second, func() bool {
		l, err := env.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, p := range l.Items {
			if strings.HasPrefix(p.Name, "node-debugger-") {
				return false
			}
		}
		return true
	})
}
