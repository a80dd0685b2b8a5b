package watcher

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// Bounds of the uninstall.
const (
	// uninstallNodeWait is how long a node that is to be uninstalled may
	// stay not Ready before the uninstall counts as failed there (reason
	// NodeNotReady), counted from when the watcher first found it not
	// Ready (recorded in its state). A node that is gone (deleted) has
	// nothing left to uninstall and no record to keep.
	uninstallNodeWait = 5 * time.Minute
	// uninstallRecheck is how often a NodeScript whose uninstall goes is
	// reconciled again, besides its pods' and nodes' events.
	uninstallRecheck = 5 * time.Second
)

// uninstallRecord is a node's progress of spec.uninstallScript (nodescript.UninstallRecord).
type uninstallRecord = nodescript.UninstallRecord

// uninstallHash is the spec hash whose successes spec.uninstallScript
// undoes: the current one (CurrentHash: the spec's, or under
// spec.scriptFrom the one last written in the status).
func uninstallHash(ns *v1alpha1.NodeScript) string { return nodescript.CurrentHash(ns) }

// uninstallTarget reports whether a node with state s (not ignored) is
// one spec.uninstallScript runs on: one whose uninstall began, or that
// is Succeeded for hash. NotNeeded nodes are not: their check found the
// fix in place, maybe not made by this NodeScript.
func uninstallTarget(s nodeState, hash string) bool {
	return s.Uninstall != nil || (s.Hash == hash && s.Phase == v1alpha1.PhaseSucceeded)
}

// uninstallSlots is how many uninstall pods may go at once among targets
// nodes: spec.rollout.maxConcurrency (a count, or a percentage of the
// targets), at least 1.
func uninstallSlots(ns *v1alpha1.NodeScript, targets int) int {
	slots := 1
	if m := ns.Spec.Rollout.MaxConcurrency; m != nil {
		slots, _ = intstr.GetScaledValueFromIntOrPercent(m, targets, true)
	}
	return max(slots, 1)
}

// uninstallStep is what uninstall decided for one node.
type uninstallStep struct {
	node  *corev1.Node
	state nodeState
}

// uninstall is finalize's first step for a NodeScript with
// spec.uninstallScript: it runs the script on every node uninstallTarget
// selects among nodes (not ignored), spec.rollout.maxConcurrency at once,
// whatever the window, pause, gates or budgets say. Each node's progress
// is written to its state annotation (UninstallRecord) so that a
// restarted watcher takes it up; a finished pod is recorded (Events
// UninstallSucceeded or UninstallFailed on the node) and deleted. A node
// not Ready waits (Pending) at most UninstallNodeWait. It writes
// status.uninstall and returns done once no node is pending (the
// remaining uninstall pods deleted), with failed: the nodes where it
// failed, whose state annotation finalize keeps. While not done it asks
// to be reconciled again after UninstallRecheck. RBAC: create, get,
// delete on pods in spec.backend.namespace; patch nodes/status; patch
// nodescripts/status.
func (c *controller) uninstall(ctx context.Context, ns *v1alpha1.NodeScript, nodes []*corev1.Node) (done bool, failed map[string]bool, err error) {
	if ns.Spec.UninstallScript == "" {
		return true, nil, nil
	}
	now := c.w.o.Clock.Now()
	hash := uninstallHash(ns)
	pods, err := c.uninstallPods(ns)
	if err != nil {
		return false, nil, err
	}
	targets := c.uninstallTargets(ctx, ns, nodes, hash)
	work, result := c.uninstallWork(ctx, ns, targets, pods, now)
	if ns.Status.Uninstall == nil && len(targets) > 0 {
		c.events.Eventf(ns, corev1.EventTypeNormal, v1alpha1.ReasonUninstallStarted,
			"nodescript deleted: running spec.uninstallScript on %d node(s) where spec %s succeeded, %d at once", len(targets), hash, uninstallSlots(ns, len(targets)))
	}
	err = c.parallel(work)
	t := c.uninstallTally(ctx, ns, targets, result)
	done = err == nil && len(t.pending) == 0
	if done {
		for _, p := range pods {
			if derr := c.deleteUninstallPod(ctx, p); derr != nil {
				err, done = derr, false
			}
		}
	}
	if len(targets) > 0 || ns.Status.Uninstall != nil {
		if serr := c.writeUninstallStatus(ctx, ns, t.status()); serr != nil && err == nil {
			err, done = serr, false
		}
	}
	if done && len(targets) > 0 {
		c.uninstallDoneEvent(ns, t, len(targets))
	}
	if !done && c.queue != nil {
		c.queue.AddAfter(ns.Name, uninstallRecheck)
	}
	return done, t.failed, err
}

