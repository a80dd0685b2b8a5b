package watcher

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// bootID is node n's boot ID to judge the finished run out of pod against:
// the cached one, or the API's when the cache still shows the boot the run
// started on (startBootID) and a reboot may explain the failure. After a
// reboot the kubelet reports the new boot ID and the dead run pod on
// separate requests, which reach this process through separate watches:
// the pod's failure can arrive first, and must not be recorded as the
// script's.
func (c *controller) bootID(ctx context.Context, n *corev1.Node, startBootID string, out runOutcome) (string, error) {
	cached := n.Status.NodeInfo.BootID
	if startBootID == "" || cached != startBootID || !rebootCandidate(out) {
		return cached, nil
	}
	live, err := c.w.o.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return cached, nil // gone: its pods are skipped on the next look
	}
	if err != nil {
		return "", fmt.Errorf("node %s: reading its boot ID: %w", n.Name, err)
	}
	return live.Status.NodeInfo.BootID, nil
}

// podRecord reports whether s is a run's state while its pod goes (see
// runningState): Running, with a pod, and no maintenance step.
func podRecord(s nodeState) bool {
	return s.Phase == v1alpha1.PhaseRunning && s.Pod != "" && s.Maintenance == ""
}

// start creates the pod of action on node n (s is its current state). For
// a check or run, the pod is the record of the run while it goes: the
// node's state becomes Running in this process only (runningState), and
// the outcome is written once, when the pod has finished (finish).
func (c *controller) start(ctx context.Context, ns *v1alpha1.NodeScript, hash string, n *corev1.Node, s nodeState, action string, now time.Time) error {
	if action == v1alpha1.ActionRun && needsPreparation(ns, hash, s) {
		return c.prepare(ctx, ns, hash, n, s, now)
	}
	if action == v1alpha1.ActionRun {
		if held, err := c.preNodeHook(ctx, ns, hash, n, s, now); held || err != nil {
			return err // spec.hooks.preNode: the run pod waits for it (hooks.go)
		}
		if waiting, err := c.beforeRun(ctx, ns, hash, n, s, now); waiting || err != nil {
			return err // spec.hooks.beforeRun (annotations.go)
		}
	}
	attempt := 1
	if runsScript(action) && s.Hash == hash {
		attempt = s.Attempts + 1
	}
	pod, err := c.w.runPod(runPodSpec{NodeScript: ns, Node: n.Name, Action: action, Attempt: attempt, BootID: n.Status.NodeInfo.BootID, Now: now,
		Place: c.place(ctx, ns, hash, n.Name, now)})
	if err != nil {
		return err
	}
	c.w.expect(pod.Name, now)
	_, err = c.w.o.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{FieldManager: "nodeexec-watcher"})
	switch {
	case apierrors.IsAlreadyExists(err):
		// Created before (the cache lags, or by a previous watcher): adopt it.
	case err != nil:
		c.w.unexpect(pod.Name)
		return fmt.Errorf("node %s: creating %s pod: %w", n.Name, action, err)
	}
	if runsScript(action) {
		pod.CreationTimestamp = metav1.NewTime(now)
		c.w.note(ns.Name, n.Name, nodescript.RunningState(s, pod))
	}
	return nil
}

// adopt takes a run or check pod found going as node n's run when the
// node's state does not name it yet (after a restart of the watcher: the
// pod is the record of a run while it goes).
func (c *controller) adopt(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, pod *corev1.Pod) {
	s, ok := c.w.state(ctx, ns.Name, n)
	if !ok || s.Pod == pod.Name {
		return
	}
	c.w.note(ns.Name, n.Name, nodescript.RunningState(s, pod))
}

