package watcher

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// annotationRecheck bounds how long a timeout of an annotation gate may
// go unnoticed when no node event comes (annotations set on the node
// reconcile at once).
const annotationRecheck = 5 * time.Second

// gate verdicts of gateStep.
const (
	gateWait    = "wait"
	gateReady   = "ready"
	gateTimeout = "timeout"
)

// gateStep judges an annotation gate g on node n, which NodeScript name
// waits on under label since since (nil: not labelled yet) at now: ready
// when the node carries the label with name (or not yet, since nil) and
// every annotation is "true"; timeout past g.timeout; wait otherwise
// (another NodeScript's label on the node included: one NodeScript at a
// time waits on a node). Pure.
func gateStep(g *v1alpha1.AnnotationGate, label, name string, n *corev1.Node, since *time.Time, now time.Time) string {
	owner, labelled := n.Labels[label]
	if since != nil && g.Timeout != nil && !now.Before(since.Add(g.Timeout.Duration)) {
		return gateTimeout
	}
	if labelled && owner == name && len(nodescript.MissingAnnotations(g, n.Annotations)) == 0 {
		return gateReady
	}
	return gateWait
}

// beforeRunPassed reports whether node state s has passed spec.hooks.beforeRun
// for the run at hash: the gate said ready (AwaitingBeforeRunDone), or the
// node is already Drained for the run (the gate comes before the cordon).
func beforeRunPassed(s nodeState, hash string) bool {
	return s.Hash == hash && s.Phase == v1alpha1.PhaseRunning && (s.Awaiting == v1alpha1.AwaitingBeforeRunDone || s.Maintenance == v1alpha1.MaintenanceDrained)
}

// beforeRun is the step before a node's run under spec.hooks.beforeRun
// (prepare calls it after the pre-pull, start when there is no
// maintenance): it reports whether it took the step (the caller stops).
// Without a gate, or once passed, it does nothing. Otherwise it records
// node n (state s) Running with Awaiting BeforeRun (attempts kept, never
// cordoned), labels it and waits (awaitBefore). RBAC: patch nodes, patch
// nodes/status.
func (c *controller) beforeRun(ctx context.Context, ns *v1alpha1.NodeScript, hash string, n *corev1.Node, s nodeState, now time.Time) (bool, error) {
	g, _ := nodescript.AnnotationGate(ns, true)
	if g == nil || beforeRunPassed(s, hash) {
		return false, nil
	}
	next := nodeState{Hash: hash, Phase: v1alpha1.PhaseRunning, Since: now, BootID: n.Status.NodeInfo.BootID,
		CordonedByUs: s.CordonedByUs, Cordoned: s.Cordoned && s.CordonedByUs, Awaiting: v1alpha1.AwaitingBeforeRun}
	if s.Hash == hash {
		next.Attempts, next.AttemptsBefore, next.Checked = s.Attempts, s.AttemptsBefore, s.Checked
	}
	if s.Hash == hash && s.Phase == v1alpha1.PhaseRunning && s.Awaiting == v1alpha1.AwaitingBeforeRun {
		next = s // waiting already
	} else if err := c.w.writeState(ctx, ns, n, next); err != nil {
		return true, err
	}
	if g.Timeout != nil {
		c.queue.AddAfter(ns.Name, g.Timeout.Duration)
	}
	return true, c.awaitBefore(ctx, ns, hash, n, next, now)
}

