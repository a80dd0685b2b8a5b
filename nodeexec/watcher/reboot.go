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

// rebootRecheck is how often a NodeScript with a rebooting node is looked
// at again.
const rebootRecheck = 5 * time.Second

// rebootAsked reports whether a finished run with outcome out asks for a
// reboot under ns's spec.reboot: Always after exit 0, IfRequired after
// exit v1alpha1.ExitRebootRequired (the script's own, or the sentinel
// file's: rebootSentinelWrap). Never otherwise, nor after an
// infrastructure failure or a timeout.
func rebootAsked(ns *v1alpha1.NodeScript, out runOutcome) bool {
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
func rebootStep(ns *v1alpha1.NodeScript, s nodeState, boot string, ready bool, now time.Time) string {
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
func (c *controller) rebooting(ctx context.Context, ns *v1alpha1.NodeScript, hash string, n *corev1.Node, s nodeState, now time.Time) error {
	ready, _ := nodeReady(n)
	boot := n.Status.NodeInfo.BootID
	switch rebootStep(ns, s, boot, ready, now) {
	case "back":
		c.w.learn(ns, v1alpha1.StepReboot, now.Sub(s.Since)) // status.durations (forecast.go)
		c.events.Eventf(n, corev1.EventTypeNormal, v1alpha1.ReasonRebooted, "nodescript %s: the node is back after %s with boot ID %s (was %s)", ns.Name, now.Sub(s.Since).Round(time.Second), boot, s.BootID)
		s.Phase, s.Maintenance, s.RebootIssued, s.BootID, s.Since = v1alpha1.PhaseSucceeded, "", false, boot, now
		return c.w.writeState(ctx, ns, n, s)
	case "timeout":
		msg := fmt.Sprintf("the node did not come back with a new boot ID and Ready within %s (boot ID %s, Ready %t)", now.Sub(s.Since).Round(time.Second), boot, ready)
		c.events.Eventf(n, corev1.EventTypeWarning, v1alpha1.ReasonRebootTimeout, "nodescript %s: %s", ns.Name, msg)
		s.Phase, s.Maintenance, s.RebootIssued, s.Reason, s.Message, s.Since = v1alpha1.PhaseFailed, "", false, v1alpha1.ReasonRebootTimeout, msg, now
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
func (c *controller) reboot(ctx context.Context, ns *v1alpha1.NodeScript, hash string, n *corev1.Node, s nodeState, now time.Time) error {
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
	pod, err := c.w.runPod(runPodSpec{NodeScript: ns, Node: n.Name, Action: v1alpha1.ActionReboot, Attempt: max(s.Attempts, 1), Now: now})
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
