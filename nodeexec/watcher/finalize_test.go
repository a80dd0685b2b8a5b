package watcher

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// fakeDynamic is a dynamic client holding the NodeScripts given.
func fakeDynamic(t *testing.T, scripts ...*v1alpha1.NodeScript) *dynamicfake.FakeDynamicClient {
	t.Helper()
	var objs []runtime.Object
	for _, ns := range scripts {
		objs = append(objs, toUnstructured(t, ns))
	}
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{v1alpha1.Resource: "NodeScriptList"}, objs...)
}

// toUnstructured is ns as the dynamic client holds it.
func toUnstructured(t *testing.T, ns *v1alpha1.NodeScript) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ns)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(v1alpha1.GroupVersion.String())
	u.SetKind("NodeScript")
	return u
}

func TestEnsureFinalizer(t *testing.T) {
	ctx := context.Background()
	ns := &v1alpha1.NodeScript{ObjectMeta: metav1.ObjectMeta{Name: "fix", Finalizers: []string{"example.com/other"}}}
	dyn := fakeDynamic(t, ns)
	for range 2 { // the second call has the informer's stale copy
		if err := ensureFinalizer(ctx, dyn, ns); err != nil {
			t.Fatal(err)
		}
	}
	got, err := nodescript.Get(ctx, dyn, "fix")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"example.com/other", v1alpha1.Finalizer}, got.Finalizers); diff != "" {
		t.Errorf("finalizers (-want +got):\n%s", diff)
	}
}

func TestFinalize(t *testing.T) {
	ctx := context.Background()
	deleted := metav1.NewTime(time.Date(2026, 11, 23, 18, 0, 0, 0, time.UTC))
	ns := &v1alpha1.NodeScript{ObjectMeta: metav1.ObjectMeta{Name: "fix", DeletionTimestamp: &deleted, Finalizers: []string{v1alpha1.Finalizer, "example.com/other"}}}
	node := func(name string, unschedulable bool, ann map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann}, Spec: corev1.NodeSpec{Unschedulable: unschedulable}}
	}
	failed := nodeState{Hash: "h", Phase: v1alpha1.PhaseFailed, Cordoned: true, CordonedByUs: true}.Encode()
	other := nodeState{Hash: "o", Phase: v1alpha1.PhaseSucceeded}.Encode()
	nodes := []*corev1.Node{
		node("cordoned", true, map[string]string{stateAnnotation("fix"): failed, "keep": "1"}),
		node("other", false, map[string]string{stateAnnotation("fix-2"): other}),
		node("written", false, nil), // state written by this process, not in the cache yet
	}
	cs := fake.NewSimpleClientset(nodes[0], nodes[1], nodes[2])
	dyn := fakeDynamic(t, ns)
	w, err := New(Options{Client: cs, Dynamic: dyn})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.writeState(ctx, ns, nodes[2], nodeState{Hash: "h", Phase: v1alpha1.PhaseRunning}); err != nil {
		t.Fatal(err)
	}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range nodes {
		_ = idx.Add(n)
	}
	events := record.NewFakeRecorder(10)
	c := &controller{w: w, nodes: corelisters.NewNodeLister(idx), events: events}
	cs.ClearActions()
	if err := c.finalize(ctx, ns, nodes); err != nil {
		t.Fatal(err)
	}
	patched := map[string]bool{}
	for _, a := range cs.Actions() {
		if a.GetVerb() == "patch" {
			patched[a.(interface{ GetName() string }).GetName()] = true
		}
	}
	if diff := cmp.Diff(map[string]bool{"cordoned": true, "written": true}, patched); diff != "" {
		t.Errorf("nodes patched (-want +got):\n%s", diff)
	}
	for _, name := range []string{"cordoned", "written"} {
		n, _ := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if _, has := n.Annotations[stateAnnotation("fix")]; has {
			t.Errorf("node %s keeps the state annotation: %v", name, n.Annotations)
		}
	}
	if n, _ := cs.CoreV1().Nodes().Get(ctx, "cordoned", metav1.GetOptions{}); n.Annotations["keep"] != "1" || !n.Spec.Unschedulable {
		t.Errorf("node cordoned: other annotations or the cordon changed: %+v", n)
	}
	if n, _ := cs.CoreV1().Nodes().Get(ctx, "other", metav1.GetOptions{}); n.Annotations[stateAnnotation("fix-2")] != other {
		t.Errorf("another NodeScript's state changed: %v", n.Annotations)
	}
	select {
	case e := <-events.Events:
		if !strings.Contains(e, v1alpha1.ReasonLeftCordoned) || !strings.Contains(e, "kubectl uncordon cordoned") {
			t.Errorf("event %q", e)
		}
	default:
		t.Error("no LeftCordoned event")
	}
	got, err := nodescript.Get(ctx, dyn, "fix")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"example.com/other"}, got.Finalizers); diff != "" {
		t.Errorf("finalizers (-want +got):\n%s", diff)
	}
	if len(w.overlay["fix"]) != 0 {
		t.Errorf("the watcher still remembers states: %v", w.overlay["fix"])
	}
}
