//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// nodeEvents are the messages of the Events with reason on node that
// name NodeScript name (Events of earlier runs stay for an hour).
func nodeEvents(ctx context.Context, t *testing.T, node, reason, name string) []string {
	t.Helper()
	evs, err := env.client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node + ",reason=" + reason})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs.Items {
		if strings.Contains(e.Message, "nodescript "+name+":") {
			out = append(out, e.Message)
		}
	}
	return out
}

// TestWatcherReapplySchedule: spec.reapply.schedule "* * * * *" on both
// real nodes, whose recorded success of the current spec (seeded in their
// state annotation) is two minutes old, so older than the schedule's
// latest activation: both run again at once (Event ReapplySchedule), and
// their new success is not rerun before the next activation.
func TestWatcherReapplySchedule(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	name := uniqueName("e2e-sched-")
	cleanupNodeScript(t, dyn, name)
	doc := fmt.Sprintf(`apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  rollout: {canary: 0, maxConcurrency: 2}
  reapply: {schedule: "* * * * *"}
  script: 'echo reapplied'
`, name, realNodes)
	scripts, err := nodescripts.ParseNodeScripts(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	hash := v1alpha1.SpecHash(&scripts[0].Spec)
	seeded := time.Now().Add(-2 * time.Minute).UTC().Truncate(time.Second)
	for _, node := range env.nodes[:2] {
		s := nodescripts.NodeState{Hash: hash, Phase: v1alpha1.PhaseSucceeded, Since: seeded, Attempts: 1}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{nodescripts.StateAnnotation(name): s.Encode()}}})
		if _, err := env.client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pods := recordPods(t, name)
	startWatcher(t, dyn)
	applyNodeScript(ctx, t, dyn, doc)
	waitFor(40*time.Second, func() bool {
		for _, node := range env.nodes[:2] {
			s, _ := nodeState(ctx, t, node, name)
			if s.Phase != v1alpha1.PhaseSucceeded || !s.Since.After(seeded) {
				return false
			}
		}
		return true
	})
	for _, node := range env.nodes[:2] {
		s, _ := nodeState(ctx, t, node, name)
		if s.Phase != v1alpha1.PhaseSucceeded || s.Attempts != 2 || !s.Since.After(seeded) {
			t.Errorf("node %s: %+v; want a second success after %s", node, s, seeded)
		}
		if runs := pods.runs(node, v1alpha1.ActionRun); len(runs) != 1 {
			t.Errorf("node %s: run pods %v, want one", node, runs)
		}
		if evs := nodeEvents(ctx, t, node, v1alpha1.ReasonReapplySchedule, name); len(evs) == 0 || !strings.Contains(evs[0], "spec.reapply.schedule") {
			t.Errorf("node %s: Events %s: %q", node, v1alpha1.ReasonReapplySchedule, evs)
		}
	}
	// The new success is after the latest activation: nothing more runs
	// before the next one (the next minute; its rerun is not waited for).
	if next := time.Now().Truncate(time.Minute).Add(time.Minute); time.Until(next) > 5*time.Second {
		time.Sleep(min(3*time.Second, time.Until(next)-2*time.Second))
		for _, node := range env.nodes[:2] {
			if runs := pods.runs(node, v1alpha1.ActionRun); len(runs) != 1 {
				t.Errorf("node %s: ran again before the next activation: %v", node, runs)
			}
		}
	}
	out, errOut, code := cli(ctx, "", "status", name)
	if code != 0 || !strings.Contains(out, "on schedule * * * * *") {
		t.Errorf("nodeexec status: exit %d, %s%s; want the schedule", code, out, errOut)
	}
}

