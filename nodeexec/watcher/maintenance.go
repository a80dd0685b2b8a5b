package watcher

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/drain"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// defaultDrainTimeout bounds a drain when spec.maintenance.drain.timeout
// (or spec.onFailure.drainTimeout) is not set.
const defaultDrainTimeout = v1alpha1.DefaultDrainTimeout

// needsPreparation reports whether the run of ns at hash on a node whose
// state is s must first take the node out of service (spec.maintenance
// cordon and drain): not when s is already Drained for hash.
func needsPreparation(ns *v1alpha1.NodeScript, hash string, s nodeState) bool {
	m := ns.Spec.Maintenance
	if m == nil || !m.Cordon {
		return false
	}
	return !(s.Hash == hash && s.Phase == v1alpha1.PhaseRunning && s.Maintenance == v1alpha1.MaintenanceDrained)
}

// prepare takes node n out of service before the run of ns at hash (s is
// its state): it cordons the node (recording CordonedByUs unless someone
// else had cordoned it), records the run Running with Maintenance Draining,
// and starts the drain in the background (drainBefore); with no drain, the
// node is Drained at once and the run pod is created. Attempts are kept:
// the run pod's attempt is counted when it is created.
func (c *controller) prepare(ctx context.Context, ns *v1alpha1.NodeScript, hash string, n *corev1.Node, s nodeState, now time.Time) error {
	if !beforeRunPassed(s, hash) {
		if pulling, err := c.prePull(ctx, ns, hash, n, s, now); pulling || err != nil {
			return err // spec.maintenance.prePull: the cordon waits for the image (prepull.go)
		}
		if held, err := c.preNodeHook(ctx, ns, hash, n, s, now); held || err != nil {
			return err // spec.hooks.preNode: the cordon waits for it (hooks.go)
		}
		if waiting, err := c.beforeRun(ctx, ns, hash, n, s, now); waiting || err != nil {
			return err // spec.hooks.beforeRun: the cordon waits for the annotations (annotations.go)
		}
	}
	next := nodeState{
		Hash: hash, Phase: v1alpha1.PhaseRunning, Since: now, Maintenance: v1alpha1.MaintenanceDraining, BootID: n.Status.NodeInfo.BootID,
		CordonedByUs: s.CordonedByUs, Cordoned: true,
	}
	if s.Hash == hash {
		next.Attempts, next.AttemptsBefore, next.Checked = s.Attempts, s.AttemptsBefore, s.Checked
	}
	held, err := c.silencesBefore(ctx, ns, hash, n, s, now) // spec.maintenance.silences, before the cordon
	if err != nil {
		return c.silenceFailed(ctx, ns, hash, n, s, err, now)
	}
	next.Silences = held
	if !n.Spec.Unschedulable {
		if err := c.cordon(ctx, n, true); err != nil {
			c.expireSilences(ctx, ns, n, held, now)
			return err
		}
		next.CordonedByUs = true
		c.events.Eventf(n, corev1.EventTypeNormal, v1alpha1.ReasonCordoned, "nodescript %s: cordoned for maintenance before the run (spec.maintenance)", ns.Name)
	}
	if ns.Spec.Maintenance.Drain == nil {
		next.Maintenance = v1alpha1.MaintenanceDrained
		if err := c.w.writeState(ctx, ns, n, next); err != nil {
			return err
		}
		return c.start(ctx, ns, hash, n, next, v1alpha1.ActionRun, now)
	}
	if err := c.w.writeState(ctx, ns, n, next); err != nil {
		return err
	}
	c.drainBefore(ctx, ns, n)
	return nil
}

