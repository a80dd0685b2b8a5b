package watcher

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubectl/pkg/drain"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// failurePolicy applies OnFailure to a node whose script failed: rollback
// script, cordon, drain. Each step is recorded in the node's state, so it
// is taken once, also across restarts.
func (c *controller) failurePolicy(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, s nodeState, rollbackBusy bool, now time.Time) error {
	p := ns.Spec.OnFailure
	changed := false
	if !p.Cordon && s.CordonedByUs && n.Spec.Unschedulable {
		// Cordoned for the run (spec.maintenance); onFailure does not keep it.
		return c.uncordon(ctx, ns, n, s, "its run failed and spec.onFailure.cordon is not set")
	}
	if p.Cordon && !s.Cordoned {
		if !n.Spec.Unschedulable {
			if err := c.cordon(ctx, n, true); err != nil {
				return err
			}
			s.CordonedByUs = true
			c.events.Eventf(n, corev1.EventTypeWarning, v1alpha1.ReasonCordoned, "nodescript %s failed here: cordoned", ns.Name)
		}
		s.Cordoned, changed = true, true
	}
	if (p.Rollback || analysisRollback(ns, s)) && s.Rollback == "" && !rollbackBusy {
		pod, err := c.w.runPod(runPodSpec{NodeScript: ns, Node: n.Name, Action: v1alpha1.ActionRollback, Attempt: 1, Now: now})
		if err != nil {
			return err
		}
		c.w.expect(pod.Name, now)
		if _, err := c.w.o.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{FieldManager: "nodeexec-watcher"}); err != nil && !apierrors.IsAlreadyExists(err) {
			c.w.unexpect(pod.Name)
			return fmt.Errorf("node %s: creating rollback pod: %w", n.Name, err)
		}
		s.Rollback, changed = "Running", true
	} else if s.Rollback == "Running" && !rollbackBusy {
		name := runPodName(ns.Name, s.Hash, n.Name, v1alpha1.ActionRollback, 1)
		if !c.w.expected(name) {
			gone, err := c.gone(ctx, ns, name, now)
			if err != nil {
				return err
			}
			if gone {
				s.Rollback, changed = v1alpha1.PhaseFailed, true
				c.events.Eventf(n, corev1.EventTypeWarning, v1alpha1.ReasonRollbackFailed, "nodescript %s: rollback pod %s disappeared before its outcome was recorded", ns.Name, name)
			}
		}
	}
	if changed {
		if err := c.w.writeState(ctx, ns, n, s); err != nil {
			return err
		}
	}
	if p.Drain && s.Cordoned && s.Drain == "" {
		c.drain(ctx, ns, n)
	}
	return nil
}

// cordon sets the node's unschedulable field with kubectl's cordon helper.
func (c *controller) cordon(ctx context.Context, n *corev1.Node, desired bool) error {
	h := &drain.Helper{Ctx: ctx, Client: c.w.o.Client, Out: io.Discard, ErrOut: io.Discard}
	if err := drain.RunCordonOrUncordon(h, n.DeepCopy(), desired); err != nil {
		return fmt.Errorf("node %s: cordon=%t: %w", n.Name, desired, err)
	}
	return nil
}

// uncordon undoes the watcher's own cordon (a node cordoned by someone
// else is never passed here) and records it in s, the node's state; why
// says when, for the Event: once the node succeeded (a corrected spec ran
// there, or the run it was cordoned for under spec.maintenance), or when a
// run it was cordoned for failed and spec.onFailure.cordon is not set.
func (c *controller) uncordon(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, s nodeState, why string) error {
	if err := c.cordon(ctx, n, false); err != nil {
		return err
	}
	s.CordonedByUs, s.Cordoned = false, false
	c.events.Eventf(n, corev1.EventTypeNormal, v1alpha1.ReasonUncordoned, "nodescript %s: uncordoned (the watcher had cordoned it): %s", ns.Name, why)
	return c.w.writeState(ctx, ns, n, s)
}

// drain evicts the node's pods in the background with kubectl's drain
// helper (DaemonSet pods and nodeexec's own pods stay), within DrainTimeout,
// and records the outcome in the node's state.
func (c *controller) drain(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node) {
	if !c.w.claim(c.w.draining, n.Name) {
		return
	}
	timeout := v1alpha1.Defaulted(ns).Spec.OnFailure.DrainTimeout.Duration
	go func() {
		defer func() {
			c.w.release(c.w.draining, n.Name)
			c.queue.Add(ns.Name)
		}()
		result, reason, typ := v1alpha1.ReasonDrained, v1alpha1.ReasonDrained, corev1.EventTypeNormal
		if err := runDrain(ctx, c.w.o.Client, n.Name, drainOptions{Timeout: timeout, DeleteEmptyDirData: true, GracePeriodSeconds: -1}); err != nil {
			if ctx.Err() != nil {
				return // stopped: drained again on the next start
			}
			result, reason, typ = tail("drain failed: "+err.Error(), 256), v1alpha1.ReasonDrainFailed, corev1.EventTypeWarning
		}
		c.events.Eventf(n, typ, reason, "nodescript %s failed here: %s", ns.Name, result)
		// The node as known now, not n: n's state annotation is the one from
		// before the failure policy's writes, which the informer has seen
		// since (so they are no longer in the overlay); recording the drain
		// on it would undo them (the cordon record, the failed run).
		cur, err := c.nodes.Get(n.Name)
		if err != nil {
			return // the node is gone
		}
		s, ok := c.w.state(ctx, ns.Name, cur)
		if !ok {
			return
		}
		s.Drain = result
		if err := c.w.writeState(ctx, ns, n, s); err != nil {
			logr.FromContextOrDiscard(ctx).Error(err, "recording the drain", "node", n.Name)
		}
	}()
}

// removeTaint removes the startup taint from a node where the script
// succeeded, with a JSON patch that fails if the node changed since read.
func (c *controller) removeTaint(ctx context.Context, n *corev1.Node, t *corev1.Taint) error {
	patch, _ := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/resourceVersion", "value": n.ResourceVersion},
		{"op": "replace", "path": "/spec/taints", "value": withoutTaint(n, t)},
	})
	if _, err := c.w.o.Client.CoreV1().Nodes().Patch(ctx, n.Name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: "nodeexec-watcher"}); err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsConflict(err) {
			return fmt.Errorf("node %s changed while removing taint %s; retrying: %w", n.Name, t.Key, err)
		}
		return fmt.Errorf("node %s: removing taint %s: %w", n.Name, t.Key, err)
	}
	c.events.Eventf(n, corev1.EventTypeNormal, v1alpha1.ReasonTaintRemoved, "the script succeeded here: taint %s removed", t.Key)
	return nil
}
