package watcher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// hookRecheck is how often a NodeScript with a hook Job going is looked at
// again (Job events usually come first).
const hookRecheck = 2 * time.Second

// hookDeadlineGrace is how long past its timeout a hook Job the Job
// controller has not marked failed (a controller down) is taken as
// failed.
const hookDeadlineGrace = time.Minute

// hookPreNodeDone marks a state, in memory only, whose preNode hook just
// succeeded: the cordon (or the run) comes next.
const hookPreNodeDone = v1alpha1.HookPreNode + ":done"

// hookState is NodeState.Hook for hook at phase.
func hookState(hook, phase string) string { return hook + ":" + phase }

// hookJobName is the name of the Job of hook for NodeScript name at spec
// hash, attempt attempt, on node (empty for rollout hooks):
// "NAME-HOOK-NODE-HASH8-ATTEMPT" in lower case when that is a DNS label of at
// most 63 characters, else its first 52 characters and a hash of the whole
// (so it is the same for the same run and differs between runs).
func hookJobName(name, hook, node, hash string, attempt int) string {
	parts := []string{name, strings.ToLower(hook)}
	if node != "" {
		parts = append(parts, node)
	}
	parts = append(parts, hash[:min(8, len(hash))], strconv.Itoa(attempt))
	full := strings.Join(parts, "-")
	if len(full) <= 63 && !strings.Contains(full, ".") {
		return full
	}
	sum := sha256.Sum256([]byte(name + "/" + hook + "/" + node + "/" + hash + "/" + strconv.Itoa(attempt)))
	prefix := strings.TrimRight(strings.ReplaceAll(full[:min(52, len(full))], ".", "-"), "-")
	return prefix + "-" + hex.EncodeToString(sum[:])[:10]
}

// hookTimeout is h's timeout or DefaultHookTimeout.
func hookTimeout(h *v1alpha1.HookJob) time.Duration {
	if h.Timeout != nil && h.Timeout.Duration > 0 {
		return h.Timeout.Duration
	}
	return v1alpha1.DefaultHookTimeout
}

// hookJob returns the Job of hook (spec.hooks' HookJob h) for ns at spec
// hash, attempt attempt, on node (empty for rollout hooks): h's template
// with the name HookJobName, namespace spec.backend.namespace
// (RunNamespace), ns as its controlling owner (the Job goes when ns is
// deleted), the labels managed-by=nodeexec, LabelNodeScript and LabelHook
// (LabelHook on its pods too; not LabelNodeScript, which would make them
// run pods), AnnotationHookNode and AnnotationAttempt, activeDeadlineSeconds
// from h's timeout, restartPolicy Never unless the template says OnFailure,
// backoffLimit 0 unless the template sets one, no ttlSecondsAfterFinished
// (the watcher deletes the Job once its outcome is recorded) and, in each
// container, EnvHookName, EnvHookNode (node hooks), EnvHook and EnvHookHash.
// It is a pure function; ns is not changed.
func hookJob(ns *v1alpha1.NodeScript, h *v1alpha1.HookJob, hook, node, hash string, attempt int) *batchv1.Job {
	t := h.Template.DeepCopy()
	job := &batchv1.Job{ObjectMeta: t.ObjectMeta, Spec: t.Spec}
	job.TypeMeta = metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"}
	job.Name, job.GenerateName, job.Namespace = hookJobName(ns.Name, hook, node, hash, attempt), "", nodescript.RunNamespace(&ns.Spec)
	job.ResourceVersion, job.UID, job.CreationTimestamp = "", "", metav1.Time{}
	if job.Labels == nil {
		job.Labels = map[string]string{}
	}
	job.Labels[nodeexec.LabelManagedBy] = nodeexec.ManagedByValue
	job.Labels[v1alpha1.LabelNodeScript] = ns.Name
	job.Labels[v1alpha1.LabelHook] = hook
	if job.Annotations == nil {
		job.Annotations = map[string]string{}
	}
	if node != "" {
		job.Annotations[v1alpha1.AnnotationHookNode] = node
	}
	job.Annotations[v1alpha1.AnnotationAttempt] = strconv.Itoa(attempt)
	if ns.UID != "" {
		job.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeScript", Name: ns.Name, UID: ns.UID, Controller: ptr.To(true),
		}}
	}
	job.Spec.ActiveDeadlineSeconds = ptr.To(int64(math.Ceil(hookTimeout(h).Seconds())))
	if job.Spec.BackoffLimit == nil {
		job.Spec.BackoffLimit = ptr.To(int32(0))
	}
	job.Spec.TTLSecondsAfterFinished = nil
	pod := &job.Spec.Template
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	delete(pod.Labels, v1alpha1.LabelNodeScript)
	pod.Labels[v1alpha1.LabelHook] = hook
	if pod.Spec.RestartPolicy == "" {
		pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	}
	env := []corev1.EnvVar{{Name: v1alpha1.EnvHookName, Value: ns.Name}}
	if node != "" {
		env = append(env, corev1.EnvVar{Name: v1alpha1.EnvHookNode, Value: node})
	}
	env = append(env, corev1.EnvVar{Name: v1alpha1.EnvHook, Value: hook}, corev1.EnvVar{Name: v1alpha1.EnvHookHash, Value: hash})
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			cs[i].Env = append(cs[i].Env, env...)
		}
	}
	return job
}