// awaitBefore is phase 2's handling of node n whose state s awaits
// spec.hooks.beforeRun (or has just passed it): it puts the label on
// (Event AwaitingAnnotations, the wait's start recorded as
// AwaitingSince), and once every annotation is "true" writes the state
// AwaitingBeforeRunDone removing the annotations in the same patch, removes
// the label (Event AnnotationsReady) and starts the run (start: silences,
// cordon, drain, pod). Past the timeout: an infrastructure failure
// (ReasonBeforeRunTimeout, counted as an attempt, retried after its
// backoff), the annotations and label removed, never cordoned. A gate
// removed from the spec meanwhile counts as passed.
func (c *controller) awaitBefore(ctx context.Context, ns *v1alpha1.NodeScript, hash string, n *corev1.Node, s nodeState, now time.Time) error {
	g, label := nodescript.AnnotationGate(ns, true)
	if g == nil {
		s.Awaiting = v1alpha1.AwaitingBeforeRunDone
	}
	if s.Awaiting == v1alpha1.AwaitingBeforeRunDone {
		if err := c.unlabel(ctx, ns, n, v1alpha1.LabelBeforeRun); err != nil {
			return err
		}
		return c.start(ctx, ns, hash, n, s, v1alpha1.ActionRun, now)
	}
	if s.AwaitingSince == nil {
		if owner, ok := n.Labels[label]; ok && owner != ns.Name {
			return nil // another NodeScript waits on the node: after it
		}
		if err := c.label(ctx, ns, n, label); err != nil {
			return err
		}
		s.AwaitingSince = &now
		c.events.Eventf(n, corev1.EventTypeNormal, v1alpha1.ReasonAwaitingAnnotations, "nodescript %s: before the run (not cordoned): labelled %s=%s; waiting until %s are \"true\" (spec.hooks.beforeRun)",
			ns.Name, label, ns.Name, strings.Join(g.Annotations, ", "))
		return c.w.writeState(ctx, ns, n, s)
	}
	if _, ok := n.Labels[label]; !ok {
		// Removed meanwhile (by hand, or by another NodeScript's watcher
		// that had put its own): put again, the wait goes on.
		if err := c.label(ctx, ns, n, label); err != nil {
			return err
		}
	}
	switch gateStep(g, label, ns.Name, n, s.AwaitingSince, now) {
	case gateReady:
		waited := now.Sub(*s.AwaitingSince).Round(time.Second)
		s.Awaiting, s.AwaitingSince = v1alpha1.AwaitingBeforeRunDone, nil
		if err := c.w.writeState(ctx, ns, n, s, g.Annotations...); err != nil {
			return err
		}
		c.w.metrics.annotationGates.WithLabelValues(ns.Name, "beforeRun", gateReady).Inc()
		c.events.Eventf(n, corev1.EventTypeNormal, v1alpha1.ReasonAnnotationsReady, "nodescript %s: %s were \"true\" after %s; removed with the label %s; the run starts (spec.hooks.beforeRun)",
			ns.Name, strings.Join(g.Annotations, ", "), waited, label)
		return c.awaitBefore(ctx, ns, hash, n, s, now)
	case gateTimeout:
		missing := nodescript.MissingAnnotations(g, n.Annotations)
		msg := fmt.Sprintf("spec.hooks.beforeRun: %s not \"true\" within %s (timeout); the node was not cordoned", strings.Join(missing, ", "), g.Timeout.Duration)
		s.Attempts++
		s.Phase, s.Awaiting, s.AwaitingSince, s.Infrastructure, s.Reason, s.Message, s.Since = v1alpha1.PhaseFailed, "", nil, true, v1alpha1.ReasonBeforeRunTimeout, msg, now
		t := now.Add(backoff(ns, s.Attempts))
		s.NextRetry = &t
		if err := c.w.writeState(ctx, ns, n, s, g.Annotations...); err != nil {
			return err
		}
		c.w.metrics.annotationGates.WithLabelValues(ns.Name, "beforeRun", gateTimeout).Inc()
		c.events.Eventf(n, corev1.EventTypeWarning, v1alpha1.ReasonBeforeRunTimeout, "nodescript %s: %s", ns.Name, msg)
		return c.unlabel(ctx, ns, n, label)
	}
	return nil
}

// afterRunArmed is NodeState.Awaiting for a run of ns that succeeded:
// AwaitingAfterRun under spec.hooks.afterRun, else "".
func afterRunArmed(ns *v1alpha1.NodeScript) string {
	if g, _ := nodescript.AnnotationGate(ns, false); g != nil {
		return v1alpha1.AwaitingAfterRun
	}
	return ""
}

// awaitAfter is phase 2's handling of node n Succeeded and awaiting
// spec.hooks.afterRun (state s), once it is back in service (uncordoned):
// it labels the node (Event AwaitingAnnotations, AwaitingSince set), and
// once every annotation is "true" removes them in the state's own patch,
// and the label (Event AnnotationsReady): the node's success then counts
// for the rollout. Past the timeout the run is recorded Failed (reason
// ReasonAfterRunTimeout), the annotations and label removed. A gate
// removed from the spec meanwhile counts as passed. RBAC: patch nodes,
// patch nodes/status.
func (c *controller) awaitAfter(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, s nodeState, now time.Time) error {
	g, label := nodescript.AnnotationGate(ns, false)
	if g == nil {
		s.Awaiting, s.AwaitingSince = "", nil
		if err := c.w.writeState(ctx, ns, n, s); err != nil {
			return err
		}
		return c.unlabel(ctx, ns, n, v1alpha1.LabelAfterRun)
	}
	if s.AwaitingSince == nil {
		if owner, ok := n.Labels[label]; ok && owner != ns.Name {
			return nil // another NodeScript waits on the node: after it
		}
		if err := c.label(ctx, ns, n, label); err != nil {
			return err
		}
		s.AwaitingSince = &now
		c.events.Eventf(n, corev1.EventTypeNormal, v1alpha1.ReasonAwaitingAnnotations, "nodescript %s: after the run: labelled %s=%s; waiting until %s are \"true\" (spec.hooks.afterRun)",
			ns.Name, label, ns.Name, strings.Join(g.Annotations, ", "))
		if g.Timeout != nil {
			c.queue.AddAfter(ns.Name, g.Timeout.Duration)
		}
		return c.w.writeState(ctx, ns, n, s)
	}
	if _, ok := n.Labels[label]; !ok {
		// Removed meanwhile (by hand, or by another NodeScript's watcher
		// that had put its own): put again, the wait goes on.
		if err := c.label(ctx, ns, n, label); err != nil {
			return err
		}
	}
	switch gateStep(g, label, ns.Name, n, s.AwaitingSince, now) {
	case gateReady:
		waited := now.Sub(*s.AwaitingSince).Round(time.Second)
		s.Awaiting, s.AwaitingSince = "", nil
		if err := c.w.writeState(ctx, ns, n, s, g.Annotations...); err != nil {
			return err
		}
		c.w.metrics.annotationGates.WithLabelValues(ns.Name, "afterRun", gateReady).Inc()
		c.events.Eventf(n, corev1.EventTypeNormal, v1alpha1.ReasonAnnotationsReady, "nodescript %s: %s were \"true\" after %s; removed with the label %s; the node is done (spec.hooks.afterRun)",
			ns.Name, strings.Join(g.Annotations, ", "), waited, label)
		return c.unlabel(ctx, ns, n, label)
	case gateTimeout:
		missing := nodescript.MissingAnnotations(g, n.Annotations)
		msg := fmt.Sprintf("spec.hooks.afterRun: %s not \"true\" within %s (timeout) after the run succeeded", strings.Join(missing, ", "), g.Timeout.Duration)
		s.Phase, s.Awaiting, s.AwaitingSince, s.Reason, s.Message, s.Since = v1alpha1.PhaseFailed, "", nil, v1alpha1.ReasonAfterRunTimeout, msg, now
		if err := c.w.writeState(ctx, ns, n, s, g.Annotations...); err != nil {
			return err
		}
		c.w.metrics.annotationGates.WithLabelValues(ns.Name, "afterRun", gateTimeout).Inc()
		c.events.Eventf(n, corev1.EventTypeWarning, v1alpha1.ReasonAfterRunTimeout, "nodescript %s: %s", ns.Name, msg)
		return c.unlabel(ctx, ns, n, label)
	}
	return nil
}