// uninstallPods are ns's uninstall pods in the cache, by node.
func (c *controller) uninstallPods(ns *v1alpha1.NodeScript) (map[string]*corev1.Pod, error) {
	pods := map[string]*corev1.Pod{} // node: its uninstall pod
	objs, err := c.pods.ByIndex(byNodeScript, ns.Name)
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		if p := o.(*corev1.Pod); p.Labels[v1alpha1.LabelAction] == v1alpha1.ActionUninstall {
			pods[p.Spec.NodeName] = p
		}
	}
	return pods, nil
}

// uninstallTargets are the nodes (not ignored) uninstallTarget selects at
// hash, by name.
func (c *controller) uninstallTargets(ctx context.Context, ns *v1alpha1.NodeScript, nodes []*corev1.Node, hash string) []uninstallStep {
	var targets []uninstallStep
	for _, n := range nodes {
		if nodescript.Ignored(n, ns.Name) {
			continue
		}
		if s, ok := c.w.state(ctx, ns.Name, n); ok && uninstallTarget(s, hash) {
			targets = append(targets, uninstallStep{node: n, state: s})
		}
	}
	slices.SortFunc(targets, func(a, b uninstallStep) int { return strings.Compare(a.node.Name, b.node.Name) })
	return targets
}

// uninstallWork is the work on each target (a pod to record, to start,
// a node not Ready to wait for or give up on) and each target's
// uninstall record as it will be.
func (c *controller) uninstallWork(ctx context.Context, ns *v1alpha1.NodeScript, targets []uninstallStep, pods map[string]*corev1.Pod, now time.Time) ([]func() error, []*uninstallRecord) {
	slots := uninstallSlots(ns, len(targets))
	for _, t := range targets {
		if u := t.state.Uninstall; u != nil && u.Phase == v1alpha1.UninstallRunning {
			slots--
		}
	}
	var work []func() error
	result := make([]*uninstallRecord, len(targets))
	for i, t := range targets {
		var w func() error
		result[i], w = c.uninstallNode(ctx, ns, t, pods[t.node.Name], &slots, now)
		if w != nil {
			work = append(work, w)
		}
	}
	return work, result
}

// uninstallNode is one target's uninstall record as it will be, and the
// work it needs (nil for none): pod the node's uninstall pod, if any;
// slots the pods that may still start (one taken when this one starts).
func (c *controller) uninstallNode(ctx context.Context, ns *v1alpha1.NodeScript, t uninstallStep, pod *corev1.Pod, slots *int, now time.Time) (*uninstallRecord, func() error) {
	n, s := t.node, t.state
	u := s.Uninstall
	ready, notReadySince := nodeReady(n)
	switch {
	case u != nil && (u.Phase == v1alpha1.UninstallSucceeded || u.Phase == v1alpha1.UninstallFailed):
		return u, nil
	case u != nil && u.Phase == v1alpha1.UninstallRunning:
		if pod == nil || pod.Name != u.Pod {
			return u, func() error { return c.uninstallLost(ctx, ns, n, s, now) }
		}
		if out := podOutcome(pod, ready, notReadySince, now, c.w.o.NotReadyGrace); out.Done {
			return u, func() error { return c.uninstallFinished(ctx, ns, n, s, pod, out, now) }
		}
		return u, nil
	case !ready:
		return c.uninstallNotReady(ctx, ns, n, s, now)
	case *slots > 0:
		*slots--
		return &uninstallRecord{Phase: v1alpha1.UninstallRunning, Since: now}, func() error { return c.uninstallStart(ctx, ns, n, s, now) }
	}
	return &uninstallRecord{Phase: v1alpha1.UninstallPending, Since: now}, nil
}

