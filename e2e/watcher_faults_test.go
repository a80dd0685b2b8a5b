//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/nodeexec/nodeexec/nodeexec/watcher"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// The watcher under faults of the local test cluster (internal/testcluster's
// fault injection). Each test asserts: no silent success (the rollout's
// per-node results are the real ones, a fault is never counted as the
// script's failure), no node runs the script more often than its attempts
// (run pods seen by a watch = lines the script appended on the node),
// concurrency never exceeded, and no run pod left at the end. Every test
// restores the cluster (Cluster.Restore) in t.Cleanup.

// faultTestGrace is the NotReady grace of the watchers these tests start
// (the default, watcher.DefaultNotReadyGrace, is a minute).
const faultTestGrace = 3 * time.Second

// faultRollout is one NodeScript under a fault: its name, pod log, and the
// file on each node its script appends a line to per run.
type faultRollout struct {
	name string
	dyn  dynamic.Interface
	pods *podLog
	// logFile is the script's log on the node ($NODE_NAME is expanded by the
	// script); all test nodes share this machine's /var/tmp.
	logFile string
}

// startFaultRollout needs the local test cluster; it starts an in-process
// watcher with a short NotReady grace and applies a NodeScript whose script
// appends a line to the node's log file and then, on the first run on each
// node only, sleeps firstSleep (later runs end at once), so that a fault can
// hit the first run mid-way and the retry is quick. selector is the
// NodeScript's nodeSelector block; each of extra is one more line of its
// spec (e.g. "reapply: {onReboot: true}").
func startFaultRollout(t *testing.T, prefix, selector string, firstSleep time.Duration, rollout string, extra ...string) *faultRollout {
	t.Helper()
	if env.cluster == nil {
		t.Skip("needs the local test cluster's fault injection")
	}
	ctx := context.Background()
	f := &faultRollout{name: uniqueName(prefix), dyn: watcherSetup(t)}
	f.logFile = "/var/tmp/nodeexec-e2e-" + f.name + "-$NODE_NAME.log"
	t.Cleanup(func() {
		m, _ := filepath.Glob(strings.ReplaceAll(f.logFile, "$NODE_NAME", "*"))
		for _, p := range m {
			_ = os.Remove(p)
		}
	})
	cleanupNodeScript(t, f.dyn, f.name)
	// Runs after the watcher stopped, before cleanupNodeScript drops the
	// states: a test that failed may have let the watcher cordon a node
	// (onFailure.cordon); the suite and the shared cluster need it back.
	t.Cleanup(func() { f.uncordon(t) })
	f.pods = recordPods(t, f.name)
	startWatcherWith(t, watcher.Options{Client: env.client, Dynamic: f.dyn, Resync: 2 * time.Second, NotReadyGrace: faultTestGrace})
	// Runs first (cleanups run last in, first out): the cleanups above need
	// the API server and the nodes.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		restoreCluster(ctx, t)
	})
	script := fmt.Sprintf(`f=%s; n=$(cat "$f" 2>/dev/null | wc -l); date +%%s.%%N >> "$f"; if [ "$n" -eq 0 ]; then sleep %d; fi; echo "done on $NODE_NAME"`,
		f.logFile, int(firstSleep.Seconds()))
	applyNodeScript(ctx, t, f.dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  recordOutput: true
  script: %q
  onFailure: {cordon: true}
  retry: {limit: 3, initialBackoff: 1s, maxBackoff: 2s}
  rollout: %s
`, f.name, selector, script, rollout)+indent(extra))
	return f
}

// indent is lines as lines of a NodeScript's spec block.
func indent(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}

// uncordon uncordons the nodes whose state says the watcher cordoned them
// for this NodeScript.
func (f *faultRollout) uncordon(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nodes, err := env.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("listing nodes to undo the watcher's cordons: %v", err)
		return
	}
	for _, n := range nodes.Items {
		s, err := nodescripts.DecodeState(n.Annotations, f.name)
		if err != nil || !s.CordonedByUs || !n.Spec.Unschedulable {
			continue
		}
		patch := []byte(`{"spec":{"unschedulable":null}}`)
		if _, err := env.client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Errorf("uncordoning %s (cordoned by the watcher for %s): %v", n.Name, f.name, err)
			continue
		}
		t.Logf("uncordoned %s: the watcher had cordoned it for %s", n.Name, f.name)
	}
}

// onlyNode selects one real node.
func onlyNode(node string) string {
	return fmt.Sprintf("nodeSelector:\n    matchLabels: {kubernetes.io/hostname: %s}", node)
}

// waitRunning waits until node's state is Running (its first run started) and
// returns the run pod's name.
func (f *faultRollout) waitRunning(t *testing.T, node string) string {
	t.Helper()
	var pod string
	if !waitFor(60*time.Second, func() bool {
		s, _ := nodeState(context.Background(), t, node, f.name)
		pod = s.Pod
		return s.Phase == v1alpha1.PhaseRunning && s.Pod != ""
	}) {
		s, _ := nodeState(context.Background(), t, node, f.name)
		t.Fatalf("node %s never ran %s: state %+v", node, f.name, s)
	}
	// the script has started once its line is on the node
	if !waitFor(30*time.Second, func() bool { return f.lines(node) >= 1 }) {
		t.Fatalf("the script did not start on %s within 30s", node)
	}
	return pod
}

// lines is how many runs started on node (lines in its log file).
func (f *faultRollout) lines(node string) int {
	b, err := os.ReadFile(strings.ReplaceAll(f.logFile, "$NODE_NAME", node))
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\n")
}

// waitComplete waits until the rollout is Complete with succeeded nodes, none failed.
func (f *faultRollout) waitComplete(t *testing.T, succeeded int32, timeout time.Duration) *v1alpha1.NodeScript {
	t.Helper()
	return waitNodeScript(context.Background(), t, f.dyn, f.name, timeout, fmt.Sprintf("complete on %d nodes", succeeded), func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Succeeded == succeeded && ns.Status.Nodes == succeeded
	})
}

// nodeRuns is what check expects of one node: runs is the number of run
// pods seen and of runs the script started on the node; attempt is the
// attempt its state ends Succeeded on (runs too, unless the Node object
// was deleted and added back: its state starts again at attempt 1).
type nodeRuns struct{ runs, attempt int }

// check asserts, per node, the number of run pods and of runs started on the
// node, the final state (Succeeded on the attempt expected, never the
// script's failure, never cordoned), at most maxLive run pods at once, and
// that no run pod is left.
func (f *faultRollout) check(t *testing.T, want map[string]nodeRuns, maxLive int) {
	t.Helper()
	ctx := context.Background()
	ns, err := nodescripts.Get(ctx, f.dyn, f.name)
	if err != nil {
		t.Fatal(err)
	}
	if ns.Status.Failed != 0 || ns.Status.RolledBack != 0 {
		t.Errorf("status %+v: a fault counted as the script's failure", ns.Status)
	}
	for node, w := range want {
		if got := f.pods.runs(node, v1alpha1.ActionRun); len(got) != w.runs {
			t.Errorf("node %s: %d run pods %v, want %d", node, len(got), got, w.runs)
		}
		if got := f.lines(node); got != w.runs {
			t.Errorf("node %s: the script started %d times, want %d", node, got, w.runs)
		}
		s, n := nodeState(ctx, t, node, f.name)
		if s.Phase != v1alpha1.PhaseSucceeded || s.Attempts != w.attempt || s.ExitCode == nil || *s.ExitCode != 0 ||
			s.Cordoned || n.Spec.Unschedulable || !strings.Contains(nodeOutput(ctx, t, v1alpha1.DefaultNamespace, f.name, node, v1alpha1.ActionRun), "done on "+node) {
			t.Errorf("node %s: state %+v, unschedulable %t; want Succeeded on attempt %d, not cordoned", node, s, n.Spec.Unschedulable, w.attempt)
		}
	}
	if m := f.pods.max(); m > maxLive {
		t.Errorf("%d run pods existed at once; maxConcurrency is %d", m, maxLive)
	}
	sel := metav1.ListOptions{LabelSelector: v1alpha1.LabelNodeScript + "=" + f.name}
	if !waitFor(30*time.Second, func() bool {
		l, err := env.client.CoreV1().Pods(v1alpha1.DefaultNamespace).List(ctx, sel)
		return err == nil && len(l.Items) == 0
	}) {
		l, _ := env.client.CoreV1().Pods(v1alpha1.DefaultNamespace).List(ctx, sel)
		t.Errorf("%d run pods left 30s after the rollout completed", len(l.Items))
	}
}

// infraEvent asserts an infrastructure-failure Event for the NodeScript on
// node whose message names reason.
func (f *faultRollout) infraEvent(t *testing.T, node string, reasons ...string) {
	t.Helper()
	ctx := context.Background()
	var msgs []string
	ok := waitFor(10*time.Second, func() bool {
		events, err := env.client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node})
		if err != nil {
			return false
		}
		msgs = msgs[:0]
		for _, e := range events.Items {
			if strings.Contains(e.Message, f.name) {
				msgs = append(msgs, e.Reason+": "+e.Message)
				if e.Reason == v1alpha1.ReasonInfrastructure && slices.ContainsFunc(reasons, func(r string) bool { return strings.Contains(e.Message, r) }) {
					return true
				}
			}
		}
		return false
	})
	if !ok {
		t.Errorf("no %s event naming one of %v for %s on %s; events: %q", v1alpha1.ReasonInfrastructure, reasons, f.name, node, msgs)
	}
	for _, m := range msgs {
		if strings.HasPrefix(m, v1alpha1.ReasonFailed+":") {
			t.Errorf("the fault was reported as the script's failure: %s", m)
		}
	}
}

// TestWatcherFaultAPIServerRestart: the API server is killed and started again
// while the rollout runs (maxConcurrency 1): the rollout continues and
// completes, each node ran the script once.
func TestWatcherFaultAPIServerRestart(t *testing.T) {
	f := startFaultRollout(t, "e2e-f-api-", realNodes, 4*time.Second, "{canary: 1, maxConcurrency: 1}")
	ctx := context.Background()
	var first string
	if !waitFor(60*time.Second, func() bool {
		for _, n := range env.nodes[:2] {
			if s, _ := nodeState(ctx, t, n, f.name); s.Phase == v1alpha1.PhaseRunning {
				first = n
				return true
			}
		}
		return false
	}) {
		t.Fatal("no node started running")
	}
	f.waitRunning(t, first)
	t0 := time.Now()
	if err := env.cluster.RestartAPIServer(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("API server killed with a run on %s in progress, back after %s", first, time.Since(t0).Round(time.Millisecond))
	f.waitComplete(t, 2, 2*time.Minute)
	f.check(t, map[string]nodeRuns{env.nodes[0]: {1, 1}, env.nodes[1]: {1, 1}}, 1)
}

// TestWatcherFaultKubeletStopped: the kubelet of the node running the script
// stops: once the node is NotReady for the watcher's grace the run is an
// infrastructure failure (not the script's), retried when the node is back.
func TestWatcherFaultKubeletStopped(t *testing.T) {
	node := env.nodes[1]
	f := startFaultRollout(t, "e2e-f-kubelet-", onlyNode(node), 300*time.Second, "{canary: 1, maxConcurrency: 1}")
	ctx := context.Background()
	f.waitRunning(t, node)
	if err := env.cluster.StopKubelet(ctx, node); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if !waitFor(3*time.Minute, func() bool {
		s, _ := nodeState(ctx, t, node, f.name)
		return s.Phase == v1alpha1.PhaseFailed && s.Infrastructure && s.Reason == "NodeNotReady"
	}) {
		s, _ := nodeState(ctx, t, node, f.name)
		t.Fatalf("node %s: state %+v; want an infrastructure failure NodeNotReady", node, s)
	}
	took := time.Since(t0)
	t.Logf("kubelet stopped: infrastructure failure NodeNotReady after %s", took.Round(time.Second))
	// node-monitor-grace-period (20 s) + the watcher's grace (3 s) + a
	// resync; with the default grace (a minute) it would take over 80 s.
	if took > 50*time.Second {
		t.Errorf("NodeNotReady after %s: the watcher's NotReadyGrace of %s was not applied", took.Round(time.Second), faultTestGrace)
	}
	// nothing is retried while the node is down
	time.Sleep(2 * time.Second)
	if got := f.pods.runs(node, v1alpha1.ActionRun); len(got) != 1 {
		t.Fatalf("run pods while the kubelet is stopped: %v, want the first only", got)
	}
	if err := env.cluster.StartKubelet(ctx, node); err != nil {
		t.Fatal(err)
	}
	f.waitComplete(t, 1, 2*time.Minute)
	f.check(t, map[string]nodeRuns{node: {2, 2}}, 1)
	f.infraEvent(t, node, "NodeNotReady")
}

// TestWatcherFaultNodeDeleted: a node running the script is removed (its
// kubelet and containerd stopped, its Node object and pods deleted): its state
// is dropped and the rollout completes on the other node; the node added
// back under the same name is a new node and runs the script.
func TestWatcherFaultNodeDeleted(t *testing.T) {
	first, second := env.nodes[0], env.nodes[1]
	f := startFaultRollout(t, "e2e-f-delete-", realNodes, 8*time.Second, "{canary: 0, maxConcurrency: 2}")
	ctx := context.Background()
	f.waitRunning(t, second)
	_, old := nodeState(ctx, t, second, f.name)
	oldUID := old.UID
	t.Cleanup(func() {
		// Whatever happened, the suite needs its two nodes back (AddNode
		// starts the lowest free index: only when second is really gone).
		if _, err := env.client.CoreV1().Nodes().Get(context.Background(), second, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			if _, err := env.cluster.AddNode(context.Background()); err != nil {
				t.Errorf("restoring node %s: %v", second, err)
			}
		}
	})
	if err := env.cluster.RemoveNode(ctx, second); err != nil {
		t.Fatal(err)
	}
	f.waitComplete(t, 1, 2*time.Minute)
	if s, _ := nodeState(ctx, t, first, f.name); s.Phase != v1alpha1.PhaseSucceeded {
		t.Fatalf("node %s: %+v", first, s)
	}
	// the removed incarnation's run was cut short; the new node runs it again
	added, err := env.cluster.AddNode(ctx)
	if err != nil || added != second {
		t.Fatalf("AddNode = %s, %v; want %s back", added, err, second)
	}
	f.waitComplete(t, 2, 2*time.Minute)
	// The script ran twice on the machine (the first run cut short); the
	// new Node's state is its own: attempt 1, not a retry of the old one's.
	f.check(t, map[string]nodeRuns{first: {1, 1}, second: {2, 1}}, 2)
	if n, err := env.client.CoreV1().Nodes().Get(ctx, second, metav1.GetOptions{}); err != nil || n.UID == oldUID {
		t.Errorf("node %s after AddNode: %v, UID %v; want a new Node (the old UID was %s)", second, err, n.UID, oldUID)
	}
}

// TestWatcherFaultPodEvicted: the run pod is evicted through the eviction
// API: an infrastructure failure, retried.
func TestWatcherFaultPodEvicted(t *testing.T) {
	node := env.nodes[1]
	f := startFaultRollout(t, "e2e-f-evict-", onlyNode(node), 300*time.Second, "{canary: 1, maxConcurrency: 1}")
	ctx := context.Background()
	pod := f.waitRunning(t, node)
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: v1alpha1.DefaultNamespace}}
	if err := env.client.CoreV1().Pods(v1alpha1.DefaultNamespace).EvictV1(ctx, ev); err != nil {
		t.Fatalf("evicting %s: %v", pod, err)
	}
	f.waitComplete(t, 1, 2*time.Minute)
	f.check(t, map[string]nodeRuns{node: {2, 2}}, 1)
	f.infraEvent(t, node, "Evict", "Disrupted", "PodDeleted", "disappeared")
}

// TestWatcherFaultNodeRebooted: the node running the script reboots (its
// containers killed, a new boot ID): an infrastructure failure, retried.
func TestWatcherFaultNodeRebooted(t *testing.T) {
	node := env.nodes[1]
	f := startFaultRollout(t, "e2e-f-reboot-", onlyNode(node), 300*time.Second, "{canary: 1, maxConcurrency: 1}")
	ctx := context.Background()
	f.waitRunning(t, node)
	id, err := env.cluster.RebootNode(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s rebooted: boot ID %s", node, id)
	f.waitComplete(t, 1, 2*time.Minute)
	f.check(t, map[string]nodeRuns{node: {2, 2}}, 1)
	f.infraEvent(t, node, "NodeRebooted")
	if n, err := env.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil || n.Status.NodeInfo.BootID != id {
		t.Errorf("node %s after the test: %v (boot ID %v), want boot ID %s", node, err, n.Status.NodeInfo.BootID, id)
	}
}

// TestWatcherReapplyOnReboot: spec.reapply.onReboot. The node's success
// records its boot ID; after the node reboots (the test cluster's reboot:
// kubelet and containerd stopped, a new boot ID, started again) the script
// runs there once more, attempt 2, with an Event saying why, and not a
// third time on the same boot.
func TestWatcherReapplyOnReboot(t *testing.T) {
	node := env.nodes[1]
	f := startFaultRollout(t, "e2e-reapply-", onlyNode(node), 0, "{canary: 1, maxConcurrency: 1}", "reapply: {onReboot: true}")
	ctx := context.Background()
	f.waitComplete(t, 1, 2*time.Minute)
	s, n := nodeState(ctx, t, node, f.name)
	if s.Attempts != 1 || s.BootID == "" || s.BootID != n.Status.NodeInfo.BootID {
		t.Fatalf("node %s after the first run: state %+v, node boot ID %s; want attempt 1 recording the boot ID", node, s, n.Status.NodeInfo.BootID)
	}
	if out, errOut, code := cli(ctx, "", "status", f.name); code != 0 || !strings.Contains(out, "reapply: runs again after a node reboots") {
		t.Errorf("status: exit %d, %q %q; want the reapply line", code, out, errOut)
	}
	id, err := env.cluster.RebootNode(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s rebooted: boot ID %s -> %s", node, s.BootID, id)
	if !waitFor(2*time.Minute, func() bool {
		s, _ = nodeState(ctx, t, node, f.name)
		return s.Phase == v1alpha1.PhaseSucceeded && s.Attempts == 2
	}) {
		t.Fatalf("node %s did not run again after the reboot: state %+v", node, s)
	}
	if s.BootID != id {
		t.Errorf("state after the second run records boot ID %s, want %s", s.BootID, id)
	}
	f.waitComplete(t, 1, time.Minute)
	// A few resyncs (2 s) on the same boot: no third run.
	time.Sleep(6 * time.Second)
	f.check(t, map[string]nodeRuns{node: {2, 2}}, 1)
	if !waitFor(10*time.Second, func() bool {
		events, err := env.client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node + ",reason=" + v1alpha1.ReasonReapplyOnReboot})
		if err != nil {
			return false
		}
		return slices.ContainsFunc(events.Items, func(e corev1.Event) bool {
			return strings.Contains(e.Message, f.name) && strings.Contains(e.Message, id)
		})
	}) {
		t.Errorf("no %s Event on %s naming %s and the new boot ID", v1alpha1.ReasonReapplyOnReboot, node, f.name)
	}
}
