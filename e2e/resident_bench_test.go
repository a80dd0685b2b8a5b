//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"testing"
)

// BenchmarkResident compares the time to first output of a one-shot command
// through a resident agent, `nodeexec run --node X --backend nsenter
// --use-resident -- echo ready`, with `kubectl debug node/X -i
// --profile=sysadmin -- echo ready`, on the same node, interleaved (ABBA),
// one trial of each per iteration (run with -benchtime=10x or more). The
// agents are installed once, in a namespace of their own, outside the
// timing, and uninstalled at the end. It reports the medians and their
// ratio (the target: at most 0.15), also as JSON to
// $NODEEXEC_BENCH_RESIDENT_OUT when set.
func BenchmarkResident(b *testing.B) {
	ctx := b.Context()
	node := env.nodes[0]
	ns := "nodeexec-bench-res-" + randomSuffix()
	b.Cleanup(func() { _, _, _ = cli(context.WithoutCancel(ctx), "", "agent", "uninstall", "--namespace", ns) })
	if _, stderr, code := cli(ctx, "", "agent", "install", "--namespace", ns, "--agent-image", agentImage()); code != 0 {
		b.Fatalf("agent install: exit %d\n%s", code, stderr)
	}
	ours := []string{"--kubeconfig", env.kubeconfig, "run", "--node", node, "--backend", "nsenter", "--use-resident",
		"--resident-namespace", ns, "--agent-image", agentImage(), "--no-prefix", "--", "echo", "ready"}
	peer := []string{"--kubeconfig", env.kubeconfig, "-v=6", "debug", "node/" + node, "-i", "--image=" + env.image, "--profile=sysadmin", "--", "echo", "ready"}
	var o, k []trial
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		a := func() { o = append(o, timeCLI(ctx, b, env.cli, ours)) }
		c := func() { k = append(k, timeCLI(ctx, b, kubectlPath, peer)) }
		if i%2 == 0 {
			a()
			c()
		} else {
			c()
			a()
		}
	}
	b.StopTimer()
	r := ratioOf(o, k)
	b.ReportMetric(r["ratio"].(float64), "first-output-ratio")
	b.ReportMetric(r["nodeexec"].(float64), "resident-first-output-ms")
	b.ReportMetric(r["kubectl"].(float64), "kubectl-first-output-ms")
	b.ReportMetric(0, "ns/op")
	out, _ := json.MarshalIndent(map[string]any{"node": node, "image": env.image, "time_to_first_output_ms": r}, "", "  ")
	b.Logf("\n%s", out)
	if f := os.Getenv("NODEEXEC_BENCH_RESIDENT_OUT"); f != "" {
		if err := os.WriteFile(f, append(out, '\n'), 0o644); err != nil {
			b.Error(err)
		}
	}
	if ratio := r["ratio"].(float64); ratio > 0.15 {
		b.Logf("target not met: resident/kubectl = %.3f > 0.15", ratio)
	}
}
