package watcher

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// reapplyDue says whether node n, whose state s is a success of the
// current spec hash (or NotNeeded: its spec.checkScript runs again), is to
// run it again under ns's spec.reapply at now: the reason
// (ReasonReapplyOnReboot, ReasonReapplyInterval, ReasonReapplySchedule; ""
// for not yet) and, when not yet, when the interval or the schedule makes
// it due, the earlier of the two (zero: never). The three combine by OR:
// the first that makes the node due gives the reason (onReboot, then
// interval, then schedule). Under spec.reapply.schedule the node is due
// once the schedule's first activation after its success (s.Since) is at
// or before now: its success is older than the latest activation. A
// record without a boot ID (written before boot IDs were recorded at
// success) is not rerun for a reboot. A schedule that does not parse
// (Validate refuses it first) makes nothing due. Pure.
func reapplyDue(ns *v1alpha1.NodeScript, n *corev1.Node, s nodeState, now time.Time) (reason string, at time.Time) {
	r := ns.Spec.Reapply
	if r == nil || (s.Phase != v1alpha1.PhaseSucceeded && s.Phase != v1alpha1.PhaseNotNeeded) {
		return "", time.Time{}
	}
	if boot := n.Status.NodeInfo.BootID; r.OnReboot && s.BootID != "" && boot != "" && boot != s.BootID {
		return v1alpha1.ReasonReapplyOnReboot, time.Time{}
	}
	if r.Interval != nil && r.Interval.Duration > 0 {
		due := s.Since.Add(r.Interval.Duration)
		if !now.Before(due) {
			return v1alpha1.ReasonReapplyInterval, time.Time{}
		}
		at = due
	}
	if due := scheduleDue(r.Schedule, s.Since); !due.IsZero() {
		if !now.Before(due) {
			return v1alpha1.ReasonReapplySchedule, time.Time{}
		}
		at = earliest(at, due)
	}
	return "", at
}

// reapply is phase 2's handling of spec.reapply for node n selected by ns
// at spec hash, s its state, going the pods still going. A success that is
// due again (reapplyDue) becomes Pending (runAgain), written with an
// Event; the node then runs
// under the rollout's pace, pause and window. It returns the state Decide
// is to see, the write to make (nil: none) and when to look again for an
// interval not yet due (zero: no need).
func (c *controller) reapply(ctx context.Context, ns *v1alpha1.NodeScript, hash string, n *corev1.Node, s nodeState, going runPods, now time.Time) (nodeState, func() error, time.Time) {
	if s.Hash != hash || going.busy[n.Name] || going.actions[n.Name+"/"+v1alpha1.ActionVerify] {
		return s, nil, time.Time{}
	}
	reason, at := reapplyDue(ns, n, s, now)
	if reason == "" {
		return s, nil, at
	}
	next := runAgain(s, hash, now, reason)
	return next, func() error {
		if err := c.w.writeState(ctx, ns, n, next); err != nil {
			return err
		}
		var why string
		switch reason {
		case v1alpha1.ReasonReapplyOnReboot:
			why = "the node rebooted since its last success (boot ID " + s.BootID + " -> " + n.Status.NodeInfo.BootID + ") and spec.reapply.onReboot is set"
		case v1alpha1.ReasonReapplySchedule:
			why = scheduleWhy(ns.Spec.Reapply.Schedule, s.Since)
		default:
			why = "its last success (" + s.Since.UTC().Format(time.RFC3339) + ") is older than spec.reapply.interval (" + ns.Spec.Reapply.Interval.Duration.String() + ")"
		}
		c.events.Eventf(n, corev1.EventTypeNormal, reason, "nodescript %s: spec %s is to run here again: %s", ns.Name, hash, why)
		return nil
	}, time.Time{}
}