// finish records a finished run pod's outcome on its node, then deletes
// the pod. The outcome is an event of the lifecycle's transition table
// (podEvent); the table's action for the node's phase records it
// (recordRun, recordCheck, recordVerify, recordRollback), unless the
// outcome is recorded already or no longer current (finishedPod.current).
func (c *controller) finish(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, pod *corev1.Pod, out runOutcome, ok *succeeded, now time.Time) error {
	s, readable := c.w.state(ctx, ns.Name, n)
	if !readable {
		return nil
	}
	f := newFinishedPod(ns, pod, out)
	if ev, known := podEvent(f.action, f.result, f.reboot); known && f.current(s) {
		var err error
		switch transition(s.Phase, ev) {
		case actRecordRun:
			err = c.recordRun(ctx, ns, n, s, f, ok, now)
		case actRecordCheck:
			err = c.recordCheck(ctx, ns, n, s, f, now)
		case actRecordVerify:
			err = c.recordVerify(ctx, ns, n, s, f, now)
		case actRecordRollback:
			err = c.recordRollback(ctx, ns, n, s, f, now)
		}
		if err != nil {
			return err
		}
	}
	if f.recorded {
		c.notifyNodeFailed(ctx, ns, n, f.action, f.msg(), now)
		c.w.metrics.runs.WithLabelValues(ns.Name, f.action, f.result).Inc()
		c.w.metrics.duration.WithLabelValues(f.action).Observe(now.Sub(pod.CreationTimestamp.Time).Seconds())
		c.learnPod(ns, f.action, pod, f.result, now) // status.durations (forecast.go)
	}
	err := c.w.o.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &pod.UID}, PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	c.w.recorded(pod.UID, now)
	return nil
}

// finishedPod is a finished pod of NodeScript ns as finish reads it.
type finishedPod struct {
	ns      *v1alpha1.NodeScript
	pod     *corev1.Pod
	out     runOutcome
	hash    string // the spec hash the pod ran
	action  string
	attempt int
	// result is "succeeded", "infrastructure", "timeout" or "failed"
	// (a run that asked for a reboot succeeded).
	result string
	// reboot: a run that asked for the node's reboot (rebootAsked).
	reboot bool
	// recorded: the outcome was written to the node's state.
	recorded bool
}

func newFinishedPod(ns *v1alpha1.NodeScript, pod *corev1.Pod, out runOutcome) *finishedPod {
	f := &finishedPod{ns: ns, pod: pod, out: out, hash: pod.Labels[nodeexec.LabelRunID], action: pod.Labels[v1alpha1.LabelAction], result: "succeeded"}
	f.attempt, _ = strconv.Atoi(pod.Annotations[v1alpha1.AnnotationAttempt])
	switch {
	case out.Infrastructure:
		f.result = "infrastructure"
	case out.Reason == "Timeout":
		f.result = "timeout"
	case out.ExitCode != 0:
		f.result = "failed"
	}
	f.reboot = f.action == v1alpha1.ActionRun && rebootAsked(ns, out)
	if f.reboot {
		f.result = "succeeded"
	}
	return f
}

// current reports whether f's outcome is still to be recorded on a node in
// state s: a run or check not recorded before (only the pod's deletion is
// left then), a verify of the node's current success not yet verified, a
// rollback the state says runs.
func (f *finishedPod) current(s nodeState) bool {
	switch f.action {
	case v1alpha1.ActionRun:
		return !(s.Pod == f.pod.Name && (s.Phase != v1alpha1.PhaseRunning || s.Maintenance == v1alpha1.MaintenanceRebooting))
	case v1alpha1.ActionCheck:
		return !(s.Pod == f.pod.Name && s.Phase != v1alpha1.PhaseRunning)
	case v1alpha1.ActionVerify:
		return s.Hash == f.hash && s.Phase == v1alpha1.PhaseSucceeded && !s.Verified && !f.out.Infrastructure
	case v1alpha1.ActionRollback:
		return s.Hash == f.hash && s.Rollback == "Running"
	}
	return false
}

// msg describes f's outcome for Events and notifications.
func (f *finishedPod) msg() string {
	ns, pod, out := f.ns, f.pod, f.out
	if out.Reason != "" {
		return fmt.Sprintf("nodescript %s (spec %s) %s on pod %s/%s: %s %s", ns.Name, f.hash, f.action, pod.Namespace, pod.Name, out.Reason, out.Message)
	}
	return fmt.Sprintf("nodescript %s (spec %s) %s attempt %d on pod %s/%s: exit code %d", ns.Name, f.hash, f.action, f.attempt, pod.Namespace, pod.Name, out.ExitCode)
}

// writeFinished records next as node n's state, f's outcome then recorded.
func (c *controller) writeFinished(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, f *finishedPod, next nodeState) error {
	if err := c.w.writeState(ctx, ns, n, next); err != nil {
		return err
	}
	f.recorded = true
	return nil
}