// uninstallNotReady: a node not Ready waits (Pending) at most
// UninstallNodeWait, then its uninstall fails.
func (c *controller) uninstallNotReady(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, s nodeState, now time.Time) (*uninstallRecord, func() error) {
	u := s.Uninstall
	next := &uninstallRecord{Phase: v1alpha1.UninstallPending, Since: now}
	if u != nil {
		next = u
	}
	if now.Sub(next.Since) >= uninstallNodeWait {
		failed := &uninstallRecord{Phase: v1alpha1.UninstallFailed, Reason: fmt.Sprintf("NodeNotReady: the node was not Ready for %s", uninstallNodeWait), Since: now}
		return failed, func() error {
			c.events.Eventf(n, corev1.EventTypeWarning, v1alpha1.ReasonUninstallFailed, "nodescript %s: uninstall script not run: %s", ns.Name, failed.Reason)
			return c.writeUninstall(ctx, ns, n, s, failed)
		}
	}
	if u == nil {
		return next, func() error { return c.writeUninstall(ctx, ns, n, s, next) }
	}
	return next, nil
}

// uninstallCount is the targets by their uninstall phase.
type uninstallCount struct {
	pending, succeeded, failedNames []string
	failed                          map[string]bool
}

func (t *uninstallCount) status() *v1alpha1.UninstallStatus {
	st := &v1alpha1.UninstallStatus{}
	st.Pending, st.PendingCount = firstNames(t.pending)
	st.Succeeded, st.SucceededCount = firstNames(t.succeeded)
	st.Failed, st.FailedCount = firstNames(t.failedNames)
	return st
}

// uninstallTally counts the targets by phase: what the work wrote (this
// process's overlay), else result.
func (c *controller) uninstallTally(ctx context.Context, ns *v1alpha1.NodeScript, targets []uninstallStep, result []*uninstallRecord) *uninstallCount {
	t := &uninstallCount{failed: map[string]bool{}}
	for i, tg := range targets {
		u := result[i]
		if s, ok := c.w.state(ctx, ns.Name, tg.node); ok && s.Uninstall != nil {
			u = s.Uninstall
		}
		switch u.Phase {
		case v1alpha1.UninstallSucceeded:
			t.succeeded = append(t.succeeded, tg.node.Name)
		case v1alpha1.UninstallFailed:
			t.failed[tg.node.Name] = true
			t.failedNames = append(t.failedNames, tg.node.Name+": "+uninstallWhy(u))
		default:
			t.pending = append(t.pending, tg.node.Name)
		}
	}
	return t
}

// uninstallDoneEvent is the Event on ns once the uninstall is done on
// its targets.
func (c *controller) uninstallDoneEvent(ns *v1alpha1.NodeScript, t *uninstallCount, targets int) {
	if len(t.failedNames) > 0 {
		c.events.Eventf(ns, corev1.EventTypeWarning, v1alpha1.ReasonUninstallFailed,
			"spec.uninstallScript failed on %d of %d node(s): %s; their state annotations (%s) stay on them: kubectl annotate node NODE %s-",
			len(t.failedNames), targets, strings.Join(t.status().Failed, "; "), stateAnnotation(ns.Name), stateAnnotation(ns.Name))
		return
	}
	c.events.Eventf(ns, corev1.EventTypeNormal, v1alpha1.ReasonUninstallSucceeded, "spec.uninstallScript succeeded on %d node(s)", len(t.succeeded))
}

