//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// analysisMetric is the per-node metric the canary analysis tests push
// (labels job and node) through the test cluster's Pushgateway.
const analysisMetric = "nodeexec_e2e_analysis_errors"

// analysisSetup skips without the local cluster's Prometheus, and returns a
// Pushgateway job of its own (its metrics deleted when the test ends).
func analysisSetup(t *testing.T) string {
	t.Helper()
	if env.cluster == nil {
		t.Skip("needs the local test cluster's Prometheus and Pushgateway")
	}
	job := uniqueName("e2e-analysis-")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = env.cluster.DeleteMetrics(ctx, job)
	})
	return job
}

// pushNodeValue pushes the analysis metric of job for node.
func pushNodeValue(ctx context.Context, t *testing.T, job, node string, v float64) {
	t.Helper()
	if err := env.cluster.PushMetric(ctx, job, analysisMetric, map[string]string{"node": node}, v); err != nil {
		t.Fatal(err)
	}
}

// analysisDoc is a NodeScript on the real nodes with a canary analysis of
// job's metric: one canary, a check every second, soakTime as given, a
// tolerance of 50%; the rollback script says where it ran.
func analysisDoc(name, job, soak string) string {
	return fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  script: 'echo "applied on $NODE_NAME"'
  rollbackScript: 'echo "rolled back $NODE_NAME"'
  rollout:
    canary: 1
    soakTime: %s
    analysis:
      url: %s
      query: 'max by (node) (%s{job="%s"})'
      interval: 1s
      tolerance: "50%%"
`, name, realNodes, soak, env.cluster.PrometheusURL(), analysisMetric, job)
}

// soakingCanaryNode returns the canary (the node that ran the script) and
// the other node.
func soakingCanaryNode(t *testing.T, pods *podLog) (canary, other string) {
	t.Helper()
	for _, n := range env.nodes[:2] {
		if len(pods.runs(n, v1alpha1.ActionRun)) > 0 {
			canary = n
		} else {
			other = n
		}
	}
	if canary == "" || other == "" {
		t.Fatalf("want the script run on exactly one node; runs: %v, %v", pods.runs(env.nodes[0], v1alpha1.ActionRun), pods.runs(env.nodes[1], v1alpha1.ActionRun))
	}
	return canary, other
}

// TestWatcherCanaryAnalysisRegression: the canary's metric (pushed to the
// real Prometheus) goes beyond the other node's by more than the tolerance
// while it soaks: the rollout halts (AnalysisFailed, with the numbers in
// status.analysis, the condition and an Event CanaryRegressed), the
// rollback script runs on the canary, and the other node never runs.
func TestWatcherCanaryAnalysisRegression(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	job := analysisSetup(t)
	name := uniqueName("e2e-analysis-")
	cleanupNodeScript(t, dyn, name)
	for _, n := range env.nodes[:2] {
		pushNodeValue(ctx, t, job, n, 0.1)
	}
	pods := recordPods(t, name)
	startWatcher(t, dyn)
	start := time.Now()
	applyNodeScript(ctx, t, dyn, analysisDoc(name, job, "60s"))
	waitNodeScript(ctx, t, dyn, name, 60*time.Second, "soaking with a passing analysis", func(ns *v1alpha1.NodeScript) bool {
		a := ns.Status.Analysis
		return ns.Status.Stage == v1alpha1.StageSoaking && a != nil && a.Verdict == v1alpha1.VerdictPassed
	})
	canary, other := soakingCanaryNode(t, pods)
	pushNodeValue(ctx, t, job, canary, 0.5)
	ns := waitNodeScript(ctx, t, dyn, name, 30*time.Second, "halted by the analysis, the canary rolled back", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageHalted && ns.Status.RolledBack == 1
	})
	t.Logf("halted and rolled back %s after %s", canary, time.Since(start).Round(time.Second))
	a := ns.Status.Analysis
	if a == nil || a.Verdict != v1alpha1.VerdictRegressed || a.Canary == nil || a.Canary.String() != "0.5" || a.Baseline == nil || a.Baseline.String() != "0.1" ||
		!strings.Contains(a.Message, "canaries' mean 0.5 > baseline 0.1 + 50% = 0.15") {
		t.Errorf("status.analysis %+v", a)
	}
	if c := findCond(ns, v1alpha1.ConditionHalted); c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonAnalysisFailed ||
		!strings.Contains(c.Message, "canary "+canary) || !strings.Contains(c.Message, "0.5 > baseline 0.1") {
		t.Errorf("Halted condition %+v; want True, AnalysisFailed, with the numbers", c)
	}
	// The rollback ran on the canary: its pod, and its outcome recorded in
	// the node's state.
	s, _ := nodeState(ctx, t, canary, name)
	if s.Phase != v1alpha1.PhaseRolledBack || s.Rollback != v1alpha1.PhaseSucceeded || s.RollbackExitCode == nil || *s.RollbackExitCode != 0 || s.Reason != v1alpha1.ReasonAnalysisFailed {
		t.Errorf("canary %s state %+v", canary, s)
	}
	if got := pods.runs(canary, v1alpha1.ActionRollback); len(got) != 1 {
		t.Errorf("rollback pods on %s: %v, want one", canary, got)
	}
	events, err := env.client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=" + v1alpha1.ReasonCanaryRegressed})
	if err != nil || len(events.Items) == 0 || !strings.Contains(events.Items[0].Message, "0.5 > baseline 0.1") {
		t.Errorf("Event %s: %v, %+v", v1alpha1.ReasonCanaryRegressed, err, events)
	}
	out, errOut, code := cli(ctx, "", "status", name)
	if code != 0 || !strings.Contains(out, "canary analysis: Regressed (canary 0.5, baseline 0.1") || !strings.Contains(out, "AnalysisFailed") {
		t.Errorf("nodeexec status: exit %d\n%s%s", code, out, errOut)
	}
	// The other node never ran, and does not while halted.
	time.Sleep(2 * time.Second)
	if got := pods.runs(other, v1alpha1.ActionRun); len(got) != 0 {
		t.Errorf("the script ran on %s after the regression: %v", other, got)
	}
}

// TestWatcherCanaryAnalysisPasses: the canary's metric stays within the
// tolerance through the soak: the rollout is promoted and completes.
func TestWatcherCanaryAnalysisPasses(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	job := analysisSetup(t)
	name := uniqueName("e2e-analysis-")
	cleanupNodeScript(t, dyn, name)
	for _, n := range env.nodes[:2] {
		pushNodeValue(ctx, t, job, n, 0.1)
	}
	startWatcher(t, dyn)
	start := time.Now()
	applyNodeScript(ctx, t, dyn, analysisDoc(name, job, "4s"))
	ns := waitNodeScript(ctx, t, dyn, name, 90*time.Second, "complete", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete || ns.Status.Stage == v1alpha1.StageHalted
	})
	t.Logf("complete after %s", time.Since(start).Round(time.Second))
	if ns.Status.Stage != v1alpha1.StageComplete || ns.Status.Succeeded != 2 {
		t.Fatalf("status %+v", ns.Status)
	}
	if a := ns.Status.Analysis; a == nil || a.Verdict != v1alpha1.VerdictPassed || a.Checks < 2 || a.PassingSince == nil || a.CheckedAt.Sub(a.PassingSince.Time) < 4*time.Second {
		t.Errorf("status.analysis %+v; want Passed, checks spanning the 4s soak", a)
	}
}

// TestApplyRejectsBadAnalysis: nodeexec apply refuses bad canary analysis
// input naming the field, applying nothing; the API server's schema refuses
// an analysis without a soak time.
func TestApplyRejectsBadAnalysis(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	doc := func(name, rollout string) string {
		return fmt.Sprintf("apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: %s}\nspec:\n  nodeSelector: {}\n  script: 'true'\n  rollbackScript: 'true'\n  rollout:\n%s", name, rollout)
	}
	const ok = "    soakTime: 1m\n    analysis: {url: 'http://127.0.0.1:19090', query: 'max by (node) (x)', tolerance: '10%%'%s}\n"
	cases := []struct{ name, rollout, want string }{
		{"query", "    soakTime: 1m\n    analysis: {url: 'http://p:9090', query: 'sum by (node (x)', tolerance: '10%'}\n", "spec.rollout.analysis.query"},
		{"scalar-query", "    soakTime: 1m\n    analysis: {url: 'http://p:9090', query: '1 + 1', tolerance: '10%'}\n", "spec.rollout.analysis.query"},
		{"url", "    soakTime: 1m\n    analysis: {url: 'prometheus:9090', query: 'x', tolerance: '10%'}\n", "spec.rollout.analysis.url"},
		{"tolerance", "    soakTime: 1m\n    analysis: {url: 'http://p:9090', query: 'x', tolerance: '0.1'}\n", "spec.rollout.analysis.tolerance"},
		{"threshold", "    soakTime: 1m\n    analysis: {url: 'http://p:9090', query: 'x', threshold: many}\n", "threshold"},
		{"interval", "    soakTime: 1m\n    analysis: {url: 'http://p:9090', query: 'x', tolerance: '10%', interval: 10ms}\n", "spec.rollout.analysis.interval"},
		{"no-soak", "    analysis: {url: 'http://p:9090', query: 'x', tolerance: '10%'}\n", "spec.rollout.soakTime"},
		{"neither", "    soakTime: 1m\n    analysis: {url: 'http://p:9090', query: 'x'}\n", "spec.rollout.analysis.tolerance"},
		{"direction", fmt.Sprintf(ok, ", direction: Up"), "spec.rollout.analysis.direction"},
		{"node-label", fmt.Sprintf(ok, ", nodeLabel: 'a-b'"), "spec.rollout.analysis.nodeLabel"},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := uniqueName("e2e-bad-")
			file := dir + "/" + c.name + ".yaml"
			if err := os.WriteFile(file, []byte(doc(name, c.rollout)), 0o644); err != nil {
				t.Fatal(err)
			}
			_, errOut, code := cli(ctx, "", "apply", "-f", file)
			if code == 0 || !strings.Contains(errOut, c.want) {
				t.Errorf("apply: exit %d, stderr %q; want a failure naming %s", code, errOut, c.want)
			}
			if _, err := dyn.Resource(v1alpha1.Resource).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("nodescript %s exists after a refused apply", name)
				_ = dyn.Resource(v1alpha1.Resource).Delete(ctx, name, metav1.DeleteOptions{})
			}
		})
	}
	// A client that bypasses nodeexec apply: the CRD's rules refuse an
	// analysis without soakTime, and one without rollbackScript.
	for _, c := range []struct {
		spec map[string]any
		want string
	}{
		{map[string]any{"rollbackScript": "true", "rollout": map[string]any{"analysis": map[string]any{"url": "http://p:9090", "query": "x", "tolerance": "10%"}}}, "analysis needs soakTime > 0"},
		{map[string]any{"rollout": map[string]any{"soakTime": "1m", "analysis": map[string]any{"url": "http://p:9090", "query": "x", "threshold": 0.05}}}, "rollout.analysis needs rollbackScript"},
	} {
		spec := map[string]any{"nodeSelector": map[string]any{}, "script": "true"}
		for k, v := range c.spec {
			spec[k] = v
		}
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "nodeexec.io/v1alpha1", "kind": "NodeScript", "metadata": map[string]any{"name": uniqueName("e2e-bad-")}, "spec": spec,
		}}
		if _, err := dyn.Resource(v1alpha1.Resource).Create(ctx, u, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("API server: %v; want a refusal: %s", err, c.want)
			if err == nil {
				_ = dyn.Resource(v1alpha1.Resource).Delete(ctx, u.GetName(), metav1.DeleteOptions{})
			}
		}
	}
}
