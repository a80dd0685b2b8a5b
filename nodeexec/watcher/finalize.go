package watcher

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// hasFinalizer reports whether ns carries Finalizer.
func hasFinalizer(ns *v1alpha1.NodeScript) bool {
	return slices.Contains(ns.Finalizers, v1alpha1.Finalizer)
}

// ensureFinalizer puts Finalizer on ns before the watcher writes any node
// state for it. The informer's copy may predate a finalizer this process
// added, so the NodeScript is read again before the patch. RBAC: get and
// patch on nodescripts.
func ensureFinalizer(ctx context.Context, dyn dynamic.Interface, ns *v1alpha1.NodeScript) error {
	if hasFinalizer(ns) {
		return nil
	}
	cur, err := nodescript.Get(ctx, dyn, ns.Name)
	if err != nil {
		return err
	}
	if hasFinalizer(cur) || cur.DeletionTimestamp != nil {
		return nil
	}
	return patchFinalizers(ctx, dyn, cur, append(slices.Clone(cur.Finalizers), v1alpha1.Finalizer))
}

// patchFinalizers sets ns's finalizers to list by a merge patch carrying
// ns's resourceVersion: a concurrent change is a conflict (the reconcile is
// retried), never a lost finalizer of another controller. RBAC: patch on
// nodescripts.
func patchFinalizers(ctx context.Context, dyn dynamic.Interface, ns *v1alpha1.NodeScript, list []string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": list, "resourceVersion": ns.ResourceVersion}})
	if err != nil {
		return err
	}
	_, err = dyn.Resource(v1alpha1.Resource).Patch(ctx, ns.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "nodeexec-watcher"})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("nodescript %s: setting finalizers: %w", ns.Name, err)
	}
	return nil
}

// removeAnnotations deletes the annotations keys from node (a merge patch;
// a node that is gone has nothing to remove). RBAC: patch on nodes.
func removeAnnotations(ctx context.Context, client kubernetes.Interface, node string, keys ...string) error {
	ann := map[string]any{}
	for _, k := range keys {
		ann[k] = nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "nodeexec-watcher"})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("node %s: removing annotations %v: %w", node, keys, err)
	}
	return nil
}

// finalize is the reconcile of a NodeScript being deleted: its per-node
// annotations (state, rerun, ignore) are removed from every node that has
// one (or that this process wrote a state to and the informer does not show
// yet), and its condition from every node that has it (or that this
// process wrote it to), then Finalizer.
func (c *controller) finalize(ctx context.Context, ns *v1alpha1.NodeScript, nodes []*corev1.Node) error {
	if !hasFinalizer(ns) {
		return nil
	}
	// spec.uninstallScript first (uninstall.go); the nodes where it failed
	// keep their state annotation.
	done, uninstallFailed, err := c.uninstall(ctx, ns, nodes)
	if !done || err != nil {
		return err
	}
	written, condWritten := map[string]bool{}, map[string]bool{}
	c.w.mu.Lock()
	for node := range c.w.overlay[ns.Name] {
		written[node] = true
	}
	for node, cond := range c.w.conds[ns.Name] {
		condWritten[node] = cond != nil
	}
	c.w.mu.Unlock()
	keys := []string{stateAnnotation(ns.Name), rerunAnnotation(ns.Name), ignoreAnnotation(ns.Name)}
	var work []func() error
	for _, n := range nodes {
		has := written[n.Name]
		for _, k := range keys {
			_, h := n.Annotations[k]
			has = has || h
		}
		if keys := keys; has {
			if uninstallFailed[n.Name] {
				keys = keys[1:] // the state annotation stays: it records the failed uninstall
			}
			work = append(work, func() error {
				if s, ok := c.w.state(ctx, ns.Name, n); ok && s.CordonedByUs && n.Spec.Unschedulable {
					c.events.Eventf(n, corev1.EventTypeWarning, v1alpha1.ReasonLeftCordoned,
						"nodescript %s was deleted; the node stays cordoned (it was cordoned after a failure): kubectl uncordon %s once it is fixed", ns.Name, n.Name)
				}
				c.releaseSilences(ctx, ns, n) // its record goes: expired first
				return removeAnnotations(ctx, c.w.o.Client, n.Name, keys...)
			})
		}
		if n.Labels[v1alpha1.LabelBeforeRun] == ns.Name || n.Labels[v1alpha1.LabelAfterRun] == ns.Name {
			work = append(work, func() error { return c.unlabel(ctx, ns, n, v1alpha1.LabelBeforeRun, v1alpha1.LabelAfterRun) }) // spec.hooks (annotations.go)
		}
		if condWritten[n.Name] || nodescript.FindCondition(n, nodescript.ConditionType(ns.Name)) != nil {
			work = append(work, func() error { return removeCondition(ctx, c.w.o.Client, n.Name, ns.Name) })
		}
	}
	if err := c.parallel(work); err != nil {
		return err
	}
	c.w.forget(ns.Name)
	return patchFinalizers(ctx, c.w.o.Dynamic, ns, slices.DeleteFunc(slices.Clone(ns.Finalizers), func(f string) bool { return f == v1alpha1.Finalizer }))
}
