package watcher

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// The watcher's side of the operator controls (controls.go): rerun
// requests on nodes, the run-now override on NodeScripts. Ignored nodes
// need nothing here: selectsNode leaves them out.

// runNow is the rest of phase 0: the run-now override (AnnotationRunNow)
// of ns at now. One in effect is recorded in an Event on ns (RunNow, with
// who asked), once per value in this process; one removed by someone else
// before it expired, in RunNowCancelled. One that expired or cannot be read
// is removed from ns by a patch carrying ns's resourceVersion (a new
// override set meanwhile is a conflict, retried, never lost), with an Event
// (RunNowExpired, RunNowInvalid). It returns ns as Decide is to see it.
// RBAC: patch on nodescripts.
func (c *controller) runNow(ctx context.Context, ns *v1alpha1.NodeScript, now time.Time) (*v1alpha1.NodeScript, error) {
	until, set, err := nodescript.RunNowUntil(ns)
	by := ns.Annotations[v1alpha1.AnnotationRunNowBy]
	if by == "" {
		by = v1alpha1.UnknownUser
	}
	value := ns.Annotations[v1alpha1.AnnotationRunNow] + " by " + by
	c.w.mu.Lock()
	seen := c.w.runNow[ns.Name]
	c.w.mu.Unlock()
	note := func(v string) {
		c.w.mu.Lock()
		c.w.runNow[ns.Name] = v
		c.w.mu.Unlock()
	}
	switch {
	case !set:
		if seen != "" {
			c.events.Eventf(ns, corev1.EventTypeNormal, v1alpha1.ReasonRunNowCancelled, "the run-now override (%s) was removed: runs start only inside spec.window", seen)
			note("")
		}
		return ns, nil
	case err == nil && now.Before(until):
		if seen != value {
			c.events.Eventf(ns, corev1.EventTypeNormal, v1alpha1.ReasonRunNow, "run-now override asked by %s: runs may start outside spec.window until %s", by, until.UTC().Format(time.RFC3339))
			note(value)
		}
		return ns, nil
	}
	patch, perr := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": ns.ResourceVersion,
		"annotations":     map[string]any{v1alpha1.AnnotationRunNow: nil, v1alpha1.AnnotationRunNowBy: nil},
	}})
	if perr != nil {
		return nil, perr
	}
	if _, perr := c.w.o.Dynamic.Resource(v1alpha1.Resource).Patch(ctx, ns.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "nodeexec-watcher"}); perr != nil {
		return nil, fmt.Errorf("nodescript %s: removing annotation %s: %w", ns.Name, v1alpha1.AnnotationRunNow, perr)
	}
	if err != nil {
		c.events.Eventf(ns, corev1.EventTypeWarning, v1alpha1.ReasonRunNowInvalid, "%v (set by %s): removed; set one with nodeexec run-now %s --for 1h", err, by, ns.Name)
	} else {
		c.events.Eventf(ns, corev1.EventTypeNormal, v1alpha1.ReasonRunNowExpired, "the run-now override asked by %s expired at %s: runs start only inside spec.window", by, until.UTC().Format(time.RFC3339))
	}
	note("")
	ns = ns.DeepCopy()
	delete(ns.Annotations, v1alpha1.AnnotationRunNow)
	delete(ns.Annotations, v1alpha1.AnnotationRunNowBy)
	return ns, nil
}

// rerun is phase 2's handling of node n's rerun request (RerunAnnotation)
// for ns at spec hash; s is n's state, selected whether ns selects n (and
// does not ignore it), going the pods still going. It returns the state
// Decide is to see, and the write to make (nil: none):
//   - a request for another hash, or for a node not selected, is removed
//     (an Event, RerunDropped, says why);
//   - while a pod of ns is going on n, or the run is recorded Running, the
//     request waits;
//   - a node with a record of hash becomes Pending (reason RerunRequested,
//     its attempts kept in Attempts and AttemptsBefore, its cordon record
//     kept), with the request removed in the same patch and an Event;
//   - a node with no record of hash is to run anyway: the request is removed.
func (c *controller) rerun(ctx context.Context, ns *v1alpha1.NodeScript, hash string, n *corev1.Node, s nodeState, selected bool, going runPods, now time.Time) (nodeState, func() error) {
	want, has := n.Annotations[rerunAnnotation(ns.Name)]
	if !has {
		return s, nil
	}
	drop := func(why string) func() error {
		return func() error {
			if why != "" {
				c.events.Eventf(n, corev1.EventTypeWarning, v1alpha1.ReasonRerunDropped, "nodescript %s: rerun of spec %s dropped: %s", ns.Name, want, why)
			}
			return removeAnnotations(ctx, c.w.o.Client, n.Name, rerunAnnotation(ns.Name))
		}
	}
	switch {
	case !selected:
		return s, drop("the node is not selected (spec.nodeSelector, spec.excludeNodes, or ignored)")
	case want != hash:
		return s, drop("the spec is now " + hash)
	case going.busy[n.Name] || going.actions[n.Name+"/"+v1alpha1.ActionVerify] || going.actions[n.Name+"/"+v1alpha1.ActionRollback] || (s.Hash == hash && s.Phase == v1alpha1.PhaseRunning):
		return s, nil // after the run in progress
	case s.Hash != hash:
		return s, drop("")
	}
	next := runAgain(s, hash, now, "RerunRequested")
	return next, func() error {
		if err := c.w.writeState(ctx, ns, n, next, rerunAnnotation(ns.Name)); err != nil {
			return err
		}
		c.events.Eventf(n, corev1.EventTypeNormal, v1alpha1.ReasonRerun, "nodescript %s: spec %s is to run here again (nodeexec rerun); attempt %d (%s) forgotten", ns.Name, hash, s.Attempts, s.Phase)
		return nil
	}
}

// runAgain is the state of a node whose record s of spec hash is forgotten
// so that it runs again (a rerun, a reapply): Pending since now for
// reason, its attempts kept (AttemptsBefore: the retry limit counts from
// here) and its own cordon record kept.
func runAgain(s nodeState, hash string, now time.Time, reason string) nodeState {
	return nodeState{
		Hash: hash, Phase: v1alpha1.PhasePending, Attempts: s.Attempts, AttemptsBefore: s.Attempts, Since: now, Reason: reason,
		CordonedByUs: s.CordonedByUs, Cordoned: s.Cordoned && s.CordonedByUs, Silences: s.Silences,
	}
}