// drainBefore drains node n for the run of ns (spec.maintenance.drain)
// in the background, once at a time per node, and records the outcome on
// the node's current state: Drained (the next reconcile creates the run
// pod), or, for a drain that did not finish, what
// spec.maintenance.drain.onTimeout says (drains.go): Retry, an
// infrastructure failure with reason DrainFailed (counted as an attempt),
// retried under spec.retry after its backoff; Force (forceDrain) first
// deletes the pods left; Skip (skipDrain) uncordons and makes the node
// Pending again. ns is looked at again when it ends.
func (c *controller) drainBefore(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node) {
	if !c.w.claim(c.w.draining, n.Name) {
		return
	}
	o := drainOptionsOf(ns)
	go func() {
		defer func() {
			c.w.release(c.w.draining, n.Name)
			c.queue.Add(ns.Name)
		}()
		err := runDrain(ctx, c.w.o.Client, n.Name, o)
		err = c.forceDrain(ctx, ns, n, o, err) // spec.maintenance.drain.onTimeout: Force
		if err != nil && ctx.Err() != nil {
			return // stopped: drained again by the next watcher
		}
		cur, gerr := c.nodes.Get(n.Name)
		if gerr != nil {
			return // the node is gone
		}
		s, ok := c.w.state(ctx, ns.Name, cur)
		if !ok || s.Phase != v1alpha1.PhaseRunning || s.Maintenance != v1alpha1.MaintenanceDraining {
			return
		}
		now := c.w.o.Clock.Now()
		if err == nil {
			s.Maintenance = v1alpha1.MaintenanceDrained
			c.w.learn(ns, v1alpha1.StepDrain, now.Sub(s.Since)) // status.durations (forecast.go)
			c.events.Eventf(n, corev1.EventTypeNormal, v1alpha1.ReasonDrained, "nodescript %s: drained for maintenance before the run", ns.Name)
		} else if !c.skipDrain(ctx, ns, cur, &s, err, now) { // onTimeout: Skip
			msg := tail("drain failed: "+err.Error(), 256)
			// The drain counts as an attempt, so that spec.retry.limit bounds
			// a drain that never finishes.
			s.Attempts++
			s.Phase, s.Maintenance, s.Infrastructure, s.Reason, s.Message, s.Since = v1alpha1.PhaseFailed, "", true, v1alpha1.ReasonDrainFailed, msg, now
			t := now.Add(backoff(ns, s.Attempts))
			s.NextRetry = &t
			c.events.Eventf(n, corev1.EventTypeWarning, v1alpha1.ReasonDrainFailed, "nodescript %s: before the run: %s", ns.Name, msg)
		}
		if err := c.w.writeState(ctx, ns, cur, s); err != nil {
			logr.FromContextOrDiscard(ctx).Error(err, "recording the drain", "node", n.Name)
		}
	}()
}

// drainOptions are kubectl drain's flags the watcher sets.
type drainOptions struct {
	Timeout            time.Duration
	PodSelector        string // "" for every pod
	DeleteEmptyDirData bool
	GracePeriodSeconds int  // -1: each pod's own
	Force              bool // delete the pods instead of evicting them (onTimeout: Force)
}

// runDrain evicts node's pods with kubectl's drain helper (the eviction
// API, so PodDisruptionBudgets are respected; DaemonSet pods ignored;
// nodeexec's own pods never evicted, whatever o.PodSelector says). The
// node must be cordoned. RBAC: list pods, create pods/eviction, get
// daemonsets (and get pods to wait for them to go); with o.Force, delete
// pods instead of create pods/eviction.
func runDrain(ctx context.Context, client kubernetes.Interface, node string, o drainOptions) error {
	h := drainHelper(ctx, client, o)
	if err := drain.RunNodeDrain(h, node); err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	return nil
}

// claim records node in set (draining or rebooting: work going on the
// node in a goroutine of this process) and reports whether it was not
// there already: one such piece of work at a time per node.
func (w *Watcher) claim(set map[string]bool, node string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if set[node] {
		return false
	}
	set[node] = true
	return true
}

// release removes node from set (see claim).
func (w *Watcher) release(set map[string]bool, node string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(set, node)
}

// drainGoing reports whether node is being drained by this process.
func (w *Watcher) drainGoing(node string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.draining[node]
}