// recordRun records a run's outcome: Failed for the infrastructure (with
// its retry's time), Succeeded (Running and Rebooting when it asked for a
// reboot), or Failed.
func (c *controller) recordRun(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, s nodeState, f *finishedPod, ok *succeeded, now time.Time) error {
	out := f.out
	next := nodeState{Hash: f.hash, Attempts: f.attempt, AttemptsBefore: nodescript.AttemptsBefore(s, f.hash), Since: now, Pod: f.pod.Name, Reason: out.Reason,
		CordonedByUs: s.CordonedByUs, Cordoned: s.Cordoned && s.CordonedByUs, Silences: s.Silences}
	output := out.Tail
	switch f.result {
	case "infrastructure":
		next.Phase, next.Infrastructure, next.Message = v1alpha1.PhaseFailed, true, out.Message
		t := now.Add(backoff(ns, f.attempt))
		next.NextRetry = &t
		c.events.Event(n, corev1.EventTypeWarning, v1alpha1.ReasonInfrastructure, f.msg())
	case "succeeded":
		next.Phase, next.ExitCode = v1alpha1.PhaseSucceeded, ptr.To(0)
		next.Awaiting = afterRunArmed(ns) // spec.hooks.afterRun (annotations.go)
		// The boot the fix was made in (spec.reapply.onReboot): the
		// run's own start boot, which a success cannot outlive.
		next.BootID = nodescript.CmpOr(nodescript.StartBootID(f.pod, s), n.Status.NodeInfo.BootID)
		if ns.Spec.RecordOutput && c.w.o.SuccessLogLines > 0 {
			output = c.logTail(ctx, f.pod)
		}
		ok.add(n.Name) // one Event on the NodeScript for the reconcile's successes
		if f.reboot {
			// Succeeded once the node is back with a new boot ID (reboot.go).
			next.Phase, next.Maintenance, next.Reason = v1alpha1.PhaseRunning, v1alpha1.MaintenanceRebooting, ""
			c.events.Eventf(n, corev1.EventTypeNormal, v1alpha1.ReasonRebooting, "nodescript %s: the script succeeded (exit %d); rebooting the node (spec.reboot: %s)", ns.Name, out.ExitCode, ns.Spec.Reboot)
		}
	default:
		next.Phase, next.ExitCode = v1alpha1.PhaseFailed, ptr.To(out.ExitCode)
		c.events.Event(n, corev1.EventTypeWarning, v1alpha1.ReasonFailed, f.msg())
	}
	c.recordOutput(ctx, ns, n, f.hash, f.action, output, now)
	return c.writeFinished(ctx, ns, n, f, next)
}

// recordCheck records a check's outcome (checked): NotNeeded, Pending
// (the script runs next), or Failed.
func (c *controller) recordCheck(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, s nodeState, f *finishedPod, now time.Time) error {
	next := checked(s, f.hash, f.attempt, f.pod.Name, nodescript.CmpOr(nodescript.StartBootID(f.pod, s), n.Status.NodeInfo.BootID), f.out, now)
	output := f.out.Tail
	if next.Phase == v1alpha1.PhaseNotNeeded && ns.Spec.RecordOutput && c.w.o.SuccessLogLines > 0 {
		output = c.logTail(ctx, f.pod) // exit 0 leaves no termination message
	}
	switch {
	case next.Infrastructure:
		t := now.Add(backoff(ns, f.attempt))
		next.NextRetry = &t
		c.events.Event(n, corev1.EventTypeWarning, v1alpha1.ReasonInfrastructure, f.msg())
	case next.Phase == v1alpha1.PhaseNotNeeded:
		c.events.Event(n, corev1.EventTypeNormal, v1alpha1.ReasonCheckNotNeeded, f.msg()+": the node does not need the script")
	case next.Phase == v1alpha1.PhasePending:
		c.events.Event(n, corev1.EventTypeNormal, v1alpha1.ReasonCheckNeeded, f.msg()+": the script runs next")
	default:
		c.events.Event(n, corev1.EventTypeWarning, v1alpha1.ReasonCheckFailed, f.msg()+": "+next.Message)
	}
	c.recordOutput(ctx, ns, n, f.hash, f.action, output, now)
	return c.writeFinished(ctx, ns, n, f, next)
}

