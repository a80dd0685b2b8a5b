package watcher

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// nodeCondition is the condition NodeScript name, at spec hash, puts on a
// node it selects whose record of it is s (times left unset), so that other
// controllers can gate on "this fix is applied here". Its message starts
// with "spec HASH" (the hash the reason refers to):
//
//   - no record (the node never ran the NodeScript): none (nil);
//   - Succeeded at hash: True, Applied;
//   - NotNeeded at hash (spec.checkScript exited 0): True, NotNeeded;
//   - Failed or RolledBack at hash: False, Failed (the exit code or reason);
//   - Pending or Running at hash (a run, an infrastructure retry or a
//     rerun under way): False, Pending;
//   - a record of another hash (the spec changed and the node has not run
//     the new one yet): False, Outdated (and which spec it last ran).
//
// A node the NodeScript no longer selects (or ignores) has none: the
// watcher removes it, and the finalizer removes it from every node when
// the NodeScript is deleted. It is a pure function.
func nodeCondition(name, hash string, s nodeState) *corev1.NodeCondition {
	if s.Hash == "" {
		return nil
	}
	c := &corev1.NodeCondition{Type: nodescript.ConditionType(name), Status: corev1.ConditionFalse}
	spec := "spec " + hash
	switch {
	case s.Hash != hash:
		c.Reason, c.Message = v1alpha1.ConditionOutdated, fmt.Sprintf("%s not yet run here (last ran spec %s: %s)", spec, s.Hash, s.Phase)
	case s.Phase == v1alpha1.PhaseSucceeded:
		c.Status, c.Reason, c.Message = corev1.ConditionTrue, v1alpha1.ConditionApplied, spec+" succeeded here"
	case s.Phase == v1alpha1.PhaseNotNeeded:
		c.Status, c.Reason, c.Message = corev1.ConditionTrue, v1alpha1.ConditionNotNeeded, spec+" not needed here (checkScript exited 0)"
	case s.Phase == v1alpha1.PhaseFailed || s.Phase == v1alpha1.PhaseRolledBack:
		c.Reason, c.Message = v1alpha1.ConditionFailed, spec+" failed here: "+failure(s)
		if s.Phase == v1alpha1.PhaseRolledBack {
			c.Message += "; rolled back"
		}
	case s.Phase == v1alpha1.PhaseRunning:
		c.Reason, c.Message = v1alpha1.ConditionPending, spec+" is running here"
	default:
		c.Reason, c.Message = v1alpha1.ConditionPending, spec+" is to run here"
	}
	return c
}

// failure describes a failed run: its reason (an infrastructure failure
// says so) or its exit code.
func failure(s nodeState) string {
	switch {
	case s.Infrastructure:
		return s.Reason + " (an infrastructure failure)"
	case s.Reason != "":
		return s.Reason
	case s.ExitCode != nil:
		return fmt.Sprintf("exit code %d", *s.ExitCode)
	}
	return "unknown"
}

// sameCondition reports whether a and b say the same (status, reason and
// message; times aside); nil is no condition.
func sameCondition(a, b *corev1.NodeCondition) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message
}

// nodeConditions is phase 4. Inputs: ns at spec hash, the cached nodes
// and now. Each node ns selects (and does not ignore) gets the condition
// NodeCondition says from its state (as phase 3 left it); every other node
// loses ns's condition. Only a condition that differs from the node's
// (status, reason or message) is written, in parallel; its
// lastTransitionTime changes only with its status. While a run or check pod
// goes (podRecord), a node's condition is kept (the outcome's write,
// writeState, sets it), and a node without one gets the one its recorded
// state (the annotation) says. Output: the joined errors of the writes.
func (c *controller) nodeConditions(ctx context.Context, ns *v1alpha1.NodeScript, hash string, cached nodeSet, now time.Time) error {
	sel, _ := metav1.LabelSelectorAsSelector(&ns.Spec.NodeSelector) // validated
	var work []func() error
	for _, n := range cached.all {
		var (
			want    *corev1.NodeCondition
			running bool
		)
		if nodescript.SelectsNode(ns, sel, n) {
			s, ok := c.w.state(ctx, ns.Name, n)
			if !ok {
				continue // unreadable: left alone (and logged)
			}
			want, running = nodeCondition(ns.Name, hash, s), podRecord(s)
		}
		have := c.w.condition(ns.Name, n)
		if running {
			// The run pod is the record while it goes: the condition
			// changes with the outcome's write. A node without one (its
			// ignore annotation just removed) gets the one the state
			// recorded before the run says.
			if have != nil {
				continue
			}
			before, err := decodeState(n.Annotations, ns.Name)
			if err != nil {
				continue
			}
			want = nodeCondition(ns.Name, hash, before)
		}
		if sameCondition(have, want) {
			continue
		}
		work = append(work, func() error { return c.w.writeCondition(ctx, ns.Name, n.Name, have, want, now) })
	}
	work = append(work, func() error { return c.maintenanceConditions(ctx, ns, cached, now) })
	return c.parallel(work)
}

