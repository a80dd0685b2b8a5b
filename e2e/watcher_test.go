//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"github.com/nodeexec/nodeexec/nodeexec/watcher"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// realNodes selects the real nodes (not kwok's simulated ones).
const realNodes = "nodeSelector:\n    matchExpressions: [{key: type, operator: NotIn, values: [kwok]}]"

var setupWatcherOnce sync.Once

// watcherSetup installs the NodeScript CRD and the privileged namespace the
// watcher's pods run in (what deploy/ installs), once per suite.
func watcherSetup(t testing.TB) dynamic.Interface {
	t.Helper()
	dyn := dynamic.NewForConfigOrDie(env.config)
	var err error
	setupWatcherOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var b []byte
		if b, err = os.ReadFile("../deploy/crd/nodeexec.io_nodescripts.yaml"); err != nil {
			return
		}
		var m map[string]any
		if err = yaml.Unmarshal(b, &m); err != nil {
			return
		}
		crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
		u := &unstructured.Unstructured{Object: m}
		if _, err = crds.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "nodeexec-e2e", Force: true}); err != nil {
			return
		}
		if !waitFor(30*time.Second, func() bool {
			_, e := dyn.Resource(v1alpha1.Resource).List(ctx, metav1.ListOptions{Limit: 1})
			return e == nil
		}) {
			err = errors.New("the NodeScript CRD was not served within 30s")
			return
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DefaultNamespace,
			Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}
		if _, e := env.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); e != nil && !apierrors.IsAlreadyExists(e) {
			err = e
		}
	})
	if err != nil {
		t.Fatalf("watcher setup: %v", err)
	}
	return dyn
}

// startWatcher runs a Watcher in this process until the test ends or stop
// is called.
func startWatcher(t testing.TB, dyn dynamic.Interface) (stop func()) {
	t.Helper()
	return startWatcherWith(t, watcher.Options{Client: env.client, Dynamic: dyn, Resync: 5 * time.Second})
}

// startWatcherWith runs a Watcher with o, logging to the test, until the
// test ends or stop is called.
func startWatcherWith(t testing.TB, o watcher.Options) (stop func()) {
	t.Helper()
	w, err := watcher.New(o)
	if err != nil {
		t.Fatal(err)
	}
	// NODEEXEC_E2E_WATCHER_V sets the log's verbosity (1: a line per reconcile, with its phases' times).
	v, _ := strconv.Atoi(os.Getenv("NODEEXEC_E2E_WATCHER_V"))
	log := funcr.New(func(prefix, args string) { t.Log("watcher:", prefix, args) }, funcr.Options{Verbosity: v, LogTimestamp: v > 0})
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), log))
	done := make(chan error, 1)
	go func() { done <- w.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("watcher.Start: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// applyNodeScript applies a NodeScript from YAML through the library.
func applyNodeScript(ctx context.Context, t testing.TB, dyn dynamic.Interface, doc string) {
	t.Helper()
	scripts, err := nodescripts.ParseNodeScripts(strings.NewReader(doc))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, doc)
	}
	if _, err := nodescripts.Apply(ctx, dyn, scripts); err != nil {
		t.Fatalf("apply: %v", err)
	}
}

