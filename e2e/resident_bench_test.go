//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/resident"
)

// BenchmarkResident measures the warm path — a command through a resident
// agent, `nodeexec run --node X --backend nsenter --use-resident -- CMD`,
// which reaches the agent's loopback listener through pods/portforward —
// against its two peers on the same node, in the same run, the order
// rotating every iteration (run with -benchtime=10x or more):
//
//   - a bare `kubectl exec AGENTPOD -- /usr/local/bin/nodeexec agent nsenter
//     --target 1 -- CMD` into the same agent pod (the same work, with the
//     container runtime's exec per command; the image has no `true`);
//   - `kubectl debug node/X -i --profile=sysadmin --image=IMG -- CMD`.
//
// The same run through agents installed with --transport exec (every run
// over pods/exec, so the audit log holds each command line) is timed too,
// as nodeexec_transport_exec, and through agents installed with
// --transport recorded (port-forward, each command first in a run record
// the audit log attributes to the user), as nodeexec_transport_recorded,
// against the same peers: the audited warm paths.
//
// CMD is `echo ready` (time to first output) and `true` (process total).
// It also times the shell's prompt through the agent against kubectl
// debug's and kubectl exec's (under script(1)). It reports medians and
// ratios (the targets: at most 0.15x kubectl debug, at most 0.5x the
// bare kubectl exec), also as JSON to $NODEEXEC_BENCH_RESIDENT_OUT when set.
// The agents are installed once, in a namespace of their own, outside the
// timing, and uninstalled at the end.
func BenchmarkResident(b *testing.B) {
	ctx := b.Context()
	node := env.nodes[0]
	ns := "nodeexec-bench-res-" + randomSuffix()
	b.Cleanup(func() { _, _, _ = cli(context.WithoutCancel(ctx), "", "agent", "uninstall", "--namespace", ns) })
	if _, stderr, code := cli(ctx, "", "agent", "install", "--namespace", ns, "--agent-image", agentImage()); code != 0 {
		b.Fatalf("agent install: exit %d\n%s", code, stderr)
	}
	// a second set of agents with --transport exec: every run over
	// pods/exec, its command line in the audit log
	nsExec := "nodeexec-bench-rex-" + randomSuffix()
	b.Cleanup(func() { _, _, _ = cli(context.WithoutCancel(ctx), "", "agent", "uninstall", "--namespace", nsExec) })
	if _, stderr, code := cli(ctx, "", "agent", "install", "--namespace", nsExec, "--transport", "exec", "--agent-image", agentImage()); code != 0 {
		b.Fatalf("agent install --transport exec: exit %d\n%s", code, stderr)
	}
	// a third with --transport recorded: port-forward, each command in its
	// run record
	nsRec := "nodeexec-bench-rrc-" + randomSuffix()
	b.Cleanup(func() { _, _, _ = cli(context.WithoutCancel(ctx), "", "agent", "uninstall", "--namespace", nsRec) })
	if _, stderr, code := cli(ctx, "", "agent", "install", "--namespace", nsRec, "--transport", "recorded", "--agent-image", agentImage()); code != 0 {
		b.Fatalf("agent install --transport recorded: exit %d\n%s", code, stderr)
	}
	a, ok, err := resident.FindAgent(ctx, env.client, ns, node)
	if err != nil || !ok {
		b.Fatalf("no agent on %s: %v", node, err)
	}
	oursIn := func(agents string, cmd ...string) []string {
		return append([]string{"--kubeconfig", env.kubeconfig, "run", "--node", node, "--backend", "nsenter", "--use-resident",
			"--resident-namespace", agents, "--agent-image", agentImage(), "--no-prefix", "--"}, cmd...)
	}
	ours := func(cmd ...string) []string { return oursIn(ns, cmd...) }
	bare := func(cmd ...string) []string {
		return append([]string{"--kubeconfig", env.kubeconfig, "-n", ns, "exec", a.Pod, "-c", agent.ContainerName, "--",
			agent.Path, "agent", "nsenter", "--target", "1", "--"}, cmd...)
	}
	debug := func(cmd ...string) []string {
		return append([]string{"--kubeconfig", env.kubeconfig, "debug", "node/" + node, "-i", "--image=" + env.image, "--profile=sysadmin", "--"}, cmd...)
	}
	type side struct {
		name string
		bin  string
		args []string
	}
	sides := func(cmd ...string) []side {
		return []side{{"nodeexec", env.cli, ours(cmd...)}, {"nodeexec_transport_exec", env.cli, oursIn(nsExec, cmd...)}, {"nodeexec_transport_recorded", env.cli, oursIn(nsRec, cmd...)},
			{"kubectl_exec", kubectlPath, bare(cmd...)}, {"kubectl_debug", kubectlPath, debug(cmd...)}}
	}
	echo, tru := sides("echo", "ready"), sides("true")
	shells := []side{
		{"nodeexec", "", []string{env.cli + " --kubeconfig " + env.kubeconfig + " shell " + node + " --backend nsenter --use-resident --resident-namespace " + ns + " --agent-image " + agentImage()}},
		{"kubectl_exec", "", []string{kubectlPath + " --kubeconfig " + env.kubeconfig + " -n " + ns + " exec -it " + a.Pod + " -c " + agent.ContainerName + " -- " + agent.Path + " agent nsenter --target 1 -- sh"}},
		{"kubectl_debug", "", []string{kubectlPath + " --kubeconfig " + env.kubeconfig + " debug node/" + node + " -it --image=" + env.image + " --profile=sysadmin -- sh"}},
	}
	first := map[string][]trial{}
	total := map[string][]trial{}
	prompt := map[string][]trial{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Rotate the order: each side goes first, second, ... equally often.
		for j := range echo {
			k := (i + j) % len(echo)
			first[echo[k].name] = append(first[echo[k].name], timeCLI(ctx, b, echo[k].bin, echo[k].args))
			total[tru[k].name] = append(total[tru[k].name], timeCLI(ctx, b, tru[k].bin, tru[k].args))
			if echo[k].name == "kubectl_debug" {
				deleteKubectlDebugPods(ctx, b)
			}
		}
		for j := range shells {
			k := (i + j) % len(shells)
			prompt[shells[k].name] = append(prompt[shells[k].name], timeShell(ctx, b, shells[k].args[0]))
			if shells[k].name == "kubectl_debug" {
				deleteKubectlDebugPods(ctx, b)
			}
		}
	}
	b.StopTimer()
	med := median[time.Duration]
	fo := func(t trial) time.Duration { return t.firstOutput }
	tot := func(t trial) time.Duration { return t.total }
	report := map[string]any{"node": node, "image": env.image, "trials": b.N, "agent_transport": "pods/portforward to the agent's loopback listener",
		"nodeexec_transport_exec":     "agent install --transport exec: every run over pods/exec, its command line in the API server's audit log",
		"nodeexec_transport_recorded": "agent install --transport recorded: pods/portforward, each command first in a run record (Lease create, its body in the API server's audit log), checked and deleted by the agent"}
	ratios := map[string]float64{}
	for _, m := range []struct {
		name string
		data map[string][]trial
		f    func(trial) time.Duration
	}{{"echo_first_output_ms", first, fo}, {"true_total_ms", total, tot}, {"shell_prompt_ms", prompt, fo}} {
		o, x, d := med(m.data["nodeexec"], m.f), med(m.data["kubectl_exec"], m.f), med(m.data["kubectl_debug"], m.f)
		r := map[string]float64{"nodeexec": ms(o), "kubectl_exec": ms(x), "kubectl_debug": ms(d),
			"ratio_vs_kubectl_exec": float64(o) / float64(x), "ratio_vs_kubectl_debug": float64(o) / float64(d)}
		if te := m.data["nodeexec_transport_exec"]; len(te) > 0 {
			e := med(te, m.f)
			r["nodeexec_transport_exec"] = ms(e)
			r["transport_exec_ratio_vs_kubectl_exec"] = float64(e) / float64(x)
			r["transport_exec_ratio_vs_kubectl_debug"] = float64(e) / float64(d)
		}
		if tr := m.data["nodeexec_transport_recorded"]; len(tr) > 0 {
			e := med(tr, m.f)
			r["nodeexec_transport_recorded"] = ms(e)
			r["transport_recorded_ratio_vs_kubectl_exec"] = float64(e) / float64(x)
			r["transport_recorded_ratio_vs_kubectl_debug"] = float64(e) / float64(d)
			ratios[m.name+"/recorded-exec"], ratios[m.name+"/recorded-debug"] = float64(e)/float64(x), float64(e)/float64(d)
		}
		report[m.name] = r
		ratios[m.name+"/exec"], ratios[m.name+"/debug"] = float64(o)/float64(x), float64(o)/float64(d)
	}
	lost := 0
	for _, t := range first["kubectl_debug"] {
		if t.lostOutput {
			lost++
		}
	}
	report["kubectl_debug_lost_output_trials"] = lost
	report["targets"] = "issue 11.2: warm path <= 0.15x kubectl debug and <= 0.5x a bare kubectl exec into the agent pod"
	b.ReportMetric(ratios["true_total_ms/exec"], "total-vs-exec")
	b.ReportMetric(ratios["echo_first_output_ms/debug"], "first-output-vs-debug")
	b.ReportMetric(ratios["echo_first_output_ms/exec"], "first-output-vs-exec")
	b.ReportMetric(ratios["shell_prompt_ms/debug"], "prompt-vs-debug")
	b.ReportMetric(ratios["echo_first_output_ms/recorded-exec"], "recorded-first-output-vs-exec")
	b.ReportMetric(ratios["echo_first_output_ms/recorded-debug"], "recorded-first-output-vs-debug")
	b.ReportMetric(0, "ns/op")
	out, _ := json.MarshalIndent(report, "", "  ")
	b.Logf("\n%s", out)
	if f := os.Getenv("NODEEXEC_BENCH_RESIDENT_OUT"); f != "" {
		if err := os.WriteFile(f, append(out, '\n'), 0o644); err != nil {
			b.Error(err)
		}
	}
}