// TestWatcherUninstall: deleting a NodeScript with spec.uninstallScript
// runs it on both real nodes, where the script succeeded (each left a file
// on the node, which the uninstall removes); it fails on the second node
// (exit 3), which is reported (Event, nodeexec status) and keeps its state
// annotation; the NodeScript goes once both finished. The uninstall pods
// are not owned by the NodeScript, and its run pods were not collected
// before them (the finalizer holds the NodeScript).
func TestWatcherUninstall(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	name := uniqueName("e2e-uninst-")
	cleanupNodeScript(t, dyn, name)
	a, b := env.nodes[0], env.nodes[1]
	file := "/var/tmp/nodeexec-e2e-" + name + "-$NODE_NAME"
	t.Cleanup(func() {
		m, _ := filepath.Glob(strings.ReplaceAll(file, "$NODE_NAME", "*"))
		for _, p := range m {
			_ = os.Remove(p)
		}
	})
	pods := recordPods(t, name)
	startWatcher(t, dyn)
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  rollout: {canary: 0, maxConcurrency: 2}
  script: 'echo installed > %s.installed'
  uninstallScript: |
    if [ "$NODE_NAME" = %q ]; then echo "cannot uninstall here" >&2; exit 3; fi
    rm -f %s.installed
    echo uninstalled > %s.uninstalled
`, name, realNodes, file, b, file, file))
	waitNodeScript(ctx, t, dyn, name, 40*time.Second, "complete", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Succeeded == 2
	})
	path := func(node, ext string) string { return strings.ReplaceAll(file, "$NODE_NAME", node) + ext }
	for _, node := range []string{a, b} {
		if _, err := os.Stat(path(node, ".installed")); err != nil {
			t.Fatalf("the script left no file on %s: %v", node, err)
		}
	}
	if err := dyn.Resource(v1alpha1.Resource).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if !waitFor(40*time.Second, func() bool {
		_, err := dyn.Resource(v1alpha1.Resource).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}) {
		ns, _ := nodescripts.Get(ctx, dyn, name)
		t.Fatalf("the NodeScript is still there 40s after its deletion: %+v", ns)
	}
	// Node a: uninstalled (the file is gone, the uninstall's own is there),
	// its record removed.
	if _, err := os.Stat(path(a, ".installed")); !os.IsNotExist(err) {
		t.Errorf("node %s: the uninstall script did not remove the file: %v", a, err)
	}
	if _, err := os.Stat(path(a, ".uninstalled")); err != nil {
		t.Errorf("node %s: the uninstall script did not run: %v", a, err)
	}
	if s, n := nodeState(ctx, t, a, name); s.Hash != "" || n.Annotations[nodescripts.StateAnnotation(name)] != "" {
		t.Errorf("node %s keeps a state after a successful uninstall: %+v", a, s)
	}
	if evs := nodeEvents(ctx, t, a, v1alpha1.ReasonUninstallSucceeded, name); len(evs) != 1 {
		t.Errorf("node %s: Events %s: %q", a, v1alpha1.ReasonUninstallSucceeded, evs)
	}
	// Node b: failed, reported, its record kept.
	if _, err := os.Stat(path(b, ".installed")); err != nil {
		t.Errorf("node %s: the file is gone though the uninstall failed: %v", b, err)
	}
	s, _ := nodeState(ctx, t, b, name)
	if u := s.Uninstall; u == nil || u.Phase != v1alpha1.UninstallFailed || u.ExitCode == nil || *u.ExitCode != 3 {
		t.Errorf("node %s: uninstall record %+v, want Failed with exit code 3", b, u)
	}
	if evs := nodeEvents(ctx, t, b, v1alpha1.ReasonUninstallFailed, name); len(evs) != 1 || !strings.Contains(evs[0], "exit code 3") {
		t.Errorf("node %s: Events %s: %q", b, v1alpha1.ReasonUninstallFailed, evs)
	}
	out, errOut, code := cli(ctx, "", "status", name)
	if code != 0 || !strings.Contains(out, b+": Succeeded, uninstall Failed: exit code 3") || !strings.Contains(out, "kubectl annotate node NODE "+nodescripts.StateAnnotation(name)+"-") {
		t.Errorf("nodeexec status of the deleted NodeScript: exit %d\n%s%s", code, out, errOut)
	}
	for _, node := range []string{a, b} {
		if runs := pods.runs(node, v1alpha1.ActionUninstall); len(runs) != 1 {
			t.Errorf("node %s: uninstall pods %v, want one", node, runs)
		}
	}
}

// TestApplyRejectsBadLifecycle: a bad spec.reapply.schedule and too long
// a spec.uninstallScript are refused by nodeexec apply, naming the field,
// and nothing is applied.
func TestApplyRejectsBadLifecycle(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	good := "apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: %s}\nspec:\n  nodeSelector: {}\n  script: 'true'\n"
	cases := []struct{ name, extra, want string }{
		{"cron", "  reapply: {schedule: '61 * * * *'}\n", "spec.reapply.schedule"},
		{"cron-zone", "  reapply: {schedule: 'CRON_TZ=Mars/Olympus 0 3 * * *'}\n", "spec.reapply.schedule"},
		{"cron-every", "  reapply: {schedule: '@every 1s'}\n", "spec.reapply.schedule"},
		{"uninstall-long", "  uninstallScript: '" + strings.Repeat("x", v1alpha1.MaxScriptBytes+1) + "'\n", "spec.uninstallScript"},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := uniqueName("e2e-badlife-")
			file := dir + "/" + c.name + ".yaml"
			body := fmt.Sprintf(good, name+"-ok") + "---\n" + fmt.Sprintf(good, name) + c.extra
			if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			out, errOut, code := cli(ctx, "", "apply", "-f", file)
			if code == 0 || !strings.Contains(errOut, c.want) {
				t.Errorf("apply: exit %d, stderr %.300q; want a failure naming %s", code, errOut, c.want)
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
