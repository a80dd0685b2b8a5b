//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// TestWatcherForecast: spec.rollout.fitWindow, status.durations and
// status.forecast on the real nodes.
//
// The window (UTC, every day) opened 20 minutes before the current minute
// and closes 10 minutes after it, so it is open for the whole test and
// closes 9 to 10 minutes from its start; it is 30 minutes long.
// spec.rollout.windowMargin is 10m30s: more than is left of today's window
// whatever the second the test starts at, and less than a whole window
// minus any plausible run. So, deterministically:
//   - the first node (the canary) starts: nothing is learned yet;
//   - its run (sleep 2) is learned into status.durations;
//   - the second node is not started: hold WindowTooShort, a
//     WindowTooShort Event, the Progressing condition naming the close;
//   - status.forecast: 1 node left, 1 window (tomorrow's), an ETA about a
//     day away; `nodeexec status` shows the forecast and the durations;
//   - a restarted watcher keeps the samples and the hold;
//   - nodeexec apply refuses a negative windowMargin, and so does the CRD.
func TestWatcherForecast(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	stop := startWatcher(t, dyn)
	name := uniqueName("e2e-forecast-")
	pods := recordPods(t, name)
	cleanupNodeScript(t, dyn, name, env.nodes[0], env.nodes[1])

	minute := time.Now().UTC().Truncate(time.Minute)
	start, end := minute.Add(-20*time.Minute), minute.Add(10*time.Minute)
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  script: 'sleep 2'
  backend: {image: %q}
  window: {start: %q, end: %q}
  rollout: {canary: 1, maxConcurrency: 1, windowMargin: 10m30s}
`, name, realNodes, env.image, start.Format("15:04"), end.Format("15:04")))

	ns := waitNodeScript(ctx, t, dyn, name, 60*time.Second, "held WindowTooShort after the canary", func(ns *v1alpha1.NodeScript) bool {
		c := findCond(ns, v1alpha1.ConditionProgressing)
		return ns.Status.Succeeded == 1 && c != nil && c.Reason == v1alpha1.HoldWindowTooShort
	})
	c := findCond(ns, v1alpha1.ConditionProgressing)
	if !strings.Contains(c.Message, end.Format(time.RFC3339)) || !strings.Contains(c.Message, "spec.rollout.windowMargin 10m30s") {
		t.Errorf("Progressing message %q: want the close %s and the margin", c.Message, end.Format(time.RFC3339))
	}
	d := ns.Status.Durations
	if d == nil || d.Run == nil || len(d.Run.Samples) != 1 || d.Run.Samples[0] < 2 || d.Run.P95 != d.Run.Samples[0] {
		t.Fatalf("status.durations %+v, want one run sample of 2 s or more", d)
	}
	t.Logf("learned run: %ds; %s", d.Run.Samples[0], c.Message)
	f := ns.Status.Forecast
	if f == nil || f.NodesLeft != 1 || f.WindowsNeeded != 1 || f.ETA == nil ||
		f.ETA.Sub(start.Add(24*time.Hour)) != time.Duration(d.Run.P50)*time.Second {
		t.Fatalf("status.forecast %+v, want 1 node left in 1 window, done at tomorrow's %s + %ds", f, start.Format("15:04"), d.Run.P50)
	}
	// The Event, once (the recorder writes it in the background).
	tooShort := func() (n int32) {
		events, err := env.client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=" + v1alpha1.ReasonWindowTooShort})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events.Items {
			n += max(e.Count, 1)
		}
		return n
	}
	if !waitFor(10*time.Second, func() bool { return tooShort() > 0 }) {
		t.Error("no WindowTooShort Event on the NodeScript")
	}
	out, errOut, code := cli(ctx, "", "status", name)
	if code != 0 || !strings.Contains(out, "forecast: 1 node(s) left") || !strings.Contains(out, "≈ 1 window(s), done about") ||
		!strings.Contains(out, "durations (p50/p95, samples): run ") || !strings.Contains(out, v1alpha1.HoldWindowTooShort) {
		t.Errorf("nodeexec status: exit %d\n%s%s", code, out, errOut)
	}

	// Which node ran: the other was never started.
	var ran, held []string
	for _, n := range env.nodes[:2] {
		if len(pods.runs(n, v1alpha1.ActionRun)) > 0 {
			ran = append(ran, n)
		} else {
			held = append(held, n)
		}
	}
	if len(ran) != 1 || len(held) != 1 {
		t.Fatalf("run pods on %v, none on %v; want exactly one node run", ran, held)
	}

	// A restarted watcher keeps the samples (status.durations) and the hold.
	stop()
	startWatcher(t, dyn)
	time.Sleep(4 * time.Second)
	ns = waitNodeScript(ctx, t, dyn, name, 10*time.Second, "still held after a restart", func(ns *v1alpha1.NodeScript) bool {
		c := findCond(ns, v1alpha1.ConditionProgressing)
		return c != nil && c.Reason == v1alpha1.HoldWindowTooShort
	})
	if got := ns.Status.Durations; got == nil || got.Run == nil || !slices.Equal(got.Run.Samples, d.Run.Samples) {
		t.Errorf("status.durations after a restart %+v, want %v", got, d.Run.Samples)
	}
	if n := tooShort(); n != 1 {
		t.Errorf("%d WindowTooShort Events, want 1 (once per window, a restart included)", n)
	}
	if got := pods.runs(held[0], v1alpha1.ActionRun); len(got) != 0 {
		t.Errorf("node %s started after a restart (pods %v): it would overrun the window", held[0], got)
	}

	// Bad input: a negative margin, refused by nodeexec apply and the CRD.
	bad := uniqueName("e2e-bad-")
	file := t.TempDir() + "/bad.yaml"
	doc := fmt.Sprintf("apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: %s}\nspec:\n  nodeSelector: {}\n  script: 'true'\n  rollout: {windowMargin: -1m}\n", bad)
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := cli(ctx, "", "apply", "-f", file); code == 0 || !strings.Contains(errOut, "spec.rollout.windowMargin") {
		t.Errorf("apply windowMargin -1m: exit %d, stderr %q; want a refusal naming spec.rollout.windowMargin", code, errOut)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nodeexec.io/v1alpha1", "kind": "NodeScript", "metadata": map[string]any{"name": bad},
		"spec": map[string]any{"nodeSelector": map[string]any{}, "script": "true", "rollout": map[string]any{"windowMargin": "-1m"}},
	}}
	if _, err := dyn.Resource(v1alpha1.Resource).Create(ctx, u, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "spec.rollout.windowMargin") {
		t.Errorf("the CRD took windowMargin -1m: %v", err)
	}
	if _, err := dyn.Resource(v1alpha1.Resource).Get(ctx, bad, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("nodescript %s exists after a refused apply", bad)
		_ = dyn.Resource(v1alpha1.Resource).Delete(ctx, bad, metav1.DeleteOptions{})
	}
}
