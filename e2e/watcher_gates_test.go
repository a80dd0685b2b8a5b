//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// The e2e tests of spec.gates run on the two real nodes against the test
// cluster's real Prometheus, Pushgateway and Alertmanager (loopback; the
// watcher runs in this process). Each rollout: canary 1, one node at a
// time, gates read every second.

// gateOf is the status of gate name, or nil.
func gateOf(ns *v1alpha1.NodeScript, name string) *v1alpha1.GateStatus {
	for i := range ns.Status.Gates {
		if ns.Status.Gates[i].Name == name {
			return &ns.Status.Gates[i]
		}
	}
	return nil
}

// gatedRuns is how many run pods of the NodeScript were created so far.
func gatedRuns(pods *podLog) int {
	return len(pods.runs(env.nodes[0], v1alpha1.ActionRun)) + len(pods.runs(env.nodes[1], v1alpha1.ActionRun))
}

// holds checks that nothing new starts for d while the gate stays closed.
func holds(t *testing.T, pods *podLog, want int, d time.Duration, what string) {
	t.Helper()
	time.Sleep(d)
	if got := gatedRuns(pods); got != want {
		t.Fatalf("%s: %d run pods, want %d (a closed gate starts nothing)", what, got, want)
	}
}

// TestWatcherGateAlerts: a firing alert (matching the gate's matchers, not
// its ignore) holds the rollout, condition Gated naming it; the API
// server restarted during the wait changes nothing; resolving the alert
// releases the rollout, which completes.
func TestWatcherGateAlerts(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	name := uniqueName("e2e-gate-am-")
	cleanupNodeScript(t, dyn, name)
	alert := "NodeexecGateE2E"
	labels := map[string]string{"probe": name, "severity": "critical"}
	if err := env.cluster.FireAlert(ctx, alert, labels); err != nil {
		t.Fatal(err)
	}
	// Fired too, but ignored by the gate.
	if err := env.cluster.FireAlert(ctx, "Watchdog", map[string]string{"probe": name}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.cluster.ResolveAlert(context.Background(), alert, labels)
		_ = env.cluster.ResolveAlert(context.Background(), "Watchdog", map[string]string{"probe": name})
	})
	pods := recordPods(t, name)
	startWatcher(t, dyn)
	t0 := time.Now()
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  script: 'true'
  rollout: {canary: 1}
  gates:
  - name: no-critical
    interval: 1s
    alerts: {url: %q, matchers: ["probe=%s"], ignore: [alertname=Watchdog]}
