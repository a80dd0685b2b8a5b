package watcher

import (
	"cmp"
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
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// maintenancePulled marks a state, in memory only, whose image was just
// pulled: prepare cordons it next instead of pulling again.
const maintenancePulled = "Pulled"

// prePullRecheck is how often a NodeScript with a node pulling is looked
// at again (pod events usually come first).
const prePullRecheck = 2 * time.Second

// PrePullCommand is the pre-pull container's command: it exits at once.
// An image without it still proves the pull: its container fails to start
// after the image was pulled, which prePullStep reads as pulled.
var prePullCommand = []string{"true"}

// prePullTimeout bounds a pre-pull: spec.timeout, or DefaultTimeout.
func prePullTimeout(ns *v1alpha1.NodeScript) time.Duration {
	if t := ns.Spec.Timeout; t != nil {
		return t.Duration
	}
	return defaultTimeout
}

// prePullPod returns the pod that pulls the image of run, a run pod
// RunPod built, on its node: named name, the run pod's namespace, owner,
// labels (managed-by, run ID, NodeScript; action ActionPrePull), node
// annotation, node, tolerations, priority, image pull secrets and each
// container's image, pull policy and requests; none of its privileges,
// host namespaces, volumes, environment or script. Each container runs
// prePullCommand. It is bounded by timeout (activeDeadlineSeconds, the
// deadline annotation, counted from now). It is a pure function; run is
// not changed.
func prePullPod(run *corev1.Pod, name string, timeout time.Duration, now time.Time) *corev1.Pod {
	active := int64(math.Ceil(timeout.Seconds()))
	labels := map[string]string{}
	for _, k := range []string{nodeexec.LabelManagedBy, nodeexec.LabelRunID, v1alpha1.LabelNodeScript} {
		if v, ok := run.Labels[k]; ok {
			labels[k] = v
		}
	}
	labels[v1alpha1.LabelAction] = v1alpha1.ActionPrePull
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: run.Namespace, Labels: labels,
			Annotations: map[string]string{
				nodeexec.AnnotationNode:     run.Spec.NodeName,
				nodeexec.AnnotationDeadline: now.Add(time.Duration(active) * time.Second).UTC().Format(time.RFC3339),
				nodeexec.AnnotationCommand:  `["true"]`,
			},
			OwnerReferences: run.OwnerReferences,
		},
		Spec: corev1.PodSpec{
			NodeName: run.Spec.NodeName, RestartPolicy: corev1.RestartPolicyNever, Tolerations: run.Spec.Tolerations,
			PriorityClassName: run.Spec.PriorityClassName, ImagePullSecrets: run.Spec.ImagePullSecrets,
			ActiveDeadlineSeconds: &active, AutomountServiceAccountToken: ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To(int64(0)),
		},
	}
	for i, c := range append(append([]corev1.Container(nil), run.Spec.InitContainers...), run.Spec.Containers...) {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{
			Name: "pull-" + strconv.Itoa(i), Image: c.Image, ImagePullPolicy: c.ImagePullPolicy, Command: prePullCommand,
			Resources: corev1.ResourceRequirements{Requests: c.Resources.Requests},
			SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			},
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		})
	}
	return pod
}

// Results of prePullStep.
const (
	prePullGoing  = ""
	prePullDone   = "pulled"
	prePullFailed = "failed"
)

