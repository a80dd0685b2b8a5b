package podexec

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// CollectGarbage deletes the pods nodeexec created whose deadline has passed
// by now: pods labelled nodeexec.LabelManagedBy=nodeexec.ManagedByValue with
// a nodeexec.AnnotationDeadline before now. A run deletes its own pod, even
// when cancelled; such pods are left only by a client that was killed (the
// pod's activeDeadlineSeconds has stopped it by then, but the object stays).
// Pods without a deadline annotation, such as resident agents, are never
// touched, nor are pods being deleted (with a grace period of at most
// DeleteGracePeriod), nor the watcher's run pods (owned by a NodeScript, whose
// lifecycle the watcher owns). namespace "" means every namespace. It returns the deleted pods
// as "namespace/name". RBAC: list and delete on pods.
func CollectGarbage(ctx context.Context, client kubernetes.Interface, namespace string, now time.Time) ([]string, error) {
	list, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: nodeexec.LabelManagedBy + "=" + nodeexec.ManagedByValue,
	})
	if err != nil {
		return nil, fmt.Errorf("listing nodeexec pods: %w", err)
	}
	var deleted []string
	var errs []error
	for _, p := range list.Items {
		deadline, err := time.Parse(time.RFC3339, p.Annotations[nodeexec.AnnotationDeadline])
		if err != nil || !deadline.Before(now) || ownedByWatcher(&p) || beingDeleted(&p) {
			continue
		}
		err = client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To(DeleteGracePeriod),
			Preconditions:      &metav1.Preconditions{UID: &p.UID},
		})
		switch {
		case err == nil:
			deleted = append(deleted, p.Namespace+"/"+p.Name)
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		default:
			errs = append(errs, fmt.Errorf("deleting pod %s/%s: %w", p.Namespace, p.Name, err))
		}
	}
	return deleted, errors.Join(errs...)
}

// ownedByWatcher reports a run pod of the watcher: owned by a NodeScript.
func ownedByWatcher(p *corev1.Pod) bool {
	for _, r := range p.OwnerReferences {
		if r.Kind == "NodeScript" {
			return true
		}
	}
	return false
}

// beingDeleted reports a pod already deleted with a grace period no longer
// than DeleteGracePeriod: typically the pod its own run deleted as it ended,
// which the kubelet is still stopping. Deleting it again would change
// nothing but cost a request; a pod deleted with a longer grace period is
// deleted again, which shortens it.
func beingDeleted(p *corev1.Pod) bool {
	return p.DeletionTimestamp != nil && ptr.Deref(p.DeletionGracePeriodSeconds, 0) <= DeleteGracePeriod
}

// CollectExpired deletes, in namespace ("" for every namespace), the pods
// of runs whose client died: pods labelled LabelLease whose run Lease has
// expired (LeaseExpired: not renewed for its leaseDurationSeconds) or no
// longer exists, then the expired Leases. Live runs renew their Lease every
// DefaultLeaseRenewInterval, so their pods are never touched; pods without
// LabelLease (resident agents, the watcher's run pods) never are either,
// nor pods already being deleted (such as a finished run's, which the
// kubelet is still stopping) with a grace period of at most
// DeleteGracePeriod.
// Deletions use a 1 s grace period and the pod's UID as precondition; each
// deleted pod gets a Warning Event with ReasonOutcomeUnknown naming its
// node, run, command and Lease (recordOutcomeUnknown; best effort). It
// returns what it deleted as "pod/namespace/name" and
// "lease/namespace/name". RBAC: list, delete on pods; list, delete on
// leases.coordination.k8s.io; create on events (else no Event, logged).
func CollectExpired(ctx context.Context, client kubernetes.Interface, namespace string, now time.Time) ([]string, error) {
	// Pods first, then Leases: a run creates its Lease before its pods, so
	// every pod listed has its Lease in the later Lease list unless that
	// Lease is really gone. (Leases first would see a new run's pod without
	// the Lease created between the two lists, and delete it.)
	podList, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: nodeexec.LabelManagedBy + "=" + nodeexec.ManagedByValue + "," + LabelLease,
	})
	if err != nil {
		return nil, fmt.Errorf("listing nodeexec pods: %w", err)
	}
	leaseList, err := client.CoordinationV1().Leases(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: nodeexec.LabelManagedBy + "=" + nodeexec.ManagedByValue,
	})
	if err != nil {
		return nil, fmt.Errorf("listing nodeexec run Leases: %w", err)
	}
	live := map[string]bool{}                    // namespace/name of Leases still renewed
	expired := map[string]bool{}                 // namespace/name of expired Leases
	leases := map[string]*coordinationv1.Lease{} // namespace/name of every run Lease
	for i := range leaseList.Items {
		l := &leaseList.Items[i]
		if !strings.HasPrefix(l.Name, LeaseNamePrefix) {
			continue
		}
		leases[l.Namespace+"/"+l.Name] = l
		if LeaseExpired(l, now) {
			expired[l.Namespace+"/"+l.Name] = true
		} else {
			live[l.Namespace+"/"+l.Name] = true
		}
	}
	var deleted []string
	var errs []error
	for _, p := range podList.Items {
		if live[p.Namespace+"/"+p.Labels[LabelLease]] || ownedByWatcher(&p) || beingDeleted(&p) {
			continue
		}
		err := client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To(DeleteGracePeriod),
			Preconditions:      &metav1.Preconditions{UID: &p.UID},
		})
		switch {
		case err == nil:
			deleted = append(deleted, "pod/"+p.Namespace+"/"+p.Name)
			recordOutcomeUnknown(ctx, client, &p, leases[p.Namespace+"/"+p.Labels[LabelLease]], now)
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		default:
			errs = append(errs, fmt.Errorf("deleting pod %s/%s: %w", p.Namespace, p.Name, err))
		}
	}
	for i := range leaseList.Items {
		l := &leaseList.Items[i]
		if !expired[l.Namespace+"/"+l.Name] {
			continue
		}
		// The resourceVersion precondition loses to a renewal made since the list.
		err := client.CoordinationV1().Leases(l.Namespace).Delete(ctx, l.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &l.UID, ResourceVersion: &l.ResourceVersion},
		})
		switch {
		case err == nil:
			deleted = append(deleted, "lease/"+l.Namespace+"/"+l.Name)
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		default:
			errs = append(errs, fmt.Errorf("deleting Lease %s/%s: %w", l.Namespace, l.Name, err))
		}
	}
	return deleted, errors.Join(errs...)
}

