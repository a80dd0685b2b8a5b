package nodescripts

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// Fixtures of the client verbs' tests (the watcher's tests have the same).

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

func script(mutate func(*v1alpha1.NodeScriptSpec)) *v1alpha1.NodeScript {
	ns := &v1alpha1.NodeScript{
		ObjectMeta: metav1.ObjectMeta{Name: "fix", UID: "uid-fix"},
		Spec: v1alpha1.NodeScriptSpec{
			NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}},
			Script:       "true",
		},
	}
	if mutate != nil {
		mutate(&ns.Spec)
	}
	return ns
}