// recordVerify records a verify's outcome: Verified, or Failed
// (VerifyFailed).
func (c *controller) recordVerify(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, s nodeState, f *finishedPod, now time.Time) error {
	if f.result == "succeeded" {
		s.Verified = true
		c.events.Event(n, corev1.EventTypeNormal, v1alpha1.ReasonVerified, f.msg())
	} else {
		s.Phase, s.Reason, s.ExitCode, s.Since = v1alpha1.PhaseFailed, "VerifyFailed", ptr.To(f.out.ExitCode), now
		c.recordOutput(ctx, ns, n, f.hash, f.action, f.out.Tail, now)
		c.events.Event(n, corev1.EventTypeWarning, v1alpha1.ReasonVerifyFailed, f.msg())
	}
	return c.writeFinished(ctx, ns, n, f, s)
}

// recordRollback records a rollback's outcome: RolledBack, or the
// rollback Failed (the node stays Failed).
func (c *controller) recordRollback(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, s nodeState, f *finishedPod, now time.Time) error {
	s.RollbackExitCode = ptr.To(f.out.ExitCode)
	c.recordOutput(ctx, ns, n, f.hash, f.action, f.out.Tail, now)
	if f.result == "succeeded" {
		s.Rollback, s.Phase, s.Since = v1alpha1.PhaseSucceeded, v1alpha1.PhaseRolledBack, now
		c.events.Event(n, corev1.EventTypeNormal, v1alpha1.ReasonRolledBack, f.msg())
	} else {
		s.Rollback = v1alpha1.PhaseFailed
		c.events.Event(n, corev1.EventTypeWarning, v1alpha1.ReasonRollbackFailed, f.msg())
	}
	return c.writeFinished(ctx, ns, n, f, s)
}

// recordOutput keeps the output of action on node n in its output record
// when the NodeScript asks for it (spec.recordOutput). A record that cannot
// be written is logged and reported as a Warning Event on the NodeScript
// (ReasonOutputNotRecorded); the run's outcome, in the node's state, is
// recorded regardless.
func (c *controller) recordOutput(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, hash, action, output string, now time.Time) {
	if !ns.Spec.RecordOutput {
		return
	}
	if err := writeOutputRecord(ctx, c.w.o.Client, ns, n.Name, hash, action, output, now); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "output not recorded", "node", n.Name, "action", action)
		c.events.Event(ns, corev1.EventTypeWarning, v1alpha1.ReasonOutputNotRecorded, fmt.Sprintf("node %s, %s: %v", n.Name, action, err))
	}
}

// logTail is the end of a finished pod's log, or "" when it cannot be read.
// A log cut by the byte limit (which cuts its end, maybe inside a line)
// loses its last, partial line: it may hold a key without the rest of its
// value, or a value no rule recognises once cut.
func (c *controller) logTail(ctx context.Context, pod *corev1.Pod) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	const limit = 16 << 10
	lines := int64(c.w.o.SuccessLogLines)
	b, err := c.w.o.Client.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{TailLines: &lines, LimitBytes: ptr.To(int64(limit))}).DoRaw(ctx)
	if err != nil {
		logr.FromContextOrDiscard(ctx).V(1).Info("reading the run's log", "pod", pod.Name, "error", err.Error())
		return ""
	}
	if len(b) >= limit {
		b = b[:bytes.LastIndexByte(b, '\n')+1]
	}
	return string(b)
}

// gone reports whether pod, of ns, which phase 1's snapshot of the cache
// did not show going and which is no longer expected, is gone. It is not
// when the cache has it now (the informer added it since the snapshot, and
// its event ended the expectation). The cache is not the authority for
// the rest: gone gets the pod from the API server (RBAC: get on pods). A
// pod that is there is not gone but not yet in the cache (a pod informer
// lagging more than the minute a created pod is expected for, as under
// load): it is expected for another minute, and its events reconcile
// again.
func (c *controller) gone(ctx context.Context, ns *v1alpha1.NodeScript, pod string, now time.Time) (bool, error) {
	namespace := nodescript.RunNamespace(&ns.Spec)
	if _, ok, err := c.pods.GetByKey(namespace + "/" + pod); ok || err != nil {
		return false, err
	}
	_, err := c.w.o.Client.CoreV1().Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
	switch {
	case err == nil:
		logr.FromContextOrDiscard(ctx).V(1).Info("pod not in the cache yet; waiting for it", "pod", pod)
		c.w.expect(pod, now)
		return false, nil
	case apierrors.IsNotFound(err):
		return true, nil
	default:
		return false, fmt.Errorf("getting pod %s: %w", pod, err)
	}
}