// Results of jobOutcome.
const (
	jobGoing     = ""
	jobSucceeded = "succeeded"
	jobFailed    = "failed"
)

// jobOutcome judges hook Job job at now, bounded by timeout: jobSucceeded
// once its Complete condition is True, jobFailed with a message once its
// Failed condition is True (DeadlineExceeded: the timeout passed;
// BackoffLimitExceeded: its pod failed) or when it is still going
// hookDeadlineGrace past its timeout (counted from its creation), jobGoing
// otherwise. Pure.
func jobOutcome(job *batchv1.Job, now time.Time, timeout time.Duration) (string, string) {
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return jobSucceeded, ""
		case batchv1.JobFailed:
			msg := "the Job failed"
			if c.Reason != "" {
				msg += ": " + c.Reason
			}
			if c.Message != "" {
				msg += ": " + c.Message
			}
			return jobFailed, msg
		}
	}
	if ct := job.CreationTimestamp.Time; !ct.IsZero() && !now.Before(ct.Add(timeout+hookDeadlineGrace)) {
		return jobFailed, fmt.Sprintf("the Job did not finish within its timeout %s (and %s of grace)", timeout, hookDeadlineGrace)
	}
	return jobGoing, ""
}

// getJob returns the hook Job namespace/name from the Job informer's cache,
// or, when the cache does not have it (it lags the create, or there is no
// informer), from the API; nil when it does not exist. RBAC: get jobs.
func (c *controller) getJob(ctx context.Context, namespace, name string) (*batchv1.Job, error) {
	if c.jobs != nil {
		if obj, ok, err := c.jobs.GetByKey(namespace + "/" + name); err != nil {
			return nil, err
		} else if ok {
			return obj.(*batchv1.Job), nil
		}
	}
	j, err := c.w.o.Client.BatchV1().Jobs(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("getting hook Job %s/%s: %w", namespace, name, err)
	}
	return j, nil
}

// createJob creates job; one that exists already (created before a
// restart, or the cache lags) is adopted. It records a HookStarted Event on
// obj and counts it. RBAC: create jobs in spec.backend.namespace.
func (c *controller) createJob(ctx context.Context, ns *v1alpha1.NodeScript, obj any, job *batchv1.Job, hook string) error {
	_, err := c.w.o.Client.BatchV1().Jobs(job.Namespace).Create(ctx, job, metav1.CreateOptions{FieldManager: "nodeexec-watcher"})
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil
	case err != nil:
		return fmt.Errorf("creating the %s hook Job %s/%s: %w", hook, job.Namespace, job.Name, err)
	}
	c.w.metrics.hooks.WithLabelValues(ns.Name, hook, "started").Inc()
	c.eventf(obj, corev1.EventTypeNormal, v1alpha1.ReasonHookStarted, "nodescript %s: %s hook Job %s/%s started", ns.Name, hook, job.Namespace, job.Name)
	return nil
}