`, name, realNodes, env.cluster.AlertmanagerURL(), name))
	ns := waitNodeScript(ctx, t, dyn, name, 30*time.Second, "gated by the alert", func(ns *v1alpha1.NodeScript) bool {
		c := findCond(ns, v1alpha1.ConditionGated)
		return c != nil && c.Status == metav1.ConditionTrue
	})
	if c := findCond(ns, v1alpha1.ConditionGated); !strings.Contains(c.Message, "no-critical") || !strings.Contains(c.Message, alert) || strings.Contains(c.Message, "Watchdog") {
		t.Errorf("condition Gated %q: want it to name the gate and %s, not Watchdog", c.Message, alert)
	}
	if p := findCond(ns, v1alpha1.ConditionProgressing); p == nil || p.Reason != v1alpha1.HoldGated {
		t.Errorf("condition Progressing %+v, want reason %s", p, v1alpha1.HoldGated)
	}
	out, _, _ := cli(ctx, "", "status", name)
	if !strings.Contains(out, "gate no-critical: closed") {
		t.Errorf("nodeexec status lacks the closed gate:\n%s", out)
	}
	holds(t, pods, 0, 2*time.Second, "alert firing")

	// The API server restarted during the wait: the gate is read again and
	// holds, and the rollout goes on once the alert is resolved.
	t.Cleanup(func() { restoreCluster(context.WithoutCancel(ctx), t) })
	if err := env.cluster.RestartAPIServer(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	waitNodeScript(ctx, t, dyn, name, 30*time.Second, "gate read again after the API server restart", func(ns *v1alpha1.NodeScript) bool {
		g := gateOf(ns, "no-critical")
		return g != nil && !g.Open && g.LastChecked != nil && g.LastChecked.Time.After(restarted.Add(time.Second))
	})
	holds(t, pods, 0, 0, "alert firing after the API server restart")
	if err := env.cluster.ResolveAlert(ctx, alert, labels); err != nil {
		t.Fatal(err)
	}
	ns = waitNodeScript(ctx, t, dyn, name, 60*time.Second, "complete after the alert resolved", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Succeeded == 2
	})
	if c := findCond(ns, v1alpha1.ConditionGated); c != nil && c.Status == metav1.ConditionTrue {
		t.Errorf("condition Gated still True: %+v", c)
	}
	t.Logf("TestWatcherGateAlerts took %s", time.Since(t0).Round(time.Millisecond))
}

// TestWatcherGatePrometheus: a PromQL gate with a condition on a pushed
// metric holds the rollout while the value fails it and lets the canary go
// once it passes; Prometheus stopped while the canary runs closes the gate
// with the error in status, and the second node waits until Prometheus is
// back.
func TestWatcherGatePrometheus(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	name := uniqueName("e2e-gate-prom-")
	cleanupNodeScript(t, dyn, name)
	job, metric := name, "nodeexec_gate_e2e_errors"
	t.Cleanup(func() {
		_ = env.cluster.StartPrometheus(context.Background())
		_ = env.cluster.DeleteMetrics(context.Background(), job)
	})
	if err := env.cluster.PushMetric(ctx, job, metric, nil, 5); err != nil {
		t.Fatal(err)
	}
	pods := recordPods(t, name)
	startWatcher(t, dyn)
	t0 := time.Now()
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  script: 'sleep 4'
  rollout: {canary: 1}
  gates:
  - name: error-rate
    interval: 1s
    prometheus: {url: %q, query: '%s{job="%s"}', condition: "< 1"}
`, name, realNodes, env.cluster.PrometheusURL(), metric, job))
	waitNodeScript(ctx, t, dyn, name, 30*time.Second, "gated by the metric's 5", func(ns *v1alpha1.NodeScript) bool {
		g := gateOf(ns, "error-rate")
		return g != nil && !g.Open && strings.Contains(g.Value, " 5") && strings.Contains(g.Message, "does not satisfy < 1")
	})
	holds(t, pods, 0, time.Second, "metric 5, condition < 1")
	if err := env.cluster.PushMetric(ctx, job, metric, nil, 0); err != nil {
		t.Fatal(err)
	}
	waitNodeScript(ctx, t, dyn, name, 30*time.Second, "the canary running", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Running == 1
	})
	if err := env.cluster.StopPrometheus(ctx); err != nil {
		t.Fatal(err)
	}
	ns := waitNodeScript(ctx, t, dyn, name, 30*time.Second, "the canary done, the gate closed by the error", func(ns *v1alpha1.NodeScript) bool {
		g := gateOf(ns, "error-rate")
		return ns.Status.Succeeded == 1 && ns.Status.Running == 0 && g != nil && !g.Open && g.Value == "error"
	})
	if g := gateOf(ns, "error-rate"); !strings.Contains(g.Message, "the check failed") || !strings.Contains(g.Message, "connection refused") {
		t.Errorf("gate message %q: want the error", g.Message)
	}
	holds(t, pods, 1, 2*time.Second, "Prometheus down")
	if err := env.cluster.StartPrometheus(ctx); err != nil {
		t.Fatal(err)
	}
	waitNodeScript(ctx, t, dyn, name, 60*time.Second, "complete once Prometheus is back", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Succeeded == 2
	})
	t.Logf("TestWatcherGatePrometheus took %s", time.Since(t0).Round(time.Millisecond))
}