// cleanupNodeScript deletes the NodeScript, its annotations (state, rerun,
// ignore) and its condition from the nodes, and uncordons the nodes listed.
func cleanupNodeScript(t testing.TB, dyn dynamic.Interface, name string, uncordon ...string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = dyn.Resource(v1alpha1.Resource).Delete(ctx, name, metav1.DeleteOptions{})
		sel := v1alpha1.LabelNodeScript + "=" + name
		_ = env.client.CoreV1().Pods(v1alpha1.DefaultNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel})
		nodes, _ := env.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		keys := []string{nodescripts.StateAnnotation(name), nodescripts.RerunAnnotation(name), nodescripts.IgnoreAnnotation(name)}
		for _, n := range nodes.Items {
			if n.Labels["type"] == "kwok" {
				continue // simulated nodes are deleted with their annotations
			}
			for _, c := range n.Status.Conditions {
				if c.Type == nodescripts.ConditionType(name) {
					patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"$patch":"delete"}]}}`, c.Type)
					_, _ = env.client.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
				}
			}
			has := slices.ContainsFunc(keys, func(k string) bool { _, ok := n.Annotations[k]; return ok })
			if !has && !slices.Contains(uncordon, n.Name) {
				continue
			}
			ann := map[string]any{}
			for _, k := range keys {
				ann[k] = nil
			}
			p := map[string]any{"metadata": map[string]any{"annotations": ann}}
			if slices.Contains(uncordon, n.Name) {
				p["spec"] = map[string]any{"unschedulable": nil}
			}
			patch, _ := json.Marshal(p)
			_, _ = env.client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		}
		// The watcher's finalizer goes too, in case no watcher runs any more.
		_, _ = dyn.Resource(v1alpha1.Resource).Patch(ctx, name, types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{})
		_ = env.client.CoreV1().ConfigMaps(v1alpha1.DefaultNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel})
		waitFor(30*time.Second, func() bool {
			l, err := env.client.CoreV1().Pods(v1alpha1.DefaultNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
			return err == nil && len(l.Items) == 0
		})
	})
}

// nodeOutput is the output record, in the run namespace, of a NodeScript
// with spec.recordOutput for a node: the redacted end of the action's
// output, "" without one.
func nodeOutput(ctx context.Context, t testing.TB, namespace, name, node, action string) string {
	t.Helper()
	cm, err := env.client.CoreV1().ConfigMaps(namespace).Get(ctx, nodescripts.OutputRecordName(name, node), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return cm.Data[action]
}

// waitNodeScript waits until cond holds for the NodeScript's status.
func waitNodeScript(ctx context.Context, t testing.TB, dyn dynamic.Interface, name string, timeout time.Duration, what string, cond func(*v1alpha1.NodeScript) bool) *v1alpha1.NodeScript {
	t.Helper()
	var last *v1alpha1.NodeScript
	ok := waitFor(timeout, func() bool {
		ns, err := nodescripts.Get(ctx, dyn, name)
		if err != nil {
			return false
		}
		last = ns
		return cond(ns)
	})
	if !ok {
		st := "none"
		if last != nil {
			st = fmt.Sprintf("%+v", last.Status)
		}
		t.Fatalf("nodescript %s: not %s within %s; status %s", name, what, timeout, st)
	}
	return last
}

// nodeState reads a node's state for a NodeScript.
func nodeState(ctx context.Context, t testing.TB, node, name string) (nodescripts.NodeState, *corev1.Node) {
	t.Helper()
	n, err := env.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := nodescripts.DecodeState(n.Annotations, name)
	if err != nil {
		t.Fatal(err)
	}
	// The run pod is the record while it goes, as nodeexec status shows it.
	pods, err := env.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{
		LabelSelector: v1alpha1.LabelNodeScript + "=" + name + "," + v1alpha1.LabelAction + " in (check,run)",
		FieldSelector: "spec.nodeName=" + node,
	})
	if err != nil {
		t.Fatal(err)
	}
	var going *corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed &&
			(going == nil || going.CreationTimestamp.Before(&p.CreationTimestamp)) {
			going = p
		}
	}
	return nodescripts.WithRunPod(s, going), n
}

// podLog records, from a watch, every pod a NodeScript's watcher created:
// per node and action the pods, their creation as seen here, and the most
// run pods that existed at once. Pods are told apart by UID: a pod created
// again under the same name (a node deleted and added back runs attempt 1
// again) is another pod.
type podLog struct {
	mu       sync.Mutex
	pods     map[string][]string  // "node/action" -> pod names, one per pod (UID)
	created  map[string]time.Time // pod name -> when its latest pod was first seen
	seen     map[types.UID]bool
	live     map[types.UID]bool
	maxLive  int
	cancel   context.CancelFunc
	finished chan struct{}
}

func recordPods(t testing.TB, name string) *podLog {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &podLog{pods: map[string][]string{}, created: map[string]time.Time{}, seen: map[types.UID]bool{}, live: map[types.UID]bool{},
		cancel: cancel, finished: make(chan struct{})}
	// An informer, not a bare watch: the reflector relists and rewatches
	// when the API server's watch cache lags ("too large resource version").
	factory := informers.NewSharedInformerFactoryWithOptions(env.client, 0, informers.WithNamespace(v1alpha1.DefaultNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = v1alpha1.LabelNodeScript + "=" + name }))
	inf := factory.Core().V1().Pods().Informer()
	seen := func(obj any, deleted bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		key := p.Spec.NodeName + "/" + p.Labels[v1alpha1.LabelAction]
		if !l.seen[p.UID] {
			l.seen[p.UID] = true
			l.created[p.Name] = time.Now()
			l.pods[key] = append(l.pods[key], p.Name)
		}
		switch {
		case deleted || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
			delete(l.live, p.UID)
		case p.Labels[v1alpha1.LabelAction] == v1alpha1.ActionRun:
			l.live[p.UID] = true
		}
		l.maxLive = max(l.maxLive, len(l.live))
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { seen(obj, false) },
		UpdateFunc: func(_, obj any) { seen(obj, false) },
		DeleteFunc: func(obj any) { seen(obj, true) },
	}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("pod informer did not sync")
	}
	go func() { <-ctx.Done(); factory.Shutdown(); close(l.finished) }()
	t.Cleanup(func() { cancel(); <-l.finished })
	return l
}

func (l *podLog) runs(node, action string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.pods[node+"/"+action])
}

func (l *podLog) createdAt(pod string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.created[pod]
}

func (l *podLog) max() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.maxLive
}

// removeSecondNode removes the second real node from the test cluster (its
// Node object and processes; AddNode brings it back under the same name)
// and returns the first and second nodes' names; the suite gets it back at
// the end of the test whatever happened.
func removeSecondNode(ctx context.Context, t *testing.T) (first, second string) {
	t.Helper()
	first, second = env.nodes[0], env.nodes[1]
	if err := env.cluster.RemoveNode(ctx, second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := env.client.CoreV1().Nodes().Get(context.Background(), second, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			if _, err := env.cluster.AddNode(context.Background()); err != nil {
				t.Errorf("restoring node %s: %v", second, err)
			}
		}
	})
	return first, second
}

// TestWatcherAppliesToJoiningNode starts the watcher with the second real
// node absent: the script runs on the first; then the second node starts,
// and the script runs there within seconds of it becoming Ready.
func TestWatcherAppliesToJoiningNode(t *testing.T) {
	if env.cluster == nil {
		t.Skip("needs the local test cluster to remove and add a real node")
	}
	ctx := context.Background()
	dyn := watcherSetup(t)
	first, second := removeSecondNode(ctx, t)
	name := uniqueName("e2e-join-")
	cleanupNodeScript(t, dyn, name)
	pods := recordPods(t, name)
	startWatcher(t, dyn)
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  recordOutput: true
  script: 'echo "fixed $NODE_NAME"'
  rollout: {canary: 1, maxConcurrency: 2}
`, name, realNodes))
	waitNodeScript(ctx, t, dyn, name, 60*time.Second, "complete on one node", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Succeeded == 1 && ns.Status.Nodes == 1
	})
	if s, _ := nodeState(ctx, t, first, name); s.Phase != v1alpha1.PhaseSucceeded || nodeOutput(ctx, t, v1alpha1.DefaultNamespace, name, first, v1alpha1.ActionRun) != "fixed "+first+"\n" {
		t.Fatalf("node %s state %+v; want Succeeded with output %q", first, s, "fixed "+first)
	}

	added, err := env.cluster.AddNode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if added != second {
		t.Fatalf("AddNode started %s, want %s back", added, second)
	}
	n, err := env.client.CoreV1().Nodes().Get(ctx, second, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	readyAt := time.Time{}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			readyAt = c.LastTransitionTime.Time
		}
	}
	ns := waitNodeScript(ctx, t, dyn, name, 60*time.Second, "complete on both nodes", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Succeeded == 2 && ns.Status.Nodes == 2
	})
	runs := pods.runs(second, v1alpha1.ActionRun)
	if len(runs) != 1 {
		t.Fatalf("run pods on %s: %v, want exactly one", second, runs)
	}
	// readyAt has the API's one-second resolution.
	reaction := pods.createdAt(runs[0]).Sub(readyAt)
	t.Logf("node %s Ready at %s; its run pod created %s later", second, readyAt.Format(time.RFC3339), reaction.Round(time.Millisecond))
	if reaction > 10*time.Second {
		t.Errorf("the run pod on the joining node was created %s after it became Ready; want within seconds", reaction)
	}
	if s, _ := nodeState(ctx, t, second, name); s.Phase != v1alpha1.PhaseSucceeded || *s.ExitCode != 0 || s.Attempts != 1 || nodeOutput(ctx, t, v1alpha1.DefaultNamespace, name, second, v1alpha1.ActionRun) != "fixed "+second+"\n" {
		t.Errorf("node %s state %+v", second, s)
	}
	if c := findCond(ns, v1alpha1.ConditionComplete); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Complete condition %+v", c)
	}
	// Successes are aggregated: one Event on the NodeScript per reconcile, naming the nodes.
	events, err := env.client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=NodeScript,involvedObject.name=" + name + ",reason=" + v1alpha1.ReasonSucceeded})
	if err != nil || !slices.ContainsFunc(events.Items, func(e corev1.Event) bool { return strings.Contains(e.Message, second) }) {
		t.Errorf("no %s event on %s naming node %s (%v)", v1alpha1.ReasonSucceeded, name, second, err)
	}
}