// lost records a run whose pod disappeared before its outcome was recorded
// (deleted by someone else, or with its node; see gone): an infrastructure
// failure.
func (c *controller) lost(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, s nodeState, now time.Time) error {
	if gone, err := c.gone(ctx, ns, s.Pod, now); !gone || err != nil {
		return err
	}
	s.Phase, s.Infrastructure, s.Reason, s.Since = v1alpha1.PhaseFailed, true, "PodDisappeared", now
	t := now.Add(backoff(ns, s.Attempts))
	s.NextRetry = &t
	c.events.Eventf(n, corev1.EventTypeWarning, v1alpha1.ReasonInfrastructure, "nodescript %s: run pod %s disappeared before its outcome was recorded", ns.Name, s.Pod)
	c.w.metrics.runs.WithLabelValues(ns.Name, v1alpha1.ActionRun, "infrastructure").Inc()
	return c.w.writeState(ctx, ns, n, s)
}

// backoff is the pause before retry number attempt: InitialBackoff doubled
// per attempt, capped at MaxBackoff, with 10% jitter.
func backoff(ns *v1alpha1.NodeScript, attempt int) time.Duration {
	initial, maxB := v1alpha1.DefaultInitialBackoff, v1alpha1.DefaultMaxBackoff
	if r := ns.Spec.Retry.InitialBackoff; r != nil {
		initial = r.Duration
	}
	if r := ns.Spec.Retry.MaxBackoff; r != nil {
		maxB = r.Duration
	}
	d := time.Duration(float64(initial) * math.Pow(2, float64(max(attempt-1, 0))))
	if d > maxB || d <= 0 {
		d = maxB
	}
	return wait.Jitter(d, 0.1)
}

// runsScript reports whether action's pod is a node's run (recorded as
// its state while it goes): the run itself, or the check before it.
func runsScript(action string) bool {
	return action == v1alpha1.ActionRun || action == v1alpha1.ActionCheck
}

// checked is the state a finished check pod (spec.checkScript) leaves
// node state s in, for spec hash, attempt and pod, which ran in boot
// bootID (the pod's AnnotationBootID), after outcome out at now, following node-problem-detector's
// plugin contract:
//   - exit 0: NotNeeded (exit code 0, bootID recorded as a success's boot is);
//   - exit 1: Pending with Checked set (reason CheckNeeded): the run
//     starts next, and the check is not counted against the retry limit
//     (AttemptsBefore moves past it);
//   - an infrastructure failure: Failed, Infrastructure (retried as a run's
//     is; NextRetry is left to the caller);
//   - any other exit, or a timeout: Failed, reason CheckFailed, never read
//     as an answer (126 and 127, the shell's "cannot execute" and "not
//     found", are named in the message).
//
// It is a pure function.
func checked(s nodeState, hash string, attempt int, pod, bootID string, out runOutcome, now time.Time) nodeState {
	next := nodeState{Hash: hash, Attempts: attempt, AttemptsBefore: nodescript.AttemptsBefore(s, hash), Since: now, Pod: pod,
		CordonedByUs: s.CordonedByUs, Cordoned: s.Cordoned && s.CordonedByUs, Silences: s.Silences}
	switch {
	case out.Infrastructure:
		next.Phase, next.Infrastructure, next.Reason, next.Message = v1alpha1.PhaseFailed, true, out.Reason, out.Message
	case out.Reason == "Timeout":
		next.Phase, next.Reason, next.Message = v1alpha1.PhaseFailed, v1alpha1.ReasonCheckFailed, "checkScript timed out (spec.timeout)"
	case out.ExitCode == 0:
		next.Phase, next.ExitCode = v1alpha1.PhaseNotNeeded, ptr.To(0)
		next.BootID = bootID
	case out.ExitCode == 1:
		next.Phase, next.ExitCode, next.Checked, next.Reason = v1alpha1.PhasePending, ptr.To(1), true, v1alpha1.ReasonCheckNeeded
		next.AttemptsBefore++
	default:
		next.Phase, next.ExitCode, next.Reason = v1alpha1.PhaseFailed, ptr.To(out.ExitCode), v1alpha1.ReasonCheckFailed
		next.Message = fmt.Sprintf("checkScript exited %d: 0 means the node does not need the script, 1 that it does; anything else is a failure", out.ExitCode)
		switch out.ExitCode {
		case 126:
			next.Message += " (126: a command could not be executed)"
		case 127:
			next.Message += " (127: a command was not found)"
		}
	}
	return next
}