// firstNames is names sorted, cut to v1alpha1.MaxUninstallNames, and
// their count.
func firstNames(names []string) ([]string, int32) {
	slices.Sort(names)
	return names[:min(len(names), v1alpha1.MaxUninstallNames)], int32(len(names))
}

// uninstallWhy is a failed uninstall's cause, for status and Events.
func uninstallWhy(u *uninstallRecord) string {
	switch {
	case u.Reason != "":
		return u.Reason
	case u.ExitCode != nil:
		return fmt.Sprintf("exit code %d", *u.ExitCode)
	}
	return "failed"
}

// writeUninstall records u as node n's uninstall progress (state s).
func (c *controller) writeUninstall(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, s nodeState, u *uninstallRecord) error {
	u.Since = u.Since.UTC().Truncate(time.Second)
	if len(u.Reason) > 256 {
		u.Reason = nodescript.Truncate(u.Reason, 256)
	}
	s.Uninstall = u
	return c.w.writeState(ctx, ns, n, s)
}

// uninstallStart creates node n's uninstall pod and records it Running;
// a pod the API refuses (forbidden, invalid) fails the node's uninstall
// (reason PodCreateFailed), any other error is returned (retried).
func (c *controller) uninstallStart(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, s nodeState, now time.Time) error {
	fail := func(why string) error {
		u := &uninstallRecord{Phase: v1alpha1.UninstallFailed, Reason: "PodCreateFailed: " + why, Since: now}
		c.events.Eventf(n, corev1.EventTypeWarning, v1alpha1.ReasonUninstallFailed, "nodescript %s: uninstall pod not created: %s", ns.Name, why)
		return c.writeUninstall(ctx, ns, n, s, u)
	}
	pod, err := c.w.runPod(runPodSpec{NodeScript: ns, Node: n.Name, Action: v1alpha1.ActionUninstall, Attempt: 1, BootID: n.Status.NodeInfo.BootID, Now: now})
	if err != nil {
		return fail(err.Error())
	}
	c.w.expect(pod.Name, now)
	_, err = c.w.o.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{FieldManager: "nodeexec-watcher"})
	switch {
	case err == nil, apierrors.IsAlreadyExists(err):
	case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
		c.w.unexpect(pod.Name)
		return fail(err.Error())
	default:
		c.w.unexpect(pod.Name)
		return fmt.Errorf("node %s: creating uninstall pod: %w", n.Name, err)
	}
	c.events.Eventf(n, corev1.EventTypeNormal, v1alpha1.ReasonUninstallStarted, "nodescript %s was deleted: running its uninstall script (pod %s/%s)", ns.Name, pod.Namespace, pod.Name)
	return c.writeUninstall(ctx, ns, n, s, &uninstallRecord{Phase: v1alpha1.UninstallRunning, Pod: pod.Name, Since: now})
}

// uninstallFinished records node n's finished uninstall pod (outcome out):
// Succeeded on exit 0, Failed otherwise (no retry), with an Event, the
// runs metric (action uninstall), and the pod deleted.
func (c *controller) uninstallFinished(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, s nodeState, pod *corev1.Pod, out runOutcome, now time.Time) error {
	u := &uninstallRecord{Phase: v1alpha1.UninstallSucceeded, Pod: pod.Name, Since: now}
	result := "succeeded"
	switch {
	case out.Infrastructure || out.Reason != "":
		u.Phase, u.Reason, result = v1alpha1.UninstallFailed, strings.TrimSpace(out.Reason+": "+out.Message), "infrastructure"
		if out.Reason == "Timeout" {
			result = "timeout"
		}
	case out.ExitCode != 0:
		u.Phase, u.ExitCode, result = v1alpha1.UninstallFailed, ptr.To(out.ExitCode), "failed"
	default:
		u.ExitCode = ptr.To(0)
	}
	if u.Phase == v1alpha1.UninstallSucceeded {
		c.events.Eventf(n, corev1.EventTypeNormal, v1alpha1.ReasonUninstallSucceeded, "nodescript %s: uninstall script succeeded (pod %s/%s, exit code 0)", ns.Name, pod.Namespace, pod.Name)
	} else {
		c.events.Eventf(n, corev1.EventTypeWarning, v1alpha1.ReasonUninstallFailed, "nodescript %s: uninstall script failed (pod %s/%s): %s; the node keeps annotation %s",
			ns.Name, pod.Namespace, pod.Name, uninstallWhy(u), stateAnnotation(ns.Name))
	}
	if err := c.writeUninstall(ctx, ns, n, s, u); err != nil {
		return err
	}
	c.w.metrics.runs.WithLabelValues(ns.Name, v1alpha1.ActionUninstall, result).Inc()
	c.w.metrics.duration.WithLabelValues(v1alpha1.ActionUninstall).Observe(now.Sub(pod.CreationTimestamp.Time).Seconds())
	return c.deleteUninstallPod(ctx, pod)
}

