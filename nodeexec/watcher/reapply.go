package watcher

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// Reasons a node that succeeded runs the current spec again (spec.reapply):
// its state's Reason while Pending, and the Event's reason on the node.
const (
	// ReasonReapplyOnReboot: the node rebooted (a new status.nodeInfo.bootID)
	// since its last run succeeded, and spec.reapply.onReboot is set.
	ReasonReapplyOnReboot = "ReapplyOnReboot"
	// ReasonReapplyInterval: the node's last success is older than
	// spec.reapply.interval.
	ReasonReapplyInterval = "ReapplyInterval"
	// ReasonReapplySchedule: the node's last success is older than the
	// latest activation of spec.reapply.schedule.
	ReasonReapplySchedule = "ReapplySchedule"
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
func reapplyDue(ns *v1alpha1.NodeScript, n *corev1.Node, s NodeState, now time.Time) (reason string, at time.Time) {
	r := ns.Spec.Reapply
	if r == nil || (s.Phase != PhaseSucceeded && s.Phase != PhaseNotNeeded) {
		return "", time.Time{}
	}
	if boot := n.Status.NodeInfo.BootID; r.OnReboot && s.BootID != "" && boot != "" && boot != s.BootID {
		return ReasonReapplyOnReboot, time.Time{}
	}
	if r.Interval != nil && r.Interval.Duration > 0 {
		due := s.Since.Add(r.Interval.Duration)
		if !now.Before(due) {
			return ReasonReapplyInterval, time.Time{}
		}
		at = due
	}
	if due := scheduleDue(r.Schedule, s.Since); !due.IsZero() {
		if !now.Before(due) {
			return ReasonReapplySchedule, time.Time{}
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
func (c *controller) reapply(ctx context.Context, ns *v1alpha1.NodeScript, hash string, n *corev1.Node, s NodeState, going runPods, now time.Time) (NodeState, func() error, time.Time) {
	if s.Hash != hash || going.busy[n.Name] || going.actions[n.Name+"/"+ActionVerify] {
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
		case ReasonReapplyOnReboot:
			why = "the node rebooted since its last success (boot ID " + s.BootID + " -> " + n.Status.NodeInfo.BootID + ") and spec.reapply.onReboot is set"
		case ReasonReapplySchedule:
			why = scheduleWhy(ns.Spec.Reapply.Schedule, s.Since)
		default:
			why = "its last success (" + s.Since.UTC().Format(time.RFC3339) + ") is older than spec.reapply.interval (" + ns.Spec.Reapply.Interval.Duration.String() + ")"
		}
		c.events.Eventf(n, corev1.EventTypeNormal, reason, "nodescript %s: spec %s is to run here again: %s", ns.Name, hash, why)
		return nil
	}, time.Time{}
}