// ReasonOutcomeUnknown is the reason of the Event CollectExpired records on
// each pod it deletes: the pod's run lost its client, so the command's
// output and exit status were never received.
const ReasonOutcomeUnknown = "OutcomeUnknown"

// CollectorComponent is the source component of the collector's Events.
const CollectorComponent = "nodeexec-collector"

// recordOutcomeUnknown records, on the deleted pod p of a run whose client
// died, a Warning Event with ReasonOutcomeUnknown that says so: which node,
// which run and command, which Lease stopped being renewed and when. It is
// what is left of a killed client's run beside the audit log's record of
// the pod's create (who, what, where): without it, nothing would say that
// the run's outcome is unknown. The Event carries the managed-by and run-ID
// labels and expires with the API server's --event-ttl (1 h by default).
// Best effort: a failure (no RBAC to create events in the namespace) is
// logged at V(1) and does not stop the collection. RBAC: create on events.
func recordOutcomeUnknown(ctx context.Context, client kubernetes.Interface, p *corev1.Pod, lease *coordinationv1.Lease, now time.Time) {
	why := "its run Lease " + p.Labels[LabelLease] + " no longer exists"
	if lease != nil {
		holder, renewed := ptr.Deref(lease.Spec.HolderIdentity, "unknown"), "never"
		if t := lease.Spec.RenewTime; t != nil {
			renewed = t.UTC().Format(time.RFC3339)
		}
		why = fmt.Sprintf("its client (%s) stopped renewing the run Lease %s (last renewed %s)", holder, lease.Name, renewed)
	}
	node := p.Spec.NodeName
	if node == "" {
		node = p.Annotations[nodeexec.AnnotationNode]
	}
	t := metav1.NewTime(now)
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s.%x", p.Name, now.UnixNano()), // as client-go's recorder names Events
			Namespace: p.Namespace,
			Labels:    map[string]string{nodeexec.LabelManagedBy: nodeexec.ManagedByValue, nodeexec.LabelRunID: p.Labels[nodeexec.LabelRunID]},
		},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
		Reason:         ReasonOutcomeUnknown,
		Message: fmt.Sprintf("outcome unknown: the run %s on node %q lost its client: %s, so the command's output and exit status were never received; the pod was deleted. Command: %s",
			p.Labels[nodeexec.LabelRunID], node, why, p.Annotations[nodeexec.AnnotationCommand]),
		Type:                corev1.EventTypeWarning,
		Source:              corev1.EventSource{Component: CollectorComponent},
		FirstTimestamp:      t,
		LastTimestamp:       t,
		Count:               1,
		ReportingController: "nodeexec.io/collector",
	}
	if _, err := client.CoreV1().Events(p.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		logr.FromContextOrDiscard(ctx).V(1).Info("could not record the collected run's unknown outcome", "pod", p.Namespace+"/"+p.Name, "err", err)
	}
}

// DefaultCollectInterval is how often RunCollector calls CollectExpired:
// with DefaultLeaseDuration, a killed client's pods are deleted at most
// DefaultLeaseDuration + DefaultCollectInterval (45 s) after its last renewal.
const DefaultCollectInterval = 15 * time.Second

// RunCollector calls CollectExpired in namespace ("" for all) every
// interval (DefaultCollectInterval when zero) until ctx ends, logging what
// it deleted and its errors (logr from ctx). The watcher runs it
// cluster-wide. It returns nil when ctx ends.
func RunCollector(ctx context.Context, client kubernetes.Interface, namespace string, interval time.Duration, clk clock.Clock) error {
	if interval <= 0 {
		interval = DefaultCollectInterval
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	log := logr.FromContextOrDiscard(ctx).WithName("collector")
	for {
		deleted, err := CollectExpired(ctx, client, namespace, clk.Now())
		if len(deleted) > 0 {
			log.Info("collected the objects of runs whose client died", "deleted", deleted)
		}
		if err != nil && ctx.Err() == nil {
			log.Error(err, "collecting the objects of runs whose client died")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-clk.After(interval):
		}
	}
}
