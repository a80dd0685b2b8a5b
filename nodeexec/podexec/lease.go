package podexec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// Timing of the run Lease, and so of the collection of a killed client's pods.
const (
	// DefaultLeaseDuration is the Lease's spec.leaseDurationSeconds: a run
	// whose Lease was not renewed for this long is considered dead, and its
	// pods are collected.
	DefaultLeaseDuration = 30 * time.Second
	// DefaultLeaseRenewInterval is how often a live run renews its Lease
	// (three renewals per DefaultLeaseDuration, so two may fail).
	DefaultLeaseRenewInterval = 10 * time.Second
	// LeaseNamePrefix starts the name of every run Lease; the rest is the run ID.
	LeaseNamePrefix = "nodeexec-run-"
	// LabelLease on a pod names the run Lease (in the pod's namespace) that
	// keeps the pod alive.
	LabelLease = "nodeexec.io/lease"
)

// LeaseName is the name of the Lease of the run with the given ID.
func LeaseName(runID string) string { return LeaseNamePrefix + runID }

// leaseOptions configure a runLease.
type leaseOptions struct {
	// Client creates, renews (update) and deletes the Lease. RBAC: create,
	// get, update, delete on leases.coordination.k8s.io in Namespace. Required.
	Client kubernetes.Interface
	// Namespace of the Lease: the namespace of the run's pods. Required.
	Namespace string
	// RunID names the Lease (LeaseName) and labels it. Required.
	RunID string
	// Holder is recorded in spec.holderIdentity. Defaults to "<hostname>/<pid>".
	Holder string
	// Duration and RenewInterval default to DefaultLeaseDuration and
	// DefaultLeaseRenewInterval; RenewInterval must be shorter than Duration.
	Duration, RenewInterval time.Duration
	// Clock drives renewals and the renew times written. Defaults to the real clock.
	Clock clock.WithTicker
}

// runLease is the coordination.k8s.io/v1 Lease that says a run's client is
// alive. The first Acquire creates it, a goroutine renews it every
// RenewInterval while it is held, and the last release deletes it. A client
// killed outright stops renewing: once Duration has passed since the last
// renewal, CollectExpired (called by every later nodeexec invocation in the
// namespace, and by the watcher cluster-wide) deletes the run's pods and
// the Lease. The pods also carry an ownerReference to the Lease, so the
// garbage collector deletes them whenever the Lease is deleted.
// It is safe for concurrent use.
type runLease struct {
	o leaseOptions

	// mu serialises Acquire and release (refs, stop, done). release holds
	// it while it waits for the renewal loop to end, so the loop never takes
	// it: it takes leaseMu, which guards lease alone.
	mu   sync.Mutex
	refs int
	stop context.CancelFunc
	done chan struct{}

	leaseMu sync.Mutex
	lease   *coordinationv1.Lease // held: the last written state
}

// newLease validates o and returns a runLease (nothing is created yet).
func newLease(o leaseOptions) (*runLease, error) {
	switch {
	case o.Client == nil:
		return nil, errors.New("podexec: leaseOptions.Client is nil")
	case o.Namespace == "":
		return nil, errors.New("podexec: leaseOptions.Namespace is empty")
	case o.RunID == "":
		return nil, errors.New("podexec: leaseOptions.RunID is empty")
	}
	if o.Duration == 0 {
		o.Duration = DefaultLeaseDuration
	}
	if o.RenewInterval == 0 {
		o.RenewInterval = DefaultLeaseRenewInterval
	}
	if o.Duration < time.Second || o.RenewInterval <= 0 || o.RenewInterval >= o.Duration {
		return nil, fmt.Errorf("podexec: lease RenewInterval %s must be positive and shorter than Duration %s (at least 1s)", o.RenewInterval, o.Duration)
	}
	if o.Holder == "" {
		o.Holder = ClientIdentity()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return &runLease{o: o}, nil
}

// ClientIdentity is "<hostname>/<pid>": this process, as the run Leases'
// (and the resident agents' run records') spec.holderIdentity names it.
func ClientIdentity() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}

// Name is the Lease's name.
func (l *runLease) Name() string { return LeaseName(l.o.RunID) }