func findCond(ns *v1alpha1.NodeScript, typ string) *metav1.Condition {
	for i := range ns.Status.Conditions {
		if ns.Status.Conditions[i].Type == typ {
			return &ns.Status.Conditions[i]
		}
	}
	return nil
}

// TestWatcherCanaryFailureHaltsRollsBackAndCordons: the script fails on the
// canary; the rollout halts, the rollback script runs there, the node is
// cordoned (and recorded as cordoned by nodeexec), and nothing runs on the
// other node. A corrected spec then runs everywhere and uncordons the node.
func TestWatcherCanaryFailureHaltsRollsBackAndCordons(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	name := uniqueName("e2e-canary-")
	cleanupNodeScript(t, dyn, name, env.nodes...)
	pods := recordPods(t, name)
	startWatcher(t, dyn)
	doc := func(script string) string {
		return fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  recordOutput: true
  script: %q
  rollbackScript: 'echo "rolled back $NODE_NAME"'
  onFailure: {rollback: true, cordon: true}
  rollout: {canary: 1, maxConcurrency: 2}
`, name, realNodes, script)
	}
	applyNodeScript(ctx, t, dyn, doc(`echo "broken on $NODE_NAME" >&2; exit 3`))
	ns := waitNodeScript(ctx, t, dyn, name, 60*time.Second, "halted with the canary rolled back", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageHalted && ns.Status.RolledBack == 1
	})
	if c := findCond(ns, v1alpha1.ConditionHalted); c == nil || c.Status != metav1.ConditionTrue || c.Reason != "CanaryFailed" {
		t.Errorf("Halted condition %+v; want True, CanaryFailed", c)
	}
	var canary, other string
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
	s, n := nodeState(ctx, t, canary, name)
	if s.Phase != v1alpha1.PhaseRolledBack || s.ExitCode == nil || *s.ExitCode != 3 || s.Rollback != v1alpha1.PhaseSucceeded ||
		!s.Cordoned || !s.CordonedByUs || !strings.Contains(nodeOutput(ctx, t, v1alpha1.DefaultNamespace, name, canary, v1alpha1.ActionRun), "broken on "+canary) {
		t.Errorf("canary %s state %+v", canary, s)
	}
	if !n.Spec.Unschedulable {
		t.Errorf("canary %s is not cordoned", canary)
	}
	if got := pods.runs(canary, v1alpha1.ActionRollback); len(got) != 1 {
		t.Errorf("rollback pods on %s: %v, want one", canary, got)
	}
	// Nothing ran on the other node, and nothing will while halted.
	time.Sleep(3 * time.Second)
	if got := pods.runs(other, v1alpha1.ActionRun); len(got) != 0 {
		t.Fatalf("pods ran on %s while the canary failed: %v", other, got)
	}
	if s, n := nodeState(ctx, t, other, name); s.Phase != v1alpha1.PhasePending || n.Spec.Unschedulable {
		t.Errorf("other node %s: state %+v, unschedulable %t", other, s, n.Spec.Unschedulable)
	}

	// The corrected spec is a new rollout; the node nodeexec cordoned is
	// uncordoned once the corrected script succeeded there.
	applyNodeScript(ctx, t, dyn, doc(`echo "fixed $NODE_NAME"`))
	waitNodeScript(ctx, t, dyn, name, 90*time.Second, "complete after the fix", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Succeeded == 2
	})
	if !waitFor(20*time.Second, func() bool {
		s, n := nodeState(ctx, t, canary, name)
		return !n.Spec.Unschedulable && !s.CordonedByUs
	}) {
		s, n := nodeState(ctx, t, canary, name)
		t.Errorf("after the fix, %s: unschedulable %t, state %+v; want uncordoned", canary, n.Spec.Unschedulable, s)
	}
}

// TestWatcherNeverUncordonsAnotherCordon: a node cordoned by someone else
// stays cordoned when the script fails there and later succeeds.
func TestWatcherNeverUncordonsAnotherCordon(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	name := uniqueName("e2e-cordon-")
	cleanupNodeScript(t, dyn, name, env.nodes...)
	theirs := env.nodes[1]
	if _, err := env.client.CoreV1().Nodes().Patch(ctx, theirs, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	startWatcher(t, dyn)
	doc := func(script string) string {
		return fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  script: %q
  onFailure: {cordon: true}
  rollout: {canary: 2, maxConcurrency: 2, maxFailures: 2}
`, name, realNodes, script)
	}
	applyNodeScript(ctx, t, dyn, doc("exit 1"))
	waitNodeScript(ctx, t, dyn, name, 60*time.Second, "failed on both canaries", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Failed == 2
	})
	waitFor(10*time.Second, func() bool {
		a, _ := nodeState(ctx, t, env.nodes[0], name)
		b, _ := nodeState(ctx, t, theirs, name)
		return a.Cordoned && b.Cordoned
	})
	if s, n := nodeState(ctx, t, env.nodes[0], name); !s.Cordoned || !s.CordonedByUs || !n.Spec.Unschedulable {
		t.Errorf("%s: state %+v unschedulable %t; want cordoned by nodeexec", env.nodes[0], s, n.Spec.Unschedulable)
	}
	if s, _ := nodeState(ctx, t, theirs, name); !s.Cordoned || s.CordonedByUs {
		t.Errorf("%s: state %+v; want cordoned, not by nodeexec", theirs, s)
	}
	applyNodeScript(ctx, t, dyn, doc("true"))
	waitNodeScript(ctx, t, dyn, name, 60*time.Second, "complete after the fix", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete
	})
	if !waitFor(20*time.Second, func() bool {
		_, n := nodeState(ctx, t, env.nodes[0], name)
		return !n.Spec.Unschedulable
	}) {
		t.Errorf("%s, cordoned by nodeexec, was not uncordoned after the fix", env.nodes[0])
	}
	time.Sleep(2 * time.Second)
	if _, n := nodeState(ctx, t, theirs, name); !n.Spec.Unschedulable {
		t.Errorf("%s was cordoned by someone else and nodeexec uncordoned it", theirs)
	}
}

