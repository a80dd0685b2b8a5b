//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec/watcher"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// TestWatcherPauseAndWindow: a paused NodeScript starts nothing until
// `nodeexec resume`; one whose maintenance window is closed starts nothing
// and says when the window opens (status, `nodeexec status`), and runs once
// the window includes now. Neither change reruns a node.
func TestWatcherPauseAndWindow(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	startWatcher(t, dyn)
	node := env.nodes[0]
	held := func(name, reason string) {
		t.Helper()
		ns := waitNodeScript(ctx, t, dyn, name, 30*time.Second, "held: "+reason, func(ns *v1alpha1.NodeScript) bool {
			c := findCond(ns, v1alpha1.ConditionProgressing)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason
		})
		if ns.Status.Running != 0 || ns.Status.Succeeded != 0 {
			t.Errorf("held (%s): status %+v", reason, ns.Status)
		}
		pods, err := env.client.CoreV1().Pods(watcher.DefaultNamespace).List(ctx, metav1.ListOptions{LabelSelector: watcher.LabelNodeScript + "=" + name})
		if err != nil || len(pods.Items) != 0 {
			t.Errorf("held (%s): run pods %v (%v)", reason, pods, err)
		}
	}
	complete := func(name string) {
		t.Helper()
		waitNodeScript(ctx, t, dyn, name, 90*time.Second, "complete", func(ns *v1alpha1.NodeScript) bool {
			return ns.Status.Stage == watcher.StageComplete && ns.Status.Succeeded == 1 && ns.Status.NextWindow == nil
		})
		if s, _ := nodeState(ctx, t, node, name); s.Phase != watcher.PhaseSucceeded || s.Attempts != 1 {
			t.Errorf("state %+v; want Succeeded on the first attempt", s)
		}
	}

	t.Run("pause", func(t *testing.T) {
		name := uniqueName("e2e-pause-")
		cleanupNodeScript(t, dyn, name)
		applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  nodeSelector: {matchLabels: {kubernetes.io/hostname: %s}}
  paused: true
  script: 'echo fixed'
`, name, node))
		held(name, watcher.HoldPaused)
		out, errOut, code := cli(ctx, "", "status", name)
		if code != 0 || !strings.Contains(out, "paused: nothing new starts") {
			t.Errorf("nodeexec status while paused: exit %d\n%s%s", code, out, errOut)
		}
		if out, errOut, code := cli(ctx, "", "resume", name); code != 0 || !strings.Contains(out, name+" resumed") {
			t.Fatalf("nodeexec resume: exit %d\n%s%s", code, out, errOut)
		}
		complete(name)
		if _, errOut, code := cli(ctx, "", "pause", "e2e-no-such-nodescript"); code == 0 || !strings.Contains(errOut, "not found") {
			t.Errorf("pause of a missing NodeScript: exit %d, %q", code, errOut)
		}
	})

	t.Run("window", func(t *testing.T) {
		name := uniqueName("e2e-window-")
		cleanupNodeScript(t, dyn, name)
		now := time.Now().UTC()
		doc := func(start, end time.Time) string {
			return fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  nodeSelector: {matchLabels: {kubernetes.io/hostname: %s}}
  window: {start: %q, end: %q, timeZone: UTC}
  script: 'echo fixed'
`, name, node, start.Format("15:04"), end.Format("15:04"))
		}
		// Closed: it opens in two hours.
		opens := now.Add(2 * time.Hour).Truncate(time.Minute)
		applyNodeScript(ctx, t, dyn, doc(opens, opens.Add(time.Hour)))
		held(name, watcher.HoldOutsideWindow)
		ns, err := watcher.Get(ctx, dyn, name)
		if err != nil {
			t.Fatal(err)
		}
		if ns.Status.NextWindow == nil || !ns.Status.NextWindow.Time.Equal(opens) {
			t.Errorf("status.nextWindow %v, want %s", ns.Status.NextWindow, opens)
		}
		out, errOut, code := cli(ctx, "", "status", name)
		if code != 0 || !strings.Contains(out, "maintenance window closed: opens at "+opens.Format(time.RFC3339)) {
			t.Errorf("nodeexec status outside the window: exit %d\n%s%s", code, out, errOut)
		}
		// Open now (across midnight too: an overnight window).
		applyNodeScript(ctx, t, dyn, doc(now.Add(-time.Hour), now.Add(time.Hour)))
		complete(name)
	})
}