// Acquire makes sure the Lease exists and is renewed, and returns it (for
// OwnedBy) and the function that gives it up: the last holder's release
// stops the renewals and deletes the Lease, retrying until it is deleted or
// the Lease would have expired anyway (the collector then takes over).
// Errors come from creating the Lease (RBAC: create leases).
func (l *runLease) Acquire(ctx context.Context) (*coordinationv1.Lease, func(), error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil { // not held
		now := metav1.NewMicroTime(l.o.Clock.Now())
		lease := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name:      l.Name(),
				Namespace: l.o.Namespace,
				Labels: map[string]string{
					nodeexec.LabelManagedBy: nodeexec.ManagedByValue,
					nodeexec.LabelRunID:     l.o.RunID,
				},
				Annotations: map[string]string{nodeexec.AnnotationDeadline: l.expiry(now.Time)},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(l.o.Holder),
				LeaseDurationSeconds: ptr.To(int32(l.o.Duration / time.Second)),
				AcquireTime:          &now,
				RenewTime:            &now,
			},
		}
		leases := l.o.Client.CoordinationV1().Leases(l.o.Namespace)
		created, err := leases.Create(ctx, lease, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// Left by this run's earlier holder whose delete failed: take it over.
			var cur *coordinationv1.Lease
			if cur, err = leases.Get(ctx, lease.Name, metav1.GetOptions{}); err == nil {
				cur.Spec = lease.Spec
				cur.Annotations = lease.Annotations
				created, err = leases.Update(ctx, cur, metav1.UpdateOptions{})
			}
		}
		if err != nil {
			if apierrors.IsForbidden(err) {
				return nil, nil, fmt.Errorf("%w: creating the run's Lease %s/%s: %s (RBAC: create, get, update and delete on leases.coordination.k8s.io in namespace %q)",
					nodeexec.ErrForbidden, l.o.Namespace, lease.Name, err.Error(), l.o.Namespace)
			}
			return nil, nil, fmt.Errorf("creating the run's Lease %s/%s: %w", l.o.Namespace, lease.Name, err)
		}
		l.setLease(created)
		rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		l.stop, l.done = cancel, make(chan struct{})
		go l.renewLoop(rctx, l.done)
	}
	l.refs++
	l.leaseMu.Lock()
	lease := l.lease.DeepCopy()
	l.leaseMu.Unlock()
	var once sync.Once
	return lease, func() { once.Do(func() { l.release(ctx) }) }, nil
}

func (l *runLease) setLease(lease *coordinationv1.Lease) {
	l.leaseMu.Lock()
	defer l.leaseMu.Unlock()
	l.lease = lease
}

func (l *runLease) expiry(renewed time.Time) string {
	return renewed.Add(l.o.Duration).UTC().Format(time.RFC3339)
}

func (l *runLease) release(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refs--
	if l.refs > 0 {
		return
	}
	l.stop()
	<-l.done
	l.leaseMu.Lock()
	lease := l.lease
	l.lease = nil
	l.leaseMu.Unlock()
	l.stop, l.done = nil, nil
	log := logr.FromContextOrDiscard(ctx)
	// Past its expiry the Lease is the collector's; until then (and for at
	// most CancelCleanupBudget) keep trying.
	until := lease.Spec.RenewTime.Add(l.o.Duration)
	if b := l.o.Clock.Now().Add(CancelCleanupBudget); b.Before(until) {
		until = b
	}
	err := retryUntil(context.WithoutCancel(ctx), l.o.Clock, until, func(ctx context.Context) error {
		err := l.o.Client.CoordinationV1().Leases(l.o.Namespace).Delete(ctx, lease.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &lease.UID},
		})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	})
	if err != nil {
		log.Info("could not delete the run's Lease; it expires and is collected", "lease", l.o.Namespace+"/"+lease.Name, "err", err)
	}
}

// renewLoop renews the Lease every RenewInterval until ctx ends.
func (l *runLease) renewLoop(ctx context.Context, done chan struct{}) {
	defer close(done)
	log := logr.FromContextOrDiscard(ctx)
	t := l.o.Clock.NewTicker(l.o.RenewInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if err := l.renew(ctx); err != nil && ctx.Err() == nil {
			log.V(1).Info("renewing the run's Lease failed; retried at the next interval", "lease", l.o.Namespace+"/"+l.Name(), "err", err)
		}
	}
}