// TestWatcherManualPromotion: with manual promotion the rollout stops after
// the canary until `nodeexec promote NAME --to all`.
func TestWatcherManualPromotion(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	name := uniqueName("e2e-promote-")
	cleanupNodeScript(t, dyn, name)
	pods := recordPods(t, name)
	startWatcher(t, dyn)
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  script: 'echo ok'
  rollout: {canary: 1, promotion: Manual, maxConcurrency: 2}
`, name, realNodes))
	ns := waitNodeScript(ctx, t, dyn, name, 60*time.Second, "awaiting promotion", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageAwaitingPromotion
	})
	if ns.Status.Succeeded != 1 || ns.Status.Pending != 1 {
		t.Fatalf("before promotion: %+v; want 1 succeeded, 1 pending", ns.Status)
	}
	time.Sleep(2 * time.Second)
	total := len(pods.runs(env.nodes[0], v1alpha1.ActionRun)) + len(pods.runs(env.nodes[1], v1alpha1.ActionRun))
	if total != 1 {
		t.Fatalf("%d run pods before promotion, want 1", total)
	}
	out, errOut, code := cli(ctx, "", "promote", name, "--to", "all")
	if code != 0 || !strings.Contains(out, "promoted to all") {
		t.Fatalf("nodeexec promote: exit %d\n%s%s", code, out, errOut)
	}
	waitNodeScript(ctx, t, dyn, name, 60*time.Second, "complete after promotion", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Succeeded == 2
	})
	out, errOut, code = cli(ctx, "", "status", name)
	if code != 0 || strings.Count(out, "Succeeded") != 2 || !strings.Contains(out, "stage Complete") {
		t.Errorf("nodeexec status: exit %d\n%s%s", code, out, errOut)
	}
}

// TestWatcherKillAndRestart kills `nodeexec watch` (leader-elected, as
// deployed) with SIGKILL while a run is in progress and starts it again:
// the rollout completes, each node ran the script exactly once (one run
// pod, one line in its log file on the node), and concurrency was never
// exceeded.
func TestWatcherKillAndRestart(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	name := uniqueName("e2e-kill-")
	cleanupNodeScript(t, dyn, name)
	pods := recordPods(t, name)
	logFile := "/var/tmp/nodeexec-e2e-" + name + "-$NODE_NAME.log"
	t.Cleanup(func() {
		for _, n := range env.nodes[:2] {
			cli(context.Background(), "", "run", "--node", n, "--", "sh", "-c", "rm -f "+strings.ReplaceAll(logFile, "$NODE_NAME", n))
		}
	})
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  script: 'date >> %s; sleep 4'
  rollout: {canary: 1, maxConcurrency: 1}
`, name, realNodes, logFile))
	lease := "e2e-" + name
	start := func() *exec.Cmd {
		cmd := exec.Command(env.cli, "--kubeconfig", env.kubeconfig, "watch", "--leader-elect",
			"--leader-election-namespace", v1alpha1.DefaultNamespace, "--leader-election-id", lease)
		cmd.Stderr = &syncBuffer{}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	first := start()
	t.Cleanup(func() {
		_ = env.client.CoordinationV1().Leases(v1alpha1.DefaultNamespace).Delete(context.Background(), lease, metav1.DeleteOptions{})
	})
	waitNodeScript(ctx, t, dyn, name, 60*time.Second, "running on a node", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Running == 1
	})
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	t.Logf("killed the watcher (pid %d) with a run in progress", first.Process.Pid)
	second := start()
	t.Cleanup(func() {
		_ = second.Process.Signal(os.Interrupt)
		_ = second.Wait()
	})
	waitNodeScript(ctx, t, dyn, name, 120*time.Second, "complete after the restart", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete && ns.Status.Succeeded == 2
	})
	for _, n := range env.nodes[:2] {
		if got := pods.runs(n, v1alpha1.ActionRun); len(got) != 1 {
			t.Errorf("node %s: run pods %v, want exactly one", n, got)
		}
		// The default backend (nsenter) sees the node's own filesystem.
		out, errOut, code := cli(ctx, "", "run", "--node", n, "--", "sh", "-c", "cat "+strings.ReplaceAll(logFile, "$NODE_NAME", n))
		if code != 0 {
			t.Fatalf("reading the log on %s: %d %s", n, code, errOut)
		}
		if lines := strings.Count(strings.TrimSpace(out), "\n") + 1; lines != 1 {
			t.Errorf("node %s ran the script %d times:\n%s", n, lines, out)
		}
		if s, _ := nodeState(ctx, t, n, name); s.Attempts != 1 || s.Phase != v1alpha1.PhaseSucceeded {
			t.Errorf("node %s state %+v; want Succeeded on attempt 1", n, s)
		}
	}
	if m := pods.max(); m > 1 {
		t.Errorf("%d run pods existed at once; maxConcurrency is 1", m)
	}
}