// prePullStep judges the pre-pull pod at now, started at since and bounded
// by timeout: prePullDone once every container is past its image pull
// (running or terminated, whatever its exit; or waiting for a reason that
// comes after the pull, e.g. CreateContainerError for an image without
// prePullCommand), prePullFailed with a message when a container cannot
// pull its image (ErrImagePull, ImagePullBackOff, InvalidImageName,
// ErrImageNeverPull: PullMessage, with the registry's answer and the
// fields to fix; image names the image when neither the pod's spec nor
// its status does, as in the watcher's trimmed cache), the kubelet ended
// or refused the pod, or the timeout passed; prePullGoing otherwise. A nil
// pod is going. Pure.
func prePullStep(pod *corev1.Pod, image string, since, now time.Time, timeout time.Duration) (string, string) {
	if pod == nil {
		return prePullGoing, ""
	}
	for i := range pod.Status.ContainerStatuses {
		cs := &pod.Status.ContainerStatuses[i]
		if w := cs.State.Waiting; w != nil && nodeexec.IsImagePullReason(w.Reason) {
			img := cmp.Or(podexec.ContainerImage(pod, cs.Name), cs.Image, image)
			return prePullFailed, w.Reason + ": " + pullMessage(img, w.Message)
		}
	}
	pulled := len(pod.Status.ContainerStatuses) > 0 && len(pod.Status.ContainerStatuses) >= len(pod.Spec.Containers)
	for i := range pod.Status.ContainerStatuses {
		cs := &pod.Status.ContainerStatuses[i]
		if w := cs.State.Waiting; w != nil && (w.Reason == "" || w.Reason == "ContainerCreating" || w.Reason == "PodInitializing") && cs.ImageID == "" {
			pulled = false
		}
	}
	switch {
	case pulled || pod.Status.Phase == corev1.PodSucceeded:
		return prePullDone, ""
	case pod.Status.Phase == corev1.PodFailed:
		// Not past the pull and ended: the kubelet refused the pod (e.g.
		// OutOfcpu) or its deadline passed while it pulled.
		msg := "the pod pulling the image ended before the pull"
		if r := pod.Status.Reason; r != "" {
			msg += ": " + r
		}
		if m := pod.Status.Message; m != "" {
			msg += ": " + m
		}
		return prePullFailed, msg
	case !now.Before(since.Add(timeout)):
		return prePullFailed, fmt.Sprintf("the image was not pulled within %s (spec.timeout)", timeout)
	}
	return prePullGoing, ""
}

// prePullFailure is node state s after a failed pre-pull at now with
// message msg: Failed, an infrastructure failure (reason
// ReasonPrePullFailed) counted as an attempt, to be retried after its
// backoff under spec.retry; the node was never cordoned for it. Pure but
// for backoff's jitter.
func prePullFailure(ns *v1alpha1.NodeScript, s nodeState, msg string, now time.Time) nodeState {
	s.Attempts++
	s.Phase, s.Maintenance, s.Infrastructure, s.Reason, s.Message, s.Since = v1alpha1.PhaseFailed, "", true, v1alpha1.ReasonPrePullFailed, msg, now
	t := now.Add(backoff(ns, s.Attempts))
	s.NextRetry = &t
	return s
}

// prePull is prepare's first step under spec.maintenance.prePull: it
// reports whether it took the step (and the caller stops there). A state
// just pulled (maintenancePulled) goes on to the cordon. Otherwise it
// creates the pre-pull pod on node n (PrePullPod of the run pod the next
// attempt would create; an existing one is fine) and records the node
// Running with Maintenance Pulling and the pod, not cordoned. RBAC: create
// pods in the run namespace, patch nodes/status.
func (c *controller) prePull(ctx context.Context, ns *v1alpha1.NodeScript, hash string, n *corev1.Node, s nodeState, now time.Time) (bool, error) {
	if !nodescript.PrePulls(ns) || (s.Hash == hash && s.Phase == v1alpha1.PhaseRunning && s.Maintenance == maintenancePulled) {
		return false, nil
	}
	next := nodeState{Hash: hash, Phase: v1alpha1.PhaseRunning, Since: now, Maintenance: v1alpha1.MaintenancePulling, BootID: n.Status.NodeInfo.BootID,
		CordonedByUs: s.CordonedByUs, Cordoned: s.Cordoned && s.CordonedByUs}
	if s.Hash == hash {
		next.Attempts, next.AttemptsBefore, next.Checked = s.Attempts, s.AttemptsBefore, s.Checked
	}
	run, err := c.w.runPod(runPodSpec{NodeScript: ns, Node: n.Name, Action: v1alpha1.ActionRun, Attempt: next.Attempts + 1, Now: now})
	if err != nil {
		return true, err
	}
	pod := prePullPod(run, runPodName(ns.Name, hash, n.Name, v1alpha1.ActionPrePull, next.Attempts+1), prePullTimeout(ns), now)
	next.Pod = pod.Name
	c.w.expect(pod.Name, now)
	if _, err := c.w.o.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{FieldManager: "nodeexec-watcher"}); err != nil && !apierrors.IsAlreadyExists(err) {
		c.w.unexpect(pod.Name)
		return true, fmt.Errorf("node %s: creating the pre-pull pod: %w", n.Name, err)
	}
	c.queue.AddAfter(ns.Name, prePullRecheck) // the timeout, if no pod event comes first
	return true, c.w.writeState(ctx, ns, n, next)
}