// eventf records an Event on obj, a *corev1.Node or *v1alpha1.NodeScript.
func (c *controller) eventf(obj any, typ, reason, format string, args ...any) {
	switch o := obj.(type) {
	case *corev1.Node:
		c.events.Eventf(o, typ, reason, format, args...)
	case *v1alpha1.NodeScript:
		c.events.Eventf(o, typ, reason, format, args...)
	}
}

// deleteJob deletes hook Job namespace/name, its pods with it (propagation
// Background); one gone already is fine, another error is logged (the
// sweep tries again). RBAC: delete jobs.
func (c *controller) deleteJob(ctx context.Context, namespace, name string) {
	err := c.w.o.Client.BatchV1().Jobs(namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
	if err != nil && !apierrors.IsNotFound(err) {
		logr.FromContextOrDiscard(ctx).Error(err, "deleting a hook Job", "job", namespace+"/"+name)
	}
}

// preNodeHook is the step of spec.hooks.preNode before node n's run of ns
// at hash (s its state), after the pre-pull and before the silences and
// cordon (prepare), or before the run pod without spec.maintenance
// (start): it reports whether it took the step (and the caller stops
// there). A state whose hook just succeeded (hookPreNodeDone), or already
// Drained, goes on. Otherwise it creates the Job (HookJob, attempt
// s.Attempts+1) and records the node Running with Hook "preNode:Running",
// not cordoned; preNodeWaiting follows it.
func (c *controller) preNodeHook(ctx context.Context, ns *v1alpha1.NodeScript, hash string, n *corev1.Node, s nodeState, now time.Time) (bool, error) {
	h := ns.Spec.Hooks.HookByName(v1alpha1.HookPreNode)
	// Done, or past it: the before-run gate (which follows it) started.
	if h == nil || (s.Hash == hash && s.Phase == v1alpha1.PhaseRunning && (s.Hook == hookPreNodeDone || s.Maintenance == v1alpha1.MaintenanceDrained ||
		s.Awaiting == v1alpha1.AwaitingBeforeRun || s.Awaiting == v1alpha1.AwaitingBeforeRunDone)) {
		return false, nil
	}
	next := nodeState{Hash: hash, Phase: v1alpha1.PhaseRunning, Since: now, Hook: hookState(v1alpha1.HookPreNode, v1alpha1.HookRunning), BootID: n.Status.NodeInfo.BootID,
		CordonedByUs: s.CordonedByUs, Cordoned: s.Cordoned && s.CordonedByUs, Silences: s.Silences}
	if s.Hash == hash {
		next.Attempts, next.AttemptsBefore, next.Checked = s.Attempts, s.AttemptsBefore, s.Checked
	}
	job := hookJob(ns, h, v1alpha1.HookPreNode, n.Name, hash, next.Attempts+1)
	if err := c.createJob(ctx, ns, n, job, v1alpha1.HookPreNode); err != nil {
		return true, fmt.Errorf("node %s: %w", n.Name, err)
	}
	c.queue.AddAfter(ns.Name, hookRecheck)
	return true, c.w.writeState(ctx, ns, n, next)
}

// preNodeWaiting is phase 2's handling of node n whose preNode hook runs
// (Hook "preNode:Running"; s its state): the Job (found by its name, so a
// restarted watcher adopts it; created again when it is gone before its
// outcome was recorded) succeeded → HookSucceeded, the run goes on
// (start: prepare's cordon and drain, or the run pod), then the Job is
// deleted; failed or timed out → HookFailed, the node Failed
// (preHookFailure: PreHookFailed, never cordoned), then the Job deleted;
// else wait.
func (c *controller) preNodeWaiting(ctx context.Context, ns *v1alpha1.NodeScript, hash string, n *corev1.Node, s nodeState, now time.Time) error {
	h := ns.Spec.Hooks.HookByName(v1alpha1.HookPreNode)
	if h == nil {
		// The hook was removed from the spec meanwhile: go on without it.
		s.Hook = hookPreNodeDone
		return c.resumeAfterPreNode(ctx, ns, hash, n, s, now)
	}
	job := hookJob(ns, h, v1alpha1.HookPreNode, n.Name, hash, s.Attempts+1)
	cur, err := c.getJob(ctx, job.Namespace, job.Name)
	if err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	if cur == nil {
		return c.createJob(ctx, ns, n, job, v1alpha1.HookPreNode)
	}
	out, msg := jobOutcome(cur, now, hookTimeout(h))
	switch out {
	case jobGoing:
		return nil
	case jobSucceeded:
		c.w.metrics.hooks.WithLabelValues(ns.Name, v1alpha1.HookPreNode, "succeeded").Inc()
		c.events.Eventf(n, corev1.EventTypeNormal, v1alpha1.ReasonHookSucceeded, "nodescript %s: preNode hook Job %s/%s succeeded; the run goes on", ns.Name, job.Namespace, job.Name)
		s.Hook = hookPreNodeDone
		if err := c.resumeAfterPreNode(ctx, ns, hash, n, s, now); err != nil {
			return err
		}
	default:
		c.w.metrics.hooks.WithLabelValues(ns.Name, v1alpha1.HookPreNode, "failed").Inc()
		msg = tail(fmt.Sprintf("preNode hook Job %s/%s: %s", job.Namespace, job.Name, msg), 512)
		c.events.Eventf(n, corev1.EventTypeWarning, v1alpha1.ReasonHookFailed, "nodescript %s: %s (not cordoned; retried under spec.retry)", ns.Name, msg)
		if err := c.w.writeState(ctx, ns, n, preHookFailure(ns, s, msg, now)); err != nil {
			return err
		}
	}
	c.deleteJob(ctx, job.Namespace, job.Name)
	return nil
}

// resumeAfterPreNode starts node n's run after its preNode hook (s.Hook
// hookPreNodeDone): prepare (the image is pulled already) or the run pod.
func (c *controller) resumeAfterPreNode(ctx context.Context, ns *v1alpha1.NodeScript, hash string, n *corev1.Node, s nodeState, now time.Time) error {
	if nodescript.PrePulls(ns) {
		s.Maintenance = maintenancePulled
	}
	return c.start(ctx, ns, hash, n, s, v1alpha1.ActionRun, now)
}

// preHookFailure is node state s after its preNode hook failed at now
// with message msg: Failed, an infrastructure failure (reason
// ReasonPreHookFailed) counted as an attempt, to be retried after its
// backoff under spec.retry; Hook "preNode:Failed"; the node was never
// cordoned for it. Pure but for backoff's jitter.
func preHookFailure(ns *v1alpha1.NodeScript, s nodeState, msg string, now time.Time) nodeState {
	s.Attempts++
	s.Phase, s.Maintenance, s.Infrastructure, s.Reason, s.Message, s.Since = v1alpha1.PhaseFailed, "", true, v1alpha1.ReasonPreHookFailed, msg, now
	s.Hook = hookState(v1alpha1.HookPreNode, v1alpha1.HookFailed)
	t := now.Add(backoff(ns, s.Attempts))
	s.NextRetry = &t
	return s
}

// postNodeDue reports whether node n (state s, at hash) is ready for its
// spec.hooks.postNode step: the outcome of a run attempt is recorded
// (Succeeded, RolledBack, or Failed but for CheckFailed: the script never
// ran), the failure policy or the uncordon has nothing left to do (so no
// other step writes the node's state in the same reconcile), and the hook
// has not finished for this outcome (Hook is not "postNode:Succeeded" or
// "postNode:Failed"; the next attempt's state starts without it).
func postNodeDue(ns *v1alpha1.NodeScript, hash string, n *corev1.Node, s nodeState) bool {
	if ns.Spec.Hooks.HookByName(v1alpha1.HookPostNode) == nil || s.Hash != hash {
		return false
	}
	if s.Hook == hookState(v1alpha1.HookPostNode, v1alpha1.HookSucceeded) || s.Hook == hookState(v1alpha1.HookPostNode, v1alpha1.HookFailed) {
		return false
	}
	ours := s.CordonedByUs && n.Spec.Unschedulable
	switch s.Phase {
	case v1alpha1.PhaseSucceeded:
		return !ours && s.Awaiting == "" // after spec.hooks.afterRun too
	case v1alpha1.PhaseRolledBack:
		return true
	case v1alpha1.PhaseFailed:
		if s.Reason == v1alpha1.ReasonCheckFailed {
			return false
		}
		p := ns.Spec.OnFailure
		if s.Infrastructure || s.Reason == v1alpha1.ReasonRebootTimeout {
			return !(ours && !p.Cordon)
		}
		switch {
		case !p.Cordon && ours, p.Cordon && !s.Cordoned:
			return false
		case (p.Rollback || analysisRollback(ns, s)) && (s.Rollback == "" || s.Rollback == v1alpha1.PhaseRunning):
			return false
		case p.Drain && s.Cordoned && s.Drain == "":
			return false
		}
		return true
	}
	return false
}

// postNode is the spec.hooks.postNode step of node n (postNodeDue; s its
// state): with no Job going yet, it creates it (attempt s.Attempts, the
// attempt whose outcome is recorded) and records Hook "postNode:Running";
// once the Job finished, Hook "postNode:Succeeded" or "postNode:Failed"
// (a Warning Event HookFailed; the node's phase does not change), then the
// Job is deleted.
func (c *controller) postNode(ctx context.Context, ns *v1alpha1.NodeScript, hash string, n *corev1.Node, s nodeState, now time.Time) error {
	h := ns.Spec.Hooks.HookByName(v1alpha1.HookPostNode)
	job := hookJob(ns, h, v1alpha1.HookPostNode, n.Name, hash, max(s.Attempts, 1))
	if s.Hook != hookState(v1alpha1.HookPostNode, v1alpha1.HookRunning) {
		if err := c.createJob(ctx, ns, n, job, v1alpha1.HookPostNode); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		s.Hook = hookState(v1alpha1.HookPostNode, v1alpha1.HookRunning)
		c.queue.AddAfter(ns.Name, hookRecheck)
		return c.w.writeState(ctx, ns, n, s)
	}
	cur, err := c.getJob(ctx, job.Namespace, job.Name)
	if err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	if cur == nil {
		return c.createJob(ctx, ns, n, job, v1alpha1.HookPostNode)
	}
	out, msg := jobOutcome(cur, now, hookTimeout(h))
	switch out {
	case jobGoing:
		return nil
	case jobSucceeded:
		c.w.metrics.hooks.WithLabelValues(ns.Name, v1alpha1.HookPostNode, "succeeded").Inc()
		c.events.Eventf(n, corev1.EventTypeNormal, v1alpha1.ReasonHookSucceeded, "nodescript %s: postNode hook Job %s/%s succeeded (the node %s)", ns.Name, job.Namespace, job.Name, strings.ToLower(s.Phase))
		s.Hook = hookState(v1alpha1.HookPostNode, v1alpha1.HookSucceeded)
	default:
		c.w.metrics.hooks.WithLabelValues(ns.Name, v1alpha1.HookPostNode, "failed").Inc()
		msg = tail(msg, 256)
		c.events.Eventf(n, corev1.EventTypeWarning, v1alpha1.ReasonHookFailed, "nodescript %s: postNode hook Job %s/%s: %s (the node stays %s)", ns.Name, job.Namespace, job.Name, msg, s.Phase)
		s.Hook = hookState(v1alpha1.HookPostNode, v1alpha1.HookFailed)
	}
	if err := c.w.writeState(ctx, ns, n, s); err != nil {
		return err
	}
	c.deleteJob(ctx, job.Namespace, job.Name)
	return nil
}

// rolloutHooks is the step of spec.hooks.preRollout and postRollout, after
// the gates and the budget, before the runs start. preRollout: while d
// would start nodes and status.hooks.preRollout has not Succeeded for d's
// hash, its Job is created (or followed) and nothing starts: Hold
// HookRunning, or HookFailed while a failed Job waits out spec.retry's
// backoff before its next attempt. postRollout: once d is Complete or
// Halted, its Job runs once for the hash. A node whose postNode hook
// still runs does not start its next attempt. The Jobs whose outcome the
// status shows recorded are deleted (and finished Jobs no state or status
// refers to). It returns d (d.Hooks the status to write) and when to look
// again.
func (c *controller) rolloutHooks(ctx context.Context, ns *v1alpha1.NodeScript, d decision, cached nodeSet, now time.Time) (decision, time.Time) {
	hooks := ns.Spec.Hooks
	if hooks == nil {
		return d, time.Time{}
	}
	var st v1alpha1.HooksStatus
	if ns.Status.Hooks != nil {
		st = *ns.Status.Hooks.DeepCopy()
	}
	var next time.Time
	log := logr.FromContextOrDiscard(ctx)
	if hooks.PostNode != nil && len(d.Start) > 0 {
		keep := d.Start[:0:0]
		for _, node := range d.Start {
			if n := cached.byName[node]; n != nil {
				if s, ok := c.w.state(ctx, ns.Name, n); ok && s.Hook == hookState(v1alpha1.HookPostNode, v1alpha1.HookRunning) {
					next = earliest(next, now.Add(hookRecheck))
					continue
				}
			}
			keep = append(keep, node)
		}
		d.Start = keep
	}
	if h := hooks.PreRollout; h != nil {
		cur := st.PreRollout
		done := cur != nil && cur.Hash == d.Hash && cur.Phase == v1alpha1.HookSucceeded
		if !done && (len(d.Start) > 0 || (cur != nil && cur.Hash == d.Hash && cur.Phase == v1alpha1.HookRunning)) {
			hs, hold, at, err := c.rolloutHook(ctx, ns, h, v1alpha1.HookPreRollout, d.Hash, cur, true, now)
			if err != nil {
				log.Error(err, "spec.hooks.preRollout")
				hold = v1alpha1.HoldHookFailed
				if hs.Message == "" {
					hs.Message = err.Error()
				}
			}
			st.PreRollout = hs
			next = earliest(next, at)
			if hold != "" && len(d.Start) > 0 {
				d.Start = nil
				if d.Hold == "" {
					d.Hold = hold
				}
			}
		}
	}
	if h := hooks.PostRollout; h != nil && (d.Stage == v1alpha1.StageComplete || d.Stage == v1alpha1.StageHalted) {
		cur := st.PostRollout
		if cur == nil || cur.Hash != d.Hash || cur.Phase == v1alpha1.HookRunning {
			hs, _, at, err := c.rolloutHook(ctx, ns, h, v1alpha1.HookPostRollout, d.Hash, cur, false, now)
			if err != nil {
				log.Error(err, "spec.hooks.postRollout")
			}
			if hs != nil {
				st.PostRollout = hs
			}
			next = earliest(next, at)
		}
	}
	c.sweepJobs(ctx, ns, cached, &st)
	d.Hooks = &st
	return d, next
}

// rolloutHook runs rollout hook h (hook: preRollout or postRollout) for
// hash, whose last status is cur: it creates the Job of the next attempt
// when none is going (for preRollout, a failed one waits out spec.retry's
// backoff first; postRollout runs once), or reads the one going. It
// returns the status to record, the hold it means (preRollout), when to
// look again and an API error.
func (c *controller) rolloutHook(ctx context.Context, ns *v1alpha1.NodeScript, h *v1alpha1.HookJob, hook, hash string, cur *v1alpha1.HookStatus, retry bool, now time.Time) (*v1alpha1.HookStatus, string, time.Time, error) {
	if cur == nil || cur.Hash != hash {
		cur = &v1alpha1.HookStatus{Hash: hash}
	} else {
		cur = cur.DeepCopy()
	}
	start := func(attempt int32) (*v1alpha1.HookStatus, string, time.Time, error) {
		job := hookJob(ns, h, hook, "", hash, int(attempt))
		hs := &v1alpha1.HookStatus{Hash: hash, Phase: v1alpha1.HookRunning, Job: job.Name, Attempt: attempt, Since: &metav1.Time{Time: now.UTC().Truncate(time.Second)}}
		if err := c.createJob(ctx, ns, ns, job, hook); err != nil {
			return cur, v1alpha1.HoldHookFailed, now.Add(hookRecheck), err
		}
		return hs, v1alpha1.HoldHookRunning, now.Add(hookRecheck), nil
	}
	switch cur.Phase {
	case "":
		return start(1)
	case v1alpha1.HookFailed:
		if !retry {
			return cur, "", time.Time{}, nil
		}
		at := now
		if cur.Since != nil {
			at = cur.Since.Add(backoff(ns, int(cur.Attempt)))
		}
		if now.Before(at) {
			return cur, v1alpha1.HoldHookFailed, at, nil
		}
		return start(cur.Attempt + 1)
	case v1alpha1.HookSucceeded:
		return cur, "", time.Time{}, nil
	}
	namespace := nodescript.RunNamespace(&ns.Spec)
	job, err := c.getJob(ctx, namespace, cur.Job)
	if err != nil {
		return cur, v1alpha1.HoldHookRunning, now.Add(hookRecheck), err
	}
	if job == nil {
		// Deleted before its outcome was recorded: run it again.
		return start(cur.Attempt)
	}
	out, msg := jobOutcome(job, now, hookTimeout(h))
	switch out {
	case jobGoing:
		return cur, v1alpha1.HoldHookRunning, now.Add(hookRecheck), nil
	case jobSucceeded:
		c.w.metrics.hooks.WithLabelValues(ns.Name, hook, "succeeded").Inc()
		c.events.Eventf(ns, corev1.EventTypeNormal, v1alpha1.ReasonHookSucceeded, "%s hook Job %s/%s succeeded (spec %s)", hook, namespace, cur.Job, hash)
		cur.Phase, cur.Message = v1alpha1.HookSucceeded, ""
		cur.Since = &metav1.Time{Time: now.UTC().Truncate(time.Second)}
		return cur, "", now.Add(hookRecheck), nil
	}
	c.w.metrics.hooks.WithLabelValues(ns.Name, hook, "failed").Inc()
	what := "the rollout holds and it runs again after spec.retry's backoff"
	if !retry {
		what = "it does not run again for this spec"
	}
	c.events.Eventf(ns, corev1.EventTypeWarning, v1alpha1.ReasonHookFailed, "%s hook Job %s/%s (spec %s): %s; %s", hook, namespace, cur.Job, hash, msg, what)
	cur.Phase, cur.Message = v1alpha1.HookFailed, tail(msg, 512)
	cur.Since = &metav1.Time{Time: now.UTC().Truncate(time.Second)}
	hold := ""
	if retry {
		hold = v1alpha1.HoldHookFailed
	}
	return cur, hold, now.Add(hookRecheck), nil
}

// sweepJobs deletes ns's finished hook Jobs in the Job informer's cache
// that nothing waits for any more: a rollout hook's Job once neither the
// status the informer shows nor next (the status about to be written)
// names it Running, a node hook's Job whose node's
// state does not name it running (its outcome recorded, or the spec
// changed). Jobs still going are left to their deadline. Nothing without
// the informer.
func (c *controller) sweepJobs(ctx context.Context, ns *v1alpha1.NodeScript, cached nodeSet, next *v1alpha1.HooksStatus) {
	if c.jobs == nil {
		return
	}
	now := c.w.o.Clock.Now()
	for _, obj := range c.jobs.List() {
		job, ok := obj.(*batchv1.Job)
		if !ok || job.Labels[v1alpha1.LabelNodeScript] != ns.Name || job.DeletionTimestamp != nil {
			continue
		}
		hook := job.Labels[v1alpha1.LabelHook]
		if h := ns.Spec.Hooks.HookByName(hook); h != nil {
			if out, _ := jobOutcome(job, now, hookTimeout(h)); out == jobGoing {
				continue
			}
		} else if out, _ := jobOutcome(job, now, v1alpha1.DefaultHookTimeout); out == jobGoing {
			continue
		}
		waited := false
		switch hook {
		case v1alpha1.HookPreRollout, v1alpha1.HookPostRollout:
			for _, hs := range []*v1alpha1.HooksStatus{ns.Status.Hooks, next} {
				if hs == nil {
					continue
				}
				cur := hs.PreRollout
				if hook == v1alpha1.HookPostRollout {
					cur = hs.PostRollout
				}
				waited = waited || (cur != nil && cur.Job == job.Name && cur.Phase == v1alpha1.HookRunning)
			}
		default:
			if n := cached.byName[job.Annotations[v1alpha1.AnnotationHookNode]]; n != nil {
				if s, ok := c.w.state(ctx, ns.Name, n); ok && s.Hook == hookState(hook, v1alpha1.HookRunning) {
					waited = true
				}
			}
		}
		if !waited {
			c.deleteJob(ctx, job.Namespace, job.Name)
		}
	}
}

// hookStatus sets status.hooks and, under a hook's hold, the condition
// Progressing False (reason HookRunning or HookFailed) from d. Without
// spec.hooks it is removed.
func hookStatus(st *v1alpha1.NodeScriptStatus, ns *v1alpha1.NodeScript, d decision, now time.Time) {
	if ns.Spec.Hooks == nil {
		st.Hooks = nil
		return
	}
	if d.Hooks != nil {
		st.Hooks = d.Hooks
	}
	switch d.Hold {
	case v1alpha1.HoldHookRunning:
		job := ""
		if st.Hooks != nil && st.Hooks.PreRollout != nil {
			job = st.Hooks.PreRollout.Job
		}
		setCondition(st, v1alpha1.ConditionProgressing, false, v1alpha1.HoldHookRunning,
			fmt.Sprintf("spec.hooks.preRollout: nothing starts until its Job %s succeeds (%d running)", job, d.Counts.Running), ns.Generation, now)
	case v1alpha1.HoldHookFailed:
		msg := ""
		if st.Hooks != nil && st.Hooks.PreRollout != nil {
			msg = st.Hooks.PreRollout.Message
		}
		setCondition(st, v1alpha1.ConditionProgressing, false, v1alpha1.HoldHookFailed,
			"spec.hooks.preRollout failed; it runs again after spec.retry's backoff: "+msg, ns.Generation, now)
	}
}

// newHookMetrics is nodeexec_watcher_hooks_total.
func newHookMetrics() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeexec_watcher_hooks_total",
		Help: "Hook Jobs of spec.hooks, by NodeScript, hook (preNode, postNode, preRollout, postRollout) and result (started, succeeded, failed).",
	}, []string{"nodescript", "hook", "result"})
}

// enqueueJob reconciles the NodeScript of a hook Job that changed.
func enqueueJob(q workqueue.TypedRateLimitingInterface[string], obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if j, ok := obj.(*batchv1.Job); ok && j.Labels[v1alpha1.LabelNodeScript] != "" {
		q.Add(j.Labels[v1alpha1.LabelNodeScript])
	}
}

// trimJob is the hook Job informer's transform: the cache keeps of a Job
// its metadata (but managed fields) and status, not its pod template.
func trimJob(obj any) (any, error) {
	j, ok := obj.(*batchv1.Job)
	if !ok {
		return obj, nil
	}
	out := &batchv1.Job{ObjectMeta: j.ObjectMeta, Status: j.Status}
	out.ManagedFields = nil
	out.Spec.ActiveDeadlineSeconds = j.Spec.ActiveDeadlineSeconds
	return out, nil
}
