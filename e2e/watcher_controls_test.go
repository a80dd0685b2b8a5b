//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// nodeCondition is NodeScript name's condition on node, or nil.
func nodeCondition(ctx context.Context, t testing.TB, node, name string) *corev1.NodeCondition {
	t.Helper()
	n, err := env.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == nodescripts.ConditionType(name) {
			return &c
		}
	}
	return nil
}

// controlled applies a NodeScript named with prefix on both real nodes,
// two at a time, with extra spec lines, and returns its name.
func controlled(ctx context.Context, t *testing.T, dyn dynamic.Interface, prefix, extra string) string {
	t.Helper()
	return controlledNamed(ctx, t, dyn, uniqueName(prefix), extra)
}

// controlledNamed is controlled with the NodeScript's name.
func controlledNamed(ctx context.Context, t *testing.T, dyn dynamic.Interface, name, extra string) string {
	t.Helper()
	applyOnRealNodes(ctx, t, dyn, name, `  script: 'echo "fixed $NODE_NAME"'
`+extra)
	return name
}

// applyOnRealNodes applies NodeScript name on both real nodes, two at a
// time, with the rest of its spec (YAML lines indented two spaces), and
// deletes it when the test ends.
func applyOnRealNodes(ctx context.Context, t *testing.T, dyn dynamic.Interface, name, spec string) {
	t.Helper()
	cleanupNodeScript(t, dyn, name)
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  rollout: {canary: 0, maxConcurrency: 2}
%s`, name, realNodes, spec))
}

// complete waits until NodeScript name is Complete with succeeded nodes.
func complete(ctx context.Context, t *testing.T, dyn dynamic.Interface, name string, succeeded int32) *v1alpha1.NodeScript {
	t.Helper()
	return waitNodeScript(ctx, t, dyn, name, 45*time.Second, fmt.Sprintf("complete with %d nodes", succeeded), func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Succeeded == succeeded && ns.Status.Nodes == succeeded
	})
}

// TestWatcherNodeCondition: after the script succeeded on a node, the node
// carries the condition nodeexec.io/NAME, True, Applied, with the spec hash
// in its message, beside the kubelet's own conditions; deleting the
// NodeScript removes it from every node.
func TestWatcherNodeCondition(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	startWatcher(t, dyn)
	name := controlled(ctx, t, dyn, "e2e-cond-", "")
	hash := complete(ctx, t, dyn, name, 2).Status.SpecHash
	for _, node := range env.nodes[:2] {
		var c *corev1.NodeCondition
		if !waitFor(15*time.Second, func() bool {
			c = nodeCondition(ctx, t, node, name)
			return c != nil && c.Status == corev1.ConditionTrue
		}) {
			t.Fatalf("node %s: condition %s %+v; want True", node, nodescripts.ConditionType(name), c)
		}
		if c.Reason != v1alpha1.ConditionApplied || c.Message != "spec "+hash+" succeeded here" || c.LastTransitionTime.IsZero() {
			t.Errorf("node %s: condition %+v; want Applied, spec %s", node, c, hash)
		}
		if ready := func() bool {
			n, _ := env.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					return c.Status == corev1.ConditionTrue
				}
			}
			return false
		}(); !ready {
			t.Errorf("node %s: the kubelet's Ready condition is gone or not True", node)
		}
	}
	// Unchanged while nothing changes: the transition time stays.
	before := nodeCondition(ctx, t, env.nodes[0], name)
	time.Sleep(6 * time.Second) // more than the resync (5s)
	if after := nodeCondition(ctx, t, env.nodes[0], name); after == nil || !after.LastTransitionTime.Equal(&before.LastTransitionTime) || !after.LastHeartbeatTime.Equal(&before.LastHeartbeatTime) {
		t.Errorf("an unchanged condition was written again: %+v, then %+v", before, after)
	}
	out, errOut, code := cli(ctx, "", "status", name, "-o", "json")
	if code != 0 || !strings.Contains(out, `"reason": "Applied"`) {
		t.Errorf("nodeexec status -o json: exit %d\n%s%s", code, out, errOut)
	}

	if err := dyn.Resource(v1alpha1.Resource).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if !waitFor(30*time.Second, func() bool {
		_, err := nodescripts.Get(ctx, dyn, name)
		return err != nil && strings.Contains(err.Error(), "not found")
	}) {
		t.Fatalf("nodescript %s not deleted", name)
	}
	for _, node := range env.nodes[:2] {
		if c := nodeCondition(ctx, t, node, name); c != nil {
			t.Errorf("node %s keeps the condition of the deleted NodeScript: %+v", node, c)
		}
	}
}

// TestWatcherRerun: `nodeexec rerun NAME --node A` runs the spec again on A
// (attempt 2, a new start time) and not on B; bad input changes no node.
func TestWatcherRerun(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	startWatcher(t, dyn)
	name := controlled(ctx, t, dyn, "e2e-rerun-", "")
	hash := complete(ctx, t, dyn, name, 2).Status.SpecHash
	a, b := env.nodes[0], env.nodes[1]
	sa, _ := nodeState(ctx, t, a, name)
	sb, _ := nodeState(ctx, t, b, name)
	if sa.Attempts != 1 || sb.Attempts != 1 {
		t.Fatalf("before the rerun: %+v, %+v", sa, sb)
	}

	// Bad input: an error naming what is wrong, and no node asked to rerun.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"rerun", name, "--node", b, "--node", "e2e-no-such-node"}, `node not found: ["e2e-no-such-node"]`},
		{[]string{"rerun", name, "--node", b, "--selector", "kubernetes.io/os=linux"}, "exactly one of"},
		{[]string{"rerun", name, "--selector", "nodeexec-e2e=nothing"}, `label selector "nodeexec-e2e=nothing" matched no node`},
		{[]string{"rerun", "e2e-no-such-nodescript", "--node", b}, "not found"},
	} {
		if out, errOut, code := cli(ctx, "", c.args...); code != 2 || !strings.Contains(errOut, c.want) || out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %q", c.args, code, out, errOut, c.want)
		}
	}
	if _, n := nodeState(ctx, t, b, name); n.Annotations[nodescripts.RerunAnnotation(name)] != "" {
		t.Fatalf("refused rerun left a request on %s", b)
	}

	out, errOut, code := cli(ctx, "", "rerun", name, "--node", a)
	if code != 0 || !strings.Contains(out, "node/"+a+": nodescript "+name+" spec "+hash+" runs again") {
		t.Fatalf("nodeexec rerun: exit %d\n%s%s", code, out, errOut)
	}
	var s nodescripts.NodeState
	if !waitFor(45*time.Second, func() bool {
		s, _ = nodeState(ctx, t, a, name)
		return s.Phase == v1alpha1.PhaseSucceeded && s.Attempts == 2
	}) {
		t.Fatalf("node %s did not run again: %+v", a, s)
	}
	if !s.Since.After(sa.Since) || s.Pod == sa.Pod || s.Hash != hash {
		t.Errorf("node %s: rerun %+v, first run %+v", a, s, sa)
	}
	if _, n := nodeState(ctx, t, a, name); n.Annotations[nodescripts.RerunAnnotation(name)] != "" {
		t.Errorf("node %s keeps the rerun request", a)
	}
	waitEvent(ctx, t, "Node", a, v1alpha1.ReasonRerun)
	complete(ctx, t, dyn, name, 2)
	if s2, _ := nodeState(ctx, t, b, name); s2.Attempts != 1 || !s2.Since.Equal(sb.Since) || s2.Pod != sb.Pod {
		t.Errorf("node %s ran again: %+v, before %+v", b, s2, sb)
	}
}

// TestWatcherIgnore: a node ignored with `nodeexec ignore` is left out of
// the rollout (not counted, not run) and `nodeexec status` says so;
// `nodeexec unignore` lets it run.
func TestWatcherIgnore(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	startWatcher(t, dyn)
	name := controlled(ctx, t, dyn, "e2e-ignore-", "  paused: true\n")
	a, b := env.nodes[0], env.nodes[1]
	if _, errOut, code := cli(ctx, "", "ignore", name, "--node", "e2e-no-such-node"); code != 2 || !strings.Contains(errOut, `node not found: ["e2e-no-such-node"]`) {
		t.Errorf("ignore of an unknown node: exit %d, %q", code, errOut)
	}
	out, errOut, code := cli(ctx, "", "ignore", name, "--node", b)
	if code != 0 || !strings.Contains(out, "node/"+b+" ignored by nodescript "+name) {
		t.Fatalf("nodeexec ignore: exit %d\n%s%s", code, out, errOut)
	}
	_, n := nodeState(ctx, t, b, name)
	by := n.Annotations[nodescripts.IgnoreAnnotation(name)]
	if by == "" || by == v1alpha1.UnknownUser {
		t.Errorf("ignore annotation %q; want the user", by)
	}
	if _, _, code := cli(ctx, "", "resume", name); code != 0 {
		t.Fatal("nodeexec resume failed")
	}
	complete(ctx, t, dyn, name, 1)
	if s, _ := nodeState(ctx, t, b, name); s.Hash != "" {
		t.Errorf("ignored node %s ran: %+v", b, s)
	}
	if s, _ := nodeState(ctx, t, a, name); s.Phase != v1alpha1.PhaseSucceeded {
		t.Errorf("node %s: %+v", a, s)
	}
	out, errOut, code = cli(ctx, "", "status", name)
	if code != 0 || !strings.Contains(out, b) || !strings.Contains(out, "Ignored (by "+by) {
		t.Errorf("nodeexec status: exit %d\n%s%s", code, out, errOut)
	}

	if out, errOut, code := cli(ctx, "", "unignore", name, "--node", b); code != 0 || !strings.Contains(out, "no longer ignored") {
		t.Fatalf("nodeexec unignore: exit %d\n%s%s", code, out, errOut)
	}
	complete(ctx, t, dyn, name, 2)
	if s, _ := nodeState(ctx, t, a, name); s.Attempts != 1 {
		t.Errorf("node %s ran again: %+v", a, s)
	}
}

// TestWatcherRunNow: a NodeScript whose maintenance window is closed runs
// after `nodeexec run-now`, which records who asked (SelfSubjectReview) in
// the annotation, the Event and `nodeexec status`; an override that expires
// is removed by the watcher (Event RunNowExpired).
func TestWatcherRunNow(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	startWatcher(t, dyn)
	opens := time.Now().UTC().Add(2 * time.Hour)
	name := controlled(ctx, t, dyn, "e2e-runnow-", fmt.Sprintf("  window: {start: %q, end: %q, timeZone: UTC}\n", opens.Format("15:04"), opens.Add(time.Hour).Format("15:04")))
	waitNodeScript(ctx, t, dyn, name, 30*time.Second, "held outside the window", func(ns *v1alpha1.NodeScript) bool {
		c := findCond(ns, v1alpha1.ConditionProgressing)
		return c != nil && c.Reason == v1alpha1.HoldOutsideWindow && ns.Status.Running == 0
	})

	out, errOut, code := cli(ctx, "", "run-now", name, "--for", "10m")
	if code != 0 || !strings.Contains(out, "runs may start outside the maintenance window until") {
		t.Fatalf("nodeexec run-now: exit %d\n%s%s", code, out, errOut)
	}
	ns, err := nodescripts.Get(ctx, dyn, name)
	if err != nil {
		t.Fatal(err)
	}
	by := ns.Annotations[v1alpha1.AnnotationRunNowBy]
	if by == "" || by == v1alpha1.UnknownUser || !strings.Contains(out, "(asked by "+by+")") {
		t.Errorf("run-now by %q; stdout %q", by, out)
	}
	if until, set, err := nodescripts.RunNowUntil(ns); !set || err != nil || until.Sub(time.Now()) > 10*time.Minute || until.Sub(time.Now()) < 9*time.Minute {
		t.Errorf("run-now until %s (%v)", until, err)
	}
	complete(ctx, t, dyn, name, 2)
	waitEvent(ctx, t, "NodeScript", name, v1alpha1.ReasonRunNow)
	evs, err := env.client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=" + v1alpha1.ReasonRunNow})
	if err != nil || len(evs.Items) == 0 || !strings.Contains(evs.Items[0].Message, "asked by "+by) {
		t.Errorf("RunNow event: %v %+v", err, evs)
	}
	out, errOut, code = cli(ctx, "", "status", name)
	if code != 0 || !strings.Contains(out, "run-now: runs may start outside the maintenance window until") || !strings.Contains(out, "asked by "+by) {
		t.Errorf("nodeexec status: exit %d\n%s%s", code, out, errOut)
	}

	// A short override: the watcher removes it once it has expired.
	if out, errOut, code := cli(ctx, "", "run-now", name, "--for", "2s"); code != 0 {
		t.Fatalf("nodeexec run-now --for 2s: exit %d\n%s%s", code, out, errOut)
	}
	waitNodeScript(ctx, t, dyn, name, 20*time.Second, "without the expired override", func(ns *v1alpha1.NodeScript) bool {
		_, set, _ := nodescripts.RunNowUntil(ns)
		return !set && ns.Annotations[v1alpha1.AnnotationRunNowBy] == ""
	})
	waitEvent(ctx, t, "NodeScript", name, v1alpha1.ReasonRunNowExpired)
	if _, errOut, code := cli(ctx, "", "run-now", name, "--for", "-1h"); code != 2 || !strings.Contains(errOut, "--for") {
		t.Errorf("run-now --for -1h: exit %d, %q", code, errOut)
	}
}

// TestWatcherPauseAndWindow: a paused NodeScript starts nothing (its
// status says Paused) until `nodeexec resume`; one whose maintenance
// window is closed starts nothing, says when the window opens
// (status.nextWindow, `nodeexec status`), and runs once the window is
// edited to be open now.
func TestWatcherPauseAndWindow(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	startWatcher(t, dyn)
	noneRan := func(name string) {
		t.Helper()
		time.Sleep(6 * time.Second) // past a resync (5 s)
		for _, node := range env.nodes[:2] {
			if s, _ := nodeState(ctx, t, node, name); s.Phase != v1alpha1.PhasePending || s.Hash != "" {
				t.Errorf("node %s ran %s while held: %+v", node, name, s)
			}
		}
	}

	paused := controlled(ctx, t, dyn, "e2e-paused-", "  paused: true\n")
	waitNodeScript(ctx, t, dyn, paused, 30*time.Second, "paused", func(ns *v1alpha1.NodeScript) bool {
		c := findCond(ns, v1alpha1.ConditionProgressing)
		return c != nil && c.Reason == v1alpha1.HoldPaused
	})
	noneRan(paused)
	if out, errOut, code := cli(ctx, "", "resume", paused); code != 0 {
		t.Fatalf("nodeexec resume: exit %d\n%s%s", code, out, errOut)
	}
	complete(ctx, t, dyn, paused, 2)

	opens := time.Now().UTC().Add(2 * time.Hour)
	closed := controlled(ctx, t, dyn, "e2e-window-", fmt.Sprintf("  window: {start: %q, end: %q, timeZone: UTC}\n", opens.Format("15:04"), opens.Add(time.Hour).Format("15:04")))
	ns := waitNodeScript(ctx, t, dyn, closed, 30*time.Second, "held outside the window", func(ns *v1alpha1.NodeScript) bool {
		c := findCond(ns, v1alpha1.ConditionProgressing)
		return c != nil && c.Reason == v1alpha1.HoldOutsideWindow && ns.Status.NextWindow != nil
	})
	if d := ns.Status.NextWindow.Sub(opens.Truncate(time.Minute)); d < -time.Minute || d > time.Minute {
		t.Errorf("status.nextWindow %s, want about %s", ns.Status.NextWindow, opens)
	}
	if out, _, code := cli(ctx, "", "status", closed); code != 0 || !strings.Contains(out, "maintenance window closed: opens at") {
		t.Errorf("nodeexec status: exit %d\n%s", code, out)
	}
	noneRan(closed)
	now := time.Now().UTC()
	patch := fmt.Sprintf(`{"spec":{"window":{"start":%q,"end":%q,"timeZone":"UTC"}}}`, now.Add(-time.Minute).Format("15:04"), now.Add(time.Hour).Format("15:04"))
	if _, err := dyn.Resource(v1alpha1.Resource).Patch(ctx, closed, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	complete(ctx, t, dyn, closed, 2)
}

// TestWatcherJoiningNodeWaitsForWindow: a node that joins while the
// maintenance window is closed waits (the status says so, nothing runs on
// it) and runs once the window is open; the node that ran before does not
// run again (the window is not part of the spec hash).
func TestWatcherJoiningNodeWaitsForWindow(t *testing.T) {
	if env.cluster == nil {
		t.Skip("needs the local test cluster to remove and add a real node")
	}
	ctx := context.Background()
	dyn := watcherSetup(t)
	first, second := removeSecondNode(ctx, t)
	startWatcher(t, dyn)
	window := func(from, to time.Time) string {
		return fmt.Sprintf(`{"start":%q,"end":%q,"timeZone":"UTC"}`, from.UTC().Format("15:04"), to.UTC().Format("15:04"))
	}
	setWindow := func(name, w string) {
		t.Helper()
		if _, err := dyn.Resource(v1alpha1.Resource).Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"window":`+w+`}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	name := controlled(ctx, t, dyn, "e2e-joinwin-", "  window: "+window(now.Add(-time.Minute), now.Add(time.Hour))+"\n")
	ns := waitNodeScript(ctx, t, dyn, name, 60*time.Second, "complete on one node", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Succeeded == 1 && ns.Status.Nodes == 1
	})
	hash := ns.Status.SpecHash
	setWindow(name, window(now.Add(2*time.Hour), now.Add(3*time.Hour)))

	added, err := env.cluster.AddNode(ctx)
	if err != nil || added != second {
		t.Fatalf("AddNode = %s, %v; want %s back", added, err, second)
	}
	waitNodeScript(ctx, t, dyn, name, 90*time.Second, "the joined node held outside the window", func(ns *v1alpha1.NodeScript) bool {
		c := findCond(ns, v1alpha1.ConditionProgressing)
		return ns.Status.Nodes == 2 && ns.Status.Pending == 1 && c != nil && c.Reason == v1alpha1.HoldOutsideWindow
	})
	time.Sleep(6 * time.Second) // past a resync (5 s)
	if s, _ := nodeState(ctx, t, second, name); s.Hash != "" {
		t.Errorf("node %s ran while the window was closed: %+v", second, s)
	}
	setWindow(name, window(time.Now().Add(-time.Minute), time.Now().Add(time.Hour)))
	ns = complete(ctx, t, dyn, name, 2)
	if ns.Status.SpecHash != hash {
		t.Errorf("spec hash %s -> %s: changing the window changed the hash", hash, ns.Status.SpecHash)
	}
	if s, _ := nodeState(ctx, t, first, name); s.Attempts != 1 {
		t.Errorf("node %s ran again: %+v", first, s)
	}
}