// pulling is phase 2's handling of node n Pulling for ns at hash (s its
// state, s.Pod the pre-pull pod): pulled → PrePulled, the node is
// prepared (cordon, drain: prepare), then the pod deleted; failed → the
// pod deleted and the node Failed (prePullFailure), never cordoned; a pod
// gone before its outcome was seen is created again; else wait. RBAC: get
// and delete pods in the run namespace.
func (c *controller) pulling(ctx context.Context, ns *v1alpha1.NodeScript, hash string, n *corev1.Node, s nodeState, now time.Time) error {
	namespace := nodescript.RunNamespace(&ns.Spec)
	var pod *corev1.Pod
	if obj, ok, err := c.pods.GetByKey(namespace + "/" + s.Pod); err != nil {
		return err
	} else if ok {
		pod = obj.(*corev1.Pod)
	} else if !c.w.expected(s.Pod) {
		p, err := c.w.o.Client.CoreV1().Pods(namespace).Get(ctx, s.Pod, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			// Deleted after its outcome was seen but before it was
			// recorded (a restart), or by someone else: pull again.
			s.Maintenance = ""
			s.Phase = v1alpha1.PhasePending
			_, err := c.prePull(ctx, ns, hash, n, s, now)
			return err
		case err != nil:
			return fmt.Errorf("node %s: getting the pre-pull pod %s: %w", n.Name, s.Pod, err)
		}
		pod = p
	}
	image, _ := runImage(&ns.Spec) // validated
	step, msg := prePullStep(pod, image, s.Since, now, prePullTimeout(ns))
	switch step {
	case prePullGoing:
		return nil
	case prePullDone:
		c.w.metrics.postComplete.prePulls.WithLabelValues(ns.Name, prePullDone).Inc()
		c.events.Eventf(n, corev1.EventTypeNormal, v1alpha1.ReasonPrePulled, "nodescript %s: image %s pulled in %s before the cordon (spec.maintenance.prePull)", ns.Name, image, now.Sub(s.Since).Round(time.Second))
		s.Maintenance = maintenancePulled
		if err := c.prepare(ctx, ns, hash, n, s, now); err != nil {
			return err
		}
	default:
		c.w.metrics.postComplete.prePulls.WithLabelValues(ns.Name, prePullFailed).Inc()
		msg = tail(msg, 512)
		c.events.Eventf(n, corev1.EventTypeWarning, v1alpha1.ReasonPrePullFailed, "nodescript %s: before the cordon (not cordoned): %s", ns.Name, msg)
		if err := c.w.writeState(ctx, ns, n, prePullFailure(ns, s, msg, now)); err != nil {
			return err
		}
	}
	if pod == nil {
		return nil
	}
	err := c.w.o.Client.CoreV1().Pods(namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
	if err != nil && !apierrors.IsNotFound(err) {
		logr.FromContextOrDiscard(ctx).Error(err, "deleting the pre-pull pod", "node", n.Name, "pod", pod.Name)
	}
	return nil
}

// strayPrePull deletes pre-pull pod, of ns on node n, when the node's
// state no longer names it as its pull going (a spec changed meanwhile, a
// state write that failed after the pod was created, an outcome recorded
// before the pod's deletion was seen): pre-pull pods are never left
// behind. Its error is logged; the next reconcile tries again.
func (c *controller) strayPrePull(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, pod *corev1.Pod) {
	if pod.DeletionTimestamp != nil || c.w.expected(pod.Name) {
		return
	}
	if s, ok := c.w.state(ctx, ns.Name, n); !ok || (s.Phase == v1alpha1.PhaseRunning && s.Maintenance == v1alpha1.MaintenancePulling && s.Pod == pod.Name) {
		return
	}
	err := c.w.o.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &pod.UID}, PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		logr.FromContextOrDiscard(ctx).Error(err, "deleting a stray pre-pull pod", "node", n.Name, "pod", pod.Name)
	}
}

// earliest is the earlier of a and b, a zero time counting as none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
