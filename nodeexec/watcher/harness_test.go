package watcher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// env is a controller over fake clients: a fake clientset holding nodes
// and pods, a fake dynamic client holding NodeScripts, a fake clock, and
// caches that sync loads from the fakes as the informers of run would
// (trimmed objects, the run pods only, indexed by NodeScript).
type env struct {
	t      *testing.T
	ctx    context.Context
	clock  *clocktesting.FakeClock
	cs     *fake.Clientset
	dyn    *dynamicfake.FakeDynamicClient
	events *record.FakeRecorder
	queue  workqueue.TypedRateLimitingInterface[string]
	c      *controller

	nodeCache, podCache cache.Indexer
	scriptCache         cache.Store
	// calls are the last reconcile's calls to the clientset ("") and the
	// dynamic client ("dyn"), as "verb resource[/subresource] name"; the
	// clientset's patches of nodes/status that set only a condition (phase
	// 4, made in parallel) apart, sorted ("conditions"). A state write is
	// "patch nodes/status NODE" in "" (its condition in the same patch).
	calls map[string][]string
}

// newEnv returns an env holding scripts and objs (nodes, pods) at time t0.
func newEnv(t *testing.T, scripts []*v1alpha1.NodeScript, objs ...runtime.Object) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	clk := clocktesting.NewFakeClock(t0)
	e := &env{
		t: t, ctx: ctx, clock: clk,
		cs:          fake.NewSimpleClientset(objs...),
		dyn:         fakeDynamic(t, scripts...),
		events:      record.NewFakeRecorder(100),
		nodeCache:   cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		podCache:    cache.NewIndexer(cache.MetaNamespaceKeyFunc, podIndexers()),
		scriptCache: cache.NewStore(cache.MetaNamespaceKeyFunc),
	}
	w, err := New(Options{Client: e.cs, Dynamic: e.dyn, Clock: clk, NotReadyGrace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	e.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "test", Clock: clk})
	// The API server sets a pod's creation time.
	e.cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if p, ok := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod); ok && p.CreationTimestamp.IsZero() {
			p.CreationTimestamp = metav1.NewTime(clk.Now())
		}
		return false, nil, nil
	})
	t.Cleanup(func() { cancel(); e.queue.ShutDown() })
	e.c = &controller{w: w, nodes: corelisters.NewNodeLister(e.nodeCache), pods: e.podCache, scripts: e.scriptCache, events: e.events, queue: e.queue}
	return e
}

// sync loads the caches from the fake clients, as the informers would.
func (e *env) sync() {
	e.t.Helper()
	nodes, err := e.cs.CoreV1().Nodes().List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var objs []any
	for i := range nodes.Items {
		n := withResourceVersion(e.t, &nodes.Items[i])
		if err := e.cs.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), n, ""); err != nil {
			e.t.Fatal(err)
		}
		o, _ := trimNode(n)
		objs = append(objs, o)
	}
	_ = e.nodeCache.Replace(objs, "")
	pods, err := e.cs.CoreV1().Pods("").List(e.ctx, metav1.ListOptions{LabelSelector: nodeexec.LabelManagedBy + "=" + nodeexec.ManagedByValue + "," + v1alpha1.LabelNodeScript})
	if err != nil {
		e.t.Fatal(err)
	}
	objs = nil
	for i := range pods.Items {
		o, _ := trimPod(&pods.Items[i])
		objs = append(objs, o)
	}
	_ = e.podCache.Replace(objs, "")
	scripts, err := e.dyn.Resource(v1alpha1.Resource).List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	objs = nil
	for i := range scripts.Items {
		objs = append(objs, &scripts.Items[i])
	}
	_ = e.scriptCache.Replace(objs, "")
	e.cs.ClearActions()
	e.dyn.ClearActions()
}

// reconcile syncs the caches, then reconciles NodeScript "fix", failing the
// test on an error; it returns when to look again.
func (e *env) reconcile() time.Duration {
	e.t.Helper()
	e.sync()
	after, err := e.c.reconcile(e.ctx, "fix")
	if err != nil {
		e.t.Fatalf("reconcile: %v", err)
	}
	e.calls = map[string][]string{"dyn": describe(e.dyn.Actions())}
	for i, call := range describe(e.cs.Actions()) {
		if p, ok := e.cs.Actions()[i].(k8stesting.PatchAction); ok && strings.HasPrefix(call, "patch nodes/status ") && !strings.Contains(string(p.GetPatch()), `"metadata"`) {
			e.calls["conditions"] = append(e.calls["conditions"], call)
		} else {
			e.calls[""] = append(e.calls[""], call)
		}
	}
	slices.Sort(e.calls["conditions"])
	return after
}

// nodeScript is NodeScript "fix" as stored.
func (e *env) nodeScript() *v1alpha1.NodeScript {
	e.t.Helper()
	ns, err := nodescript.Get(e.ctx, e.dyn, "fix")
	if err != nil {
		e.t.Fatal(err)
	}
	return ns
}