// TestApplyRejectsBadInput: each bad NodeScript is refused by `nodeexec
// apply` with a message naming the field, and a file with one bad
// document applies none.
func TestApplyRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	good := "apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: %s}\nspec:\n  nodeSelector: {}\n  script: 'true'\n"
	cases := []badApply{
		{"selector", "apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: %s}\nspec:\n  nodeSelector: {matchExpressions: [{key: a, operator: Bogus}]}\n  script: 'true'\n", "spec.nodeSelector"},
		{"concurrency-0", good + "  rollout: {maxConcurrency: 0}\n", "spec.rollout.maxConcurrency"},
		{"concurrency-150", good + "  rollout: {maxConcurrency: \"150%%\"}\n", "spec.rollout.maxConcurrency"},
		{"backend", good + "  backend: {name: ssh}\n", "spec.backend.name"},
		{"no-script", "apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: %s}\nspec:\n  nodeSelector: {}\n", "spec.script"},
		{"rollback", good + "  onFailure: {rollback: true}\n", "spec.rollbackScript"},
		{"unknown-field", good + "  scirpt: 'x'\n", "scirpt"},
		{"window-start", good + "  window: {start: \"25:00\", end: \"04:00\"}\n", "spec.window.start"},
		{"window-day", good + "  window: {days: [Monday], start: \"22:00\", end: \"04:00\"}\n", "spec.window.days[0]"},
		{"window-zone", good + "  window: {start: \"22:00\", end: \"04:00\", timeZone: Mars/Olympus}\n", "spec.window.timeZone"},
		{"paused-string", good + "  paused: yes-please\n", "paused"},
		{"maintenance-drain-no-cordon", good + "  maintenance: {drain: {timeout: 1m}}\n", "spec.maintenance.cordon"},
		{"maintenance-drain-timeout", good + "  maintenance: {cordon: true, drain: {timeout: soon}}\n", "spec.maintenance.drain.timeout"},
		{"maintenance-unavailable", good + "  maintenance: {cordon: true, maxUnavailable: \"0%%\"}\n", "spec.maintenance.maxUnavailable"},
		{"script-and-scriptfrom", good + "  scriptFrom: {configMapKeyRef: {name: fix, key: run.sh}}\n", "spec.scriptFrom"},
		{"scriptfrom-both-refs", "apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: %s}\nspec:\n  nodeSelector: {}\n  scriptFrom: {configMapKeyRef: {name: a, key: b}, secretKeyRef: {name: a, key: b}}\n", "spec.scriptFrom"},
		{"scriptfrom-bad-key", "apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: %s}\nspec:\n  nodeSelector: {}\n  scriptFrom: {secretKeyRef: {name: a, key: 'no/slash'}}\n", "spec.scriptFrom.secretKeyRef.key"},
		{"configmapenv-name", good + "  configMapEnv: [{configMap: Not_A_Name}]\n", "spec.configMapEnv[0].configMap"},
		{"reboot-policy", good + "  reboot: Sometimes\n", "spec.reboot"},
		{"reboot-timeout", good + "  reboot: Always\n  rebootTimeout: soon\n", "spec.rebootTimeout"},
		{"reboot-sentinel", good + "  reboot: IfRequired\n  rebootSentinel: run/reboot-required\n", "spec.rebootSentinel"},
		{"blocking-empty", good + "  blockingPodSelector: {}\n", "spec.blockingPodSelector"},
		{"check-blank", good + "  checkScript: '   '\n", "spec.checkScript"},
		{"reapply-empty", good + "  reapply: {}\n", "spec.reapply"},
		{"reapply-interval-short", good + "  reapply: {interval: 30s}\n", "spec.reapply.interval"},
		{"reapply-interval-syntax", good + "  reapply: {onReboot: true, interval: daily}\n", "spec.reapply.interval"},
	}
	expectApplyRefused(ctx, t, dyn, "e2e-bad-", good, cases)
}