// uninstallLost handles a node recorded Running whose uninstall pod the
// cache does not show: one created moments ago is waited for; one gone
// fails the node's uninstall (reason PodDisappeared).
func (c *controller) uninstallLost(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, s nodeState, now time.Time) error {
	if c.w.expected(s.Uninstall.Pod) {
		return nil
	}
	gone, err := c.gone(ctx, ns, s.Uninstall.Pod, now)
	if !gone || err != nil {
		return err
	}
	u := &uninstallRecord{Phase: v1alpha1.UninstallFailed, Pod: s.Uninstall.Pod, Reason: "PodDisappeared: the uninstall pod disappeared before its outcome was recorded", Since: now}
	c.events.Eventf(n, corev1.EventTypeWarning, v1alpha1.ReasonUninstallFailed, "nodescript %s: %s", ns.Name, u.Reason)
	return c.writeUninstall(ctx, ns, n, s, u)
}

// deleteUninstallPod deletes pod (gone already is fine).
func (c *controller) deleteUninstallPod(ctx context.Context, pod *corev1.Pod) error {
	err := c.w.o.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting uninstall pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	c.w.recorded(pod.UID, c.w.o.Clock.Now())
	return nil
}

// writeUninstallStatus writes st as ns's status.uninstall: a merge patch
// of that field only, every key of it given (an empty list as null, which
// removes it). RBAC: patch on nodescripts/status.
func (c *controller) writeUninstallStatus(ctx context.Context, ns *v1alpha1.NodeScript, st *v1alpha1.UninstallStatus) error {
	if ns.Status.Uninstall != nil && apiEqualUninstall(ns.Status.Uninstall, st) {
		return nil
	}
	list := func(l []string) any {
		if len(l) == 0 {
			return nil
		}
		return l
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"uninstall": map[string]any{
		"pending": list(st.Pending), "succeeded": list(st.Succeeded), "failed": list(st.Failed),
		"pendingCount": st.PendingCount, "succeededCount": st.SucceededCount, "failedCount": st.FailedCount,
	}}})
	if err != nil {
		return err
	}
	u, err := c.w.o.Dynamic.Resource(v1alpha1.Resource).Patch(ctx, ns.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "nodeexec-watcher"}, "status")
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("updating status.uninstall of nodescript %s: %w", ns.Name, err)
	}
	if u != nil && u.GetResourceVersion() != "" {
		// The finalizer's patch, next, carries the resourceVersion: this
		// write's, not the cache's (a conflict, and a retry, otherwise).
		ns.ResourceVersion = u.GetResourceVersion()
	}
	return nil
}

// apiEqualUninstall reports whether a and b say the same.
func apiEqualUninstall(a, b *v1alpha1.UninstallStatus) bool {
	return slices.Equal(a.Pending, b.Pending) && slices.Equal(a.Succeeded, b.Succeeded) && slices.Equal(a.Failed, b.Failed) &&
		a.PendingCount == b.PendingCount && a.SucceededCount == b.SucceededCount && a.FailedCount == b.FailedCount
}