// annotationWork is phase 2's work for node n of ns at hash (state s;
// selected by ns; busy: a run pod going) under the annotation gates, or
// nil: a selected node awaiting beforeRun (or just
// past it) goes on (awaitBefore); a label of ns's left on a node whose
// state no longer waits for it (a rerun, a failure, a spec change
// meanwhile) is removed. The after-run wait is started from the
// Succeeded case (awaitAfter), once the node is uncordoned. at is when to
// look again for a timeout (zero: none).
func (c *controller) annotationWork(ctx context.Context, ns *v1alpha1.NodeScript, hash string, n *corev1.Node, s nodeState, selected, busy bool, now time.Time) (func() error, time.Time) {
	current := selected && s.Hash == hash
	if current && s.Phase == v1alpha1.PhaseRunning && !busy && (s.Awaiting == v1alpha1.AwaitingBeforeRun || s.Awaiting == v1alpha1.AwaitingBeforeRunDone) {
		var at time.Time
		if g, _ := nodescript.AnnotationGate(ns, true); g != nil && g.Timeout != nil && s.AwaitingSince != nil {
			at = earliest(s.AwaitingSince.Add(g.Timeout.Duration), now.Add(annotationRecheck))
		}
		return func() error { return c.awaitBefore(ctx, ns, hash, n, s, now) }, at
	}
	var stray []string
	if n.Labels[v1alpha1.LabelBeforeRun] == ns.Name && !(current && s.Phase == v1alpha1.PhaseRunning && s.Awaiting == v1alpha1.AwaitingBeforeRun) {
		stray = append(stray, v1alpha1.LabelBeforeRun)
	}
	if n.Labels[v1alpha1.LabelAfterRun] == ns.Name && !(current && nodescript.WaitsAfterRun(s)) {
		stray = append(stray, v1alpha1.LabelAfterRun)
	}
	if len(stray) > 0 {
		return func() error { return c.unlabel(ctx, ns, n, stray...) }, time.Time{}
	}
	if current && nodescript.WaitsAfterRun(s) && s.AwaitingSince != nil {
		if g, _ := nodescript.AnnotationGate(ns, false); g != nil && g.Timeout != nil {
			return nil, earliest(s.AwaitingSince.Add(g.Timeout.Duration), now.Add(annotationRecheck))
		}
	}
	return nil, time.Time{}
}

// label puts label=ns's name on node n. RBAC: patch nodes.
func (c *controller) label(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, label string) error {
	return c.patchLabels(ctx, n, map[string]any{label: ns.Name})
}

// unlabel removes the labels of node n that carry ns's name. RBAC: patch
// nodes.
func (c *controller) unlabel(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, labels ...string) error {
	drop := map[string]any{}
	for _, l := range labels {
		if v, ok := n.Labels[l]; ok && v == ns.Name {
			drop[l] = nil
		}
	}
	if len(drop) == 0 {
		return nil
	}
	return c.patchLabels(ctx, n, drop)
}

// patchLabels merge-patches node n's labels (a nil value removes one).
func (c *controller) patchLabels(ctx context.Context, n *corev1.Node, labels map[string]any) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err != nil {
		return err
	}
	if _, err := c.w.o.Client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "nodeexec-watcher"}); err != nil {
		return fmt.Errorf("node %s: labels %v: %w", n.Name, labels, err)
	}
	return nil
}
