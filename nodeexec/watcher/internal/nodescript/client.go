package nodescript

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// ErrCRDNotInstalled is returned when the API server does not serve
// nodescripts.nodeexec.io: install deploy/crd first.
var ErrCRDNotInstalled = errors.New("the NodeScript CRD (nodescripts.nodeexec.io) is not installed: kubectl apply -f deploy/crd/ (or kubectl apply -k deploy/)")

// Get reads one NodeScript. RBAC: get on nodescripts.
func Get(ctx context.Context, dyn dynamic.Interface, name string) (*v1alpha1.NodeScript, error) {
	u, err := dyn.Resource(v1alpha1.Resource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if CRDMissing(err) {
			return nil, fmt.Errorf("%w (%v)", ErrCRDNotInstalled, err)
		}
		return nil, fmt.Errorf("nodescript %q: %w", name, err)
	}
	return ToNodeScript(u)
}

// CmpOr is s, or def when s is empty.
func CmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// CRDMissing reports whether err is the API server not serving the
// resource at all (a 404 without an object name), not a missing object.
func CRDMissing(err error) bool {
	var st apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &st) {
		return false
	}
	d := st.Status().Details
	return d == nil || d.Name == ""
}

// RunNowUntil reads the run-now override of ns (v1alpha1.AnnotationRunNow): when
// it ends, whether it is set, and an error when it is set but not an RFC
// 3339 time. It is a pure function.
func RunNowUntil(ns *v1alpha1.NodeScript) (until time.Time, set bool, err error) {
	v, ok := ns.Annotations[v1alpha1.AnnotationRunNow]
	if !ok {
		return time.Time{}, false, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, true, fmt.Errorf("annotation %s %q: want an RFC 3339 time such as 2026-11-21T22:00:00Z", v1alpha1.AnnotationRunNow, v)
	}
	return t, true, nil
}

// ToNodeScript converts an informer's object to a typed NodeScript.
func ToNodeScript(obj any) (*v1alpha1.NodeScript, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("unexpected object %T", obj)
	}
	ns := &v1alpha1.NodeScript{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, ns); err != nil {
		return nil, fmt.Errorf("nodescript %s: %w", u.GetName(), err)
	}
	return ns, nil
}

// ToCalendar decodes a MaintenanceCalendar from the informer's cache.
func ToCalendar(obj any) (*v1alpha1.MaintenanceCalendar, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("unexpected object %T", obj)
	}
	cal := &v1alpha1.MaintenanceCalendar{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, cal); err != nil {
		return nil, fmt.Errorf("maintenancecalendar %s: %w", u.GetName(), err)
	}
	return cal, nil
}

// GoingRuns are NodeScript ns's check and run pods that have not finished
// and are not being deleted, by node (one list of pods in the run
// namespace; RBAC: list on pods there).
func GoingRuns(ctx context.Context, client kubernetes.Interface, ns *v1alpha1.NodeScript) (map[string]*corev1.Pod, error) {
	sel := fmt.Sprintf("%s=%s,%s in (%s,%s)", v1alpha1.LabelNodeScript, ns.Name, v1alpha1.LabelAction, v1alpha1.ActionCheck, v1alpha1.ActionRun)
	list, err := client.CoreV1().Pods(RunNamespace(&ns.Spec)).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("run pods in namespace %s: %w", RunNamespace(&ns.Spec), err)
	}
	going := map[string]*corev1.Pod{}
	for i := range list.Items {
		p := &list.Items[i]
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if o := going[p.Spec.NodeName]; o == nil || o.CreationTimestamp.Before(&p.CreationTimestamp) {
			going[p.Spec.NodeName] = p
		}
	}
	return going, nil
}
