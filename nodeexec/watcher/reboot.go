package watcher

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// MaintenanceRebooting is NodeState.Maintenance after a run that asked
// for a reboot (spec.reboot), until the node is back.
const MaintenanceRebooting = "Rebooting"

// Events and reasons of spec.reboot (on the node).
const (
	// ReasonRebooting: the script succeeded and the node is to reboot.
	ReasonRebooting = "Rebooting"
	// ReasonRebooted: the node is back, Ready, with a new boot ID.
	ReasonRebooted = "Rebooted"
	// ReasonRebootTimeout: the node did not come back with a new boot ID
	// within spec.rebootTimeout: a failure (also the node state's reason).
	ReasonRebootTimeout = "RebootTimeout"
)

// RebootRecheck is how often a NodeScript with a rebooting node is looked
// at again.
const RebootRecheck = 5 * time.Second

// rebootAsked reports whether a finished run with outcome out asks for a
// reboot under ns's spec.reboot: Always after exit 0, IfRequired after
// exit v1alpha1.ExitRebootRequired (the script's own, or the sentinel
// file's: rebootSentinelWrap). Never otherwise, nor after an
// infrastructure failure or a timeout.
func rebootAsked(ns *v1alpha1.NodeScript, out Outcome) bool {
	if out.Infrastructure || out.Reason == "Timeout" {
		return false
	}
	switch ns.Spec.Reboot {
	case v1alpha1.RebootAlways:
		return out.ExitCode == 0
	case v1alpha1.RebootIfRequired:
		return out.ExitCode == v1alpha1.ExitRebootRequired
	}
	return false
}

// rebootStep is what a node Rebooting (state s, started at s.Since) needs
// at now, the node reporting boot ID boot and Ready ready: "back" (a new
// boot ID and Ready), "timeout" (not back within ns's rebootTimeout),
// "issue" (the reboot not yet asked for) or "" (wait). Pure.
func rebootStep(ns *v1alpha1.NodeScript, s NodeState, boot string, ready bool, now time.Time) string {
	timeout := v1alpha1.Defaulted(ns).Spec.RebootTimeout.Duration
	switch {
	case boot != "" && boot != s.BootID && ready:
		return "back"
	case !now.Before(s.Since.Add(timeout)):
		return "timeout"
	case !s.RebootIssued:
		return "issue"
	}
	return ""
}

// rebooting is phase 2's handling of node n Rebooting for ns at hash (s
// its state): back → Succeeded (the new boot recorded; spec.maintenance's
// uncordon follows as after any success); not back within rebootTimeout →
// Failed, reason RebootTimeout (no rollback: the node may be down; a
// cordon stays); else the reboot is asked for once (Options.Rebooter, or a
// pod running spec.rebootCommand), then recorded.
func (c *controller) rebooting(ctx context.Context, ns *v1alpha1.NodeScript, hash string, n *corev1.Node, s NodeState, now time.Time) error {
	ready, _ := nodeReady(n)
	boot := n.Status.NodeInfo.BootID
	switch rebootStep(ns, s, boot, ready, now) {
	case "back":
		c.w.learn(ns, v1alpha1.StepReboot, now.Sub(s.Since)) // status.durations (forecast.go)
		c.events.Eventf(n, corev1.EventTypeNormal, ReasonRebooted, "nodescript %s: the node is back after %s with boot ID %s (was %s)", ns.Name, now.Sub(s.Since).Round(time.Second), boot, s.BootID)
		s.Phase, s.Maintenance, s.RebootIssued, s.BootID, s.Since = PhaseSucceeded, "", false, boot, now
		return c.w.writeState(ctx, ns, n, s)
	case "timeout":
		msg := fmt.Sprintf("the node did not come back with a new boot ID and Ready within %s (boot ID %s, Ready %t)", now.Sub(s.Since).Round(time.Second), boot, ready)
		c.events.Eventf(n, corev1.EventTypeWarning, ReasonRebootTimeout, "nodescript %s: %s", ns.Name, msg)
		s.Phase, s.Maintenance, s.RebootIssued, s.Reason, s.Message, s.Since = PhaseFailed, "", false, ReasonRebootTimeout, msg, now
		return c.w.writeState(ctx, ns, n, s)
	case "issue":
		if err := c.reboot(ctx, ns, hash, n, s, now); err != nil {
			return err
		}
		s.RebootIssued = true
		return c.w.writeState(ctx, ns, n, s)
	}
	return nil
}

// reboot asks for node n's reboot: Options.Rebooter in a goroutine (one at
// a time per node; its error logged), or the pod running
// spec.rebootCommand (an existing one is fine). RBAC: create pods in the
// run namespace.
func (c *controller) reboot(ctx context.Context, ns *v1alpha1.NodeScript, hash string, n *corev1.Node, s NodeState, now time.Time) error {
	if r := c.w.o.Rebooter; r != nil {
		if !c.w.claim(c.w.rebooting, n.Name) {
			return nil
		}
		go func() {
			defer func() {
				c.w.release(c.w.rebooting, n.Name)
				c.queue.Add(ns.Name)
			}()
			if err := r(ctx, n.Name); err != nil {
				logr.FromContextOrDiscard(ctx).Error(err, "rebooting", "node", n.Name, "nodescript", ns.Name)
			}
		}()
		return nil
	}
	pod, err := c.w.runPod(RunPodSpec{NodeScript: ns, Node: n.Name, Action: ActionReboot, Attempt: max(s.Attempts, 1), Now: now})
	if err != nil {
		return err
	}
	c.w.expect(pod.Name, now)
	if _, err := c.w.o.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{FieldManager: "nodeexec-watcher"}); err != nil && !apierrors.IsAlreadyExists(err) {
		c.w.unexpect(pod.Name)
		return fmt.Errorf("node %s: creating reboot pod: %w", n.Name, err)
	}
	return nil
}