// TestWatcherNodeScriptDeletionDeletesPods: run pods are owned by their
// NodeScript, so deleting it has the garbage collector delete them. Deleted
// while no watcher runs, the NodeScript waits for the watcher's finalizer
// (its run pod keeps its deadline); the next watcher lets it go, and the
// pod goes with it.
func TestWatcherNodeScriptDeletionDeletesPods(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	name := uniqueName("e2e-delete-")
	cleanupNodeScript(t, dyn, name)
	ctxW, stopW := context.WithCancel(ctx)
	w, err := watcher.New(watcher.Options{Client: env.client, Dynamic: dyn})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Start(ctxW) }()
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  script: 'sleep 60'
`, name, realNodes))
	waitNodeScript(ctx, t, dyn, name, 60*time.Second, "running", func(ns *v1alpha1.NodeScript) bool { return ns.Status.Running == 1 })
	stopW()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	sel := metav1.ListOptions{LabelSelector: v1alpha1.LabelNodeScript + "=" + name}
	pods, err := env.client.CoreV1().Pods(v1alpha1.DefaultNamespace).List(ctx, sel)
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("run pods: %v %v", pods, err)
	}
	if err := dyn.Resource(v1alpha1.Resource).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if ns, err := nodescripts.Get(ctx, dyn, name); err != nil || ns.DeletionTimestamp == nil {
		t.Fatalf("deleted without a watcher: %v; want it Terminating, held by %s", err, v1alpha1.Finalizer)
	}
	startWatcher(t, dyn)
	if !waitFor(60*time.Second, func() bool {
		p, err := env.client.CoreV1().Pods(v1alpha1.DefaultNamespace).Get(ctx, pods.Items[0].Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil)
	}) {
		t.Errorf("the run pod %s was not deleted with its NodeScript", pods.Items[0].Name)
	}
}