// TestWatcherGateCEL: a CEL gate over a Deployment holds the rollout while
// the Deployment is not available, and lets it go once scaled to available.
func TestWatcherGateCEL(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	name := uniqueName("e2e-gate-cel-")
	cleanupNodeScript(t, dyn, name)
	nsName := name
	if _, err := env.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.client.CoreV1().Namespaces().Delete(context.Background(), nsName, metav1.DeleteOptions{})
	})
	labels := map[string]string{"app": "gate-e2e"}
	pod := sleepingPod("", "", labels)
	pod.Spec.NodeName = ""
	pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "type", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"kwok"}}}}},
	}}}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: nsName},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod.Spec},
		},
	}
	if _, err := env.client.AppsV1().Deployments(nsName).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := recordPods(t, name)
	startWatcher(t, dyn)
	t0 := time.Now()
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  script: 'true'
  rollout: {canary: 1, maxConcurrency: 2}
  gates:
  - name: web-available
    interval: 1s
    cel:
      resource: {apiVersion: apps/v1, kind: Deployment, namespace: %s, name: web}
      expression: object.spec.replicas > 0 && has(object.status.availableReplicas) && object.status.availableReplicas == object.spec.replicas
`, name, realNodes, nsName))
	waitNodeScript(ctx, t, dyn, name, 30*time.Second, "gated by the Deployment", func(ns *v1alpha1.NodeScript) bool {
		g := gateOf(ns, "web-available")
		return g != nil && !g.Open && strings.HasPrefix(g.Value, "false")
	})
	holds(t, pods, 0, time.Second, "Deployment not available")
	if _, err := env.client.AppsV1().Deployments(nsName).Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNodeScript(ctx, t, dyn, name, 90*time.Second, "complete once the Deployment is available", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Succeeded == 2
	})
	t.Logf("TestWatcherGateCEL took %s", time.Since(t0).Round(time.Millisecond))
}

// TestApplyRejectsBadGates: `nodeexec apply` refuses each bad gate naming
// the field, and applies nothing of the file.
func TestApplyRejectsBadGates(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	good := "apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: %s}\nspec:\n  nodeSelector: {}\n  script: 'true'\n"
	am := "alerts: {url: 'http://127.0.0.1:9093'}"
	cases := []struct{ name, gates, want string }{
		{"promql", "[{name: g, prometheus: {url: 'http://127.0.0.1:9090', query: 'sum(rate(x[5m])'}}]", "spec.gates[0].prometheus.query"},
		{"condition", "[{name: g, prometheus: {url: 'http://127.0.0.1:9090', query: up, condition: 'about 3'}}]", "spec.gates[0].prometheus.condition"},
		{"cel-compile", "[{name: g, cel: {resource: {apiVersion: apps/v1, kind: Deployment, namespace: a, name: b}, expression: 'object.spec.replicas =='}}]", "spec.gates[0].cel.expression"},
		{"cel-type", "[{name: g, cel: {resource: {apiVersion: v1, kind: Node}, expression: 'objects.size()'}}]", "spec.gates[0].cel.expression"},
		{"url", "[{name: g, alerts: {url: 'ftp://am:9093'}}]", "spec.gates[0].alerts.url"},
		{"matcher", "[{name: g, alerts: {url: 'http://am:9093', matchers: [severity]}}]", "spec.gates[0].alerts.matchers[0]"},
		{"duplicate", "[{name: g, " + am + "}, {name: g, " + am + "}]", "spec.gates[1]"},
		{"negative-for", "[{name: g, for: -1s, " + am + "}]", "spec.gates[0].for"},
		{"for-syntax", "[{name: g, for: soon, " + am + "}]", "spec.gates[0].for"},
		{"negative-interval", "[{name: g, interval: -5s, " + am + "}]", "spec.gates[0].interval"},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := uniqueName("e2e-badgate-")
			file := dir + "/" + c.name + ".yaml"
			body := fmt.Sprintf(good, name+"-ok") + "---\n" + fmt.Sprintf(good, name) + "  gates: " + c.gates + "\n"
			if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			out, errOut, code := cli(ctx, "", "apply", "-f", file)
			if code == 0 || !strings.Contains(errOut, c.want) {
				t.Errorf("apply: exit %d, stderr %q; want a failure naming %s", code, errOut, c.want)
			}
			for _, n := range []string{name, name + "-ok"} {
				if _, err := dyn.Resource(v1alpha1.Resource).Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					t.Errorf("nodescript %s exists after a refused apply (stdout %q)", n, out)
					_ = dyn.Resource(v1alpha1.Resource).Delete(ctx, n, metav1.DeleteOptions{})
				}
			}
		})
	}
}