// condition is node n's condition of NodeScript name: what this process
// last wrote when the informer does not show it yet, else the node's.
func (w *Watcher) condition(name string, n *corev1.Node) *corev1.NodeCondition {
	cached := nodescript.FindCondition(n, nodescript.ConditionType(name))
	w.mu.Lock()
	defer w.mu.Unlock()
	if o, ok := w.conds[name][n.Name]; ok {
		if !sameCondition(cached, o) {
			return o
		}
		delete(w.conds[name], n.Name)
	}
	return cached
}

// writeCondition sets node's condition of NodeScript name to want (nil
// removes it), keeping have's lastTransitionTime when the status is the
// same. RBAC: patch on nodes/status.
func (w *Watcher) writeCondition(ctx context.Context, name, node string, have, want *corev1.NodeCondition, now time.Time) error {
	if want == nil {
		if err := removeCondition(ctx, w.o.Client, node, name); err != nil {
			return err
		}
	} else {
		c := stamp(*want, have, now)
		want = &c
		if err := patchCondition(ctx, w.o.Client, node, c); err != nil {
			return err
		}
	}
	w.wroteCondition(name, node, want)
	return nil
}

// wroteCondition keeps c (nil: removed) as node's condition of NodeScript
// name until the node cache shows it (see condition).
func (w *Watcher) wroteCondition(name, node string, c *corev1.NodeCondition) {
	w.mu.Lock()
	if w.conds[name] == nil {
		w.conds[name] = map[string]*corev1.NodeCondition{}
	}
	w.conds[name][node] = c
	w.mu.Unlock()
}

// stamp is condition c, replacing have, with its times set at now (to the
// second): lastHeartbeatTime now, lastTransitionTime now unless have has
// the same status (then have's).
func stamp(c corev1.NodeCondition, have *corev1.NodeCondition, now time.Time) corev1.NodeCondition {
	c.LastHeartbeatTime, c.LastTransitionTime = metav1.NewTime(now.UTC().Truncate(time.Second)), metav1.NewTime(now.UTC().Truncate(time.Second))
	if have != nil && have.Status == c.Status && !have.LastTransitionTime.IsZero() {
		c.LastTransitionTime = have.LastTransitionTime
	}
	return c
}

// patchCondition sets condition c on node with a strategic merge patch of
// its status (conditions merge by type: the kubelet's and other
// controllers' are kept). A node that is gone has nothing to set. RBAC:
// patch on nodes/status.
func patchCondition(ctx context.Context, client kubernetes.Interface, node string, c corev1.NodeCondition) error {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{c}}})
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: "nodeexec-watcher"}, "status")
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("node %s: setting condition %s: %w", node, c.Type, err)
	}
	return nil
}

// removeCondition deletes NodeScript name's condition from node (a
// strategic merge patch of its status deleting that type only; a node
// without it, or gone, has nothing to remove). RBAC: patch on nodes/status.
func removeCondition(ctx context.Context, client kubernetes.Interface, node, name string) error {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []map[string]any{{"type": nodescript.ConditionType(name), "$patch": "delete"}}}})
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: "nodeexec-watcher"}, "status")
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("node %s: removing condition %s: %w", node, nodescript.ConditionType(name), err)
	}
	return nil
}