// renew writes a new renewTime, re-reading the Lease on a conflict.
func (l *runLease) renew(ctx context.Context) error {
	l.leaseMu.Lock()
	cur := l.lease.DeepCopy()
	l.leaseMu.Unlock()
	leases := l.o.Client.CoordinationV1().Leases(l.o.Namespace)
	for range 2 {
		now := metav1.NewMicroTime(l.o.Clock.Now())
		cur.Spec.RenewTime = &now
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		cur.Annotations[nodeexec.AnnotationDeadline] = l.expiry(now.Time)
		rctx, cancel := context.WithTimeout(ctx, l.o.RenewInterval)
		updated, err := leases.Update(rctx, cur, metav1.UpdateOptions{})
		cancel()
		if err == nil {
			l.leaseMu.Lock()
			if l.lease != nil {
				l.lease = updated
			}
			l.leaseMu.Unlock()
			return nil
		}
		if !apierrors.IsConflict(err) {
			return err
		}
		rctx, cancel = context.WithTimeout(ctx, l.o.RenewInterval)
		cur, err = leases.Get(rctx, l.Name(), metav1.GetOptions{})
		cancel()
		if err != nil {
			return err
		}
	}
	return errors.New("conflicting updates")
}

// OwnedBy returns a copy of pod labelled with the Lease's name (LabelLease)
// and owned by it (an ownerReference without blockOwnerDeletion, so no
// extra RBAC is needed): deleting the Lease deletes the pod. Pure.
func OwnedBy(pod *corev1.Pod, lease *coordinationv1.Lease) *corev1.Pod {
	pod = pod.DeepCopy()
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[LabelLease] = lease.Name
	pod.OwnerReferences = append(pod.OwnerReferences, metav1.OwnerReference{
		APIVersion: coordinationv1.SchemeGroupVersion.String(),
		Kind:       "Lease",
		Name:       lease.Name,
		UID:        lease.UID,
	})
	return pod
}

// LeaseExpired reports whether lease was last renewed more than its
// leaseDurationSeconds before now (a Lease without a renew or acquire time,
// or without a duration, counts as expired).
func LeaseExpired(lease *coordinationv1.Lease, now time.Time) bool {
	t := lease.Spec.RenewTime
	if t == nil {
		t = lease.Spec.AcquireTime
	}
	if t == nil || lease.Spec.LeaseDurationSeconds == nil {
		return true
	}
	return now.After(t.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second))
}

// Delete backoff: the first pause, its growth and cap, and its jitter.
const (
	deleteBackoffInitial = 200 * time.Millisecond
	deleteBackoffMax     = 5 * time.Second
)

// retriable: errors that a later attempt may not meet (the API server
// restarting or overloaded, a broken connection, a timeout), as opposed to
// a refusal (RBAC, admission, a bad request) that would only repeat.
func retriable(err error) bool {
	switch {
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err), apierrors.IsBadRequest(err),
		apierrors.IsInvalid(err), apierrors.IsMethodNotSupported(err), apierrors.IsNotAcceptable(err),
		apierrors.IsUnsupportedMediaType(err):
		return false
	}
	return true
}

// retryUntil calls f until it returns nil or an error that is not
// retriable, with a capped, jittered
// exponential backoff (200ms doubling to 5s, +10%), each attempt bounded by
// the backoff cap plus 10 s, and gives up with f's last error when the
// deadline passes or ctx ends.
func retryUntil(ctx context.Context, clk clock.Clock, deadline time.Time, f func(context.Context) error) error {
	b := wait.Backoff{Duration: deleteBackoffInitial, Factor: 2, Jitter: 0.1, Steps: int(^uint(0) >> 1), Cap: deleteBackoffMax}
	for {
		actx, cancel := context.WithTimeout(ctx, deleteBackoffMax+10*time.Second)
		err := f(actx)
		cancel()
		if err == nil || !retriable(err) {
			return err
		}
		d := b.Step()
		if !clk.Now().Add(d).Before(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-clk.After(d):
		}
	}
}