// node is the stored node name.
func (e *env) node(name string) *corev1.Node {
	e.t.Helper()
	n, err := e.cs.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// state is node's stored state for NodeScript "fix".
func (e *env) state(node string) nodeState {
	e.t.Helper()
	s, err := decodeState(e.node(node).Annotations, "fix")
	if err != nil {
		e.t.Fatal(err)
	}
	going, err := nodescript.GoingRuns(e.ctx, e.cs, e.nodeScript())
	if err != nil {
		e.t.Fatal(err)
	}
	return nodescripts.WithRunPod(s, going[node])
}

// pods are the stored pods' names, sorted.
func (e *env) pods() []string {
	e.t.Helper()
	list, err := e.cs.CoreV1().Pods("").List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, p := range list.Items {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}

// setPod sets the status of the stored pod name, as its kubelet would.
func (e *env) setPod(name string, st corev1.PodStatus) {
	e.t.Helper()
	p, err := e.cs.CoreV1().Pods(v1alpha1.DefaultNamespace).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	p.Status = st
	if _, err := e.cs.CoreV1().Pods(v1alpha1.DefaultNamespace).UpdateStatus(e.ctx, p, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// updateNode changes the stored node name.
func (e *env) updateNode(name string, mutate func(*corev1.Node)) {
	e.t.Helper()
	n := e.node(name)
	mutate(n)
	if _, err := e.cs.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// setSpec changes the stored NodeScript "fix"'s spec, its generation too.
func (e *env) setSpec(mutate func(*v1alpha1.NodeScriptSpec)) {
	e.t.Helper()
	ns := e.nodeScript()
	mutate(&ns.Spec)
	ns.Generation++
	if _, err := e.dyn.Resource(v1alpha1.Resource).Update(e.ctx, toUnstructured(e.t, ns), metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// describe is actions as "verb resource[/subresource] name".
func describe(actions []k8stesting.Action) []string {
	var out []string
	for _, a := range actions {
		res := a.GetResource().Resource
		if a.GetSubresource() != "" {
			res += "/" + a.GetSubresource()
		}
		name := ""
		switch a := a.(type) {
		case k8stesting.CreateAction:
			if o, ok := a.GetObject().(metav1.Object); ok {
				name = o.GetName()
			}
		case k8stesting.UpdateAction:
			if o, ok := a.GetObject().(metav1.Object); ok {
				name = o.GetName()
			}
		case interface{ GetName() string }:
			name = a.GetName()
		}
		out = append(out, strings.TrimSpace(a.GetVerb()+" "+res+" "+name))
	}
	return out
}

// recorded are the Events recorded since the last call ("Type Reason Message").
func (e *env) recorded() []string {
	var out []string
	for {
		select {
		case ev := <-e.events.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

// checkEvents fails the test unless the Events recorded since the last
// look have the reasons want, in any order.
func (e *env) checkEvents(what string, want ...string) {
	e.t.Helper()
	var got []string
	for _, ev := range e.recorded() {
		got = append(got, strings.Fields(ev)[1])
	}
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		e.t.Errorf("%s: event reasons (-want +got):\n%s", what, diff)
	}
}

// testNode is a Ready node of pool a named name, with boot ID "boot-1".
func testNode(name string, mutate ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1", Labels: map[string]string{"pool": "a"}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))}},
			NodeInfo:   corev1.NodeSystemInfo{BootID: "boot-1"},
		},
	}
	for _, m := range mutate {
		m(n)
	}
	return n
}

// ready is node n's Ready condition, to change.
func ready(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	panic("node " + n.Name + " has no Ready condition")
}

// withState gives a node the state s of NodeScript "fix".
func withState(s nodeState) func(*corev1.Node) {
	return func(n *corev1.Node) {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[stateAnnotation("fix")] = s.Encode()
	}
}

// runPod is the pod of action attempt on node for ns, as the watcher creates
// it. For a verify or rollback action of a NodeScript without that script,
// which has no such pod (RunPod refuses it), it is the run pod named and
// labelled as that action's: the phase tests only read its status.
func runPod(t *testing.T, ns *v1alpha1.NodeScript, node, action string, attempt int) *corev1.Pod {
	t.Helper()
	build := action
	if (action == v1alpha1.ActionVerify && ns.Spec.VerifyScript == "") || (action == v1alpha1.ActionRollback && ns.Spec.RollbackScript == "") {
		build = v1alpha1.ActionRun
	}
	p, err := buildRunPod(runPodSpec{NodeScript: ns, Backend: testBackend(t, ns), Node: node, Action: build, Attempt: attempt, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	p.Name, p.Labels[v1alpha1.LabelAction] = podName(ns, node, action, attempt), action
	p.CreationTimestamp = metav1.NewTime(t0)
	return p
}

// podName is the name of the pod of action attempt on node for ns.
func podName(ns *v1alpha1.NodeScript, node, action string, attempt int) string {
	return runPodName(ns.Name, v1alpha1.SpecHash(&ns.Spec), node, action, attempt)
}

// exited is the status of a pod whose script exited with code.
func exited(code int32) corev1.PodStatus {
	phase := corev1.PodSucceeded
	if code != 0 {
		phase = corev1.PodFailed
	}
	return corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "nodeexec", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Message: "output of the script\n"}},
	}}}
}

// waiting is the status of a pod whose container waits for reason.
func waiting(reason string) corev1.PodStatus {
	return corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "nodeexec", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "pull access denied"}},
	}}}
}

// running is the status of a pod whose script runs.
var running = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
	Name: "nodeexec", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
}}}

// testBackend is the backend ns's spec.backend names, on a fake client.
func testBackend(t testing.TB, ns *v1alpha1.NodeScript) nodeexec.Backend {
	t.Helper()
	b, err := nodeBackend(ns, fake.NewClientset())
	if err != nil {
		t.Fatalf("NodeBackend: %v", err)
	}
	return b
}

// withResourceVersion sets n's resourceVersion from its content, as the API
// server changes it with every change (the fake clientset's tracker keeps
// the one it was given; sync stores it back there): the watcher's caches
// keyed by resourceVersion must see every change a test makes.
func withResourceVersion(t *testing.T, n *corev1.Node) *corev1.Node {
	t.Helper()
	n.ResourceVersion = ""
	b, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	n.ResourceVersion = hex.EncodeToString(sum[:8])
	return n
}
