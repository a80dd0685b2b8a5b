package watcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
	"k8s.io/kubectl/pkg/drain"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// Bounds of the drain checks (spec.maintenance.drain).
const (
	// maxDrainChecks is the most nodes one reconcile checks (each check is
	// one pod list and one dry-run eviction per pod until one is refused):
	// the nodes past it wait for the next reconcile.
	maxDrainChecks = 16
	// DrainRecheck is how long a node found DrainBlocked stays so without
	// another check (its verdict is kept in memory that long), and how soon
	// a NodeScript with a DrainBlocked node is looked at again.
	DrainRecheck = 15 * time.Second
)

// drainVerdict is a node's last drain check that found it blocked.
type drainVerdict struct {
	hash, why string
	at        time.Time
}

// drainHelper is kubectl's drain helper as the watcher configures it for
// node drains (runDrain) and their checks (checkDrain): the pods matching
// o.PodSelector, never nodeexec's own, DaemonSet pods ignored.
func drainHelper(ctx context.Context, client kubernetes.Interface, o drainOptions) *drain.Helper {
	sel := nodeexec.LabelManagedBy + "!=" + nodeexec.ManagedByValue
	if o.PodSelector != "" {
		sel = o.PodSelector + "," + sel
	}
	return &drain.Helper{
		Ctx: ctx, Client: client, GracePeriodSeconds: o.GracePeriodSeconds, IgnoreAllDaemonSets: true,
		DeleteEmptyDirData: o.DeleteEmptyDirData, Timeout: o.Timeout, Out: io.Discard, ErrOut: io.Discard,
		PodSelector: sel, DisableEviction: o.Force, EvictErrorRetryDelay: evictRetryDelay(o.Timeout),
	}
}

// evictRetryDelay is the pause before an eviction refused with 429 (a
// PodDisruptionBudget) is asked again within a drain of timeout: a tenth
// of it, between 50ms and 5s (kubectl drain's pause); 5s for no timeout.
// The drain helper's own default, 0, would ask again at once, in a loop.
func evictRetryDelay(timeout time.Duration) time.Duration {
	if timeout <= 0 {
		return 5 * time.Second
	}
	return min(max(timeout/10, 50*time.Millisecond), 5*time.Second)
}

// drainOptionsOf are the drain options of ns's spec.maintenance.drain
// (which must be set).
func drainOptionsOf(ns *v1alpha1.NodeScript) drainOptions {
	d := v1alpha1.Defaulted(ns).Spec.Maintenance.Drain
	o := drainOptions{Timeout: d.Timeout.Duration, PodSelector: d.PodSelector, DeleteEmptyDirData: d.DeleteEmptyDirData, GracePeriodSeconds: -1}
	if d.GracePeriodSeconds != nil {
		o.GracePeriodSeconds = int(*d.GracePeriodSeconds)
	}
	return o
}

// checkDrain tells whether node's drain under o would be refused now,
// without evicting anything: it lists the pods the drain would evict
// (drain.Helper.GetPodsForDeletion, the drain's own filters) and makes a
// server-side dry-run eviction (policy/v1, dryRun: All) of each, in
// order, until one is refused. It returns "" when every one would be
// evicted; else why not: "PDB NAMESPACE/NAME blocks pod NAMESPACE/NAME"
// for an eviction refused with 429 (the PodDisruptionBudgets of the pod's
// namespace whose selector matches it are named), "eviction of pod
// NAMESPACE/NAME refused: ..." for another refusal, or "drain would fail:
// ..." when the drain's filters refuse a pod (local storage, no
// controller). err is set when the check itself failed (an API error):
// the caller counts the node blocked. RBAC: list pods (cluster-wide), get
// daemonsets, create pods/eviction, list poddisruptionbudgets.
func checkDrain(ctx context.Context, client kubernetes.Interface, node string, o drainOptions) (string, error) {
	h := drainHelper(ctx, client, o)
	list, errs := h.GetPodsForDeletion(node)
	if list == nil {
		return "", fmt.Errorf("node %s: listing the pods to drain: %w", node, errors.Join(errs...))
	}
	if len(errs) > 0 {
		return "drain would fail: " + errors.Join(errs...).Error(), nil
	}
	h.DryRunStrategy = cmdutil.DryRunServer
	for _, pod := range list.Pods() {
		err := h.EvictPod(pod, policyv1.SchemeGroupVersion)
		switch {
		case err == nil, apierrors.IsNotFound(err):
			continue
		case apierrors.IsTooManyRequests(err):
			pdbs, lerr := matchingPDBs(ctx, client, &pod)
			if lerr != nil {
				return "", lerr
			}
			if len(pdbs) == 0 {
				return fmt.Sprintf("eviction of pod %s/%s refused: %v", pod.Namespace, pod.Name, err), nil
			}
			return fmt.Sprintf("PDB %s blocks pod %s/%s", strings.Join(pdbs, ", "), pod.Namespace, pod.Name), nil
		case apierrors.IsInternalError(err) && strings.Contains(err.Error(), "PodDisruptionBudget"):
			// More than one PodDisruptionBudget: the eviction API refuses.
			pdbs, lerr := matchingPDBs(ctx, client, &pod)
			if lerr != nil {
				return "", lerr
			}
			return fmt.Sprintf("PDB %s blocks pod %s/%s (more than one budget: the eviction API refuses)", strings.Join(pdbs, ", "), pod.Namespace, pod.Name), nil
		default:
			return "", fmt.Errorf("node %s: dry-run eviction of pod %s/%s: %w", node, pod.Namespace, pod.Name, err)
		}
	}
	return "", nil
}

// matchingPDBs names ("NAMESPACE/NAME", sorted) the PodDisruptionBudgets
// of pod's namespace whose selector matches it (RBAC: list
// poddisruptionbudgets).
func matchingPDBs(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod) ([]string, error) {
	pdbs, err := client.PolicyV1().PodDisruptionBudgets(pod.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the PodDisruptionBudgets of namespace %s: %w", pod.Namespace, err)
	}
	var names []string
	for _, p := range pdbs.Items {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil || p.Spec.Selector == nil || sel.Empty() {
			continue // a nil or empty selector matches nothing under policy/v1's eviction
		}
		if sel.Matches(labels.Set(pod.Labels)) {
			names = append(names, p.Namespace+"/"+p.Name)
		}
	}
	slices.Sort(names)
	return names, nil
}

// decideDrainable is decideUnblocked with the drain checks of
// spec.maintenance.drain: each node Decide would start whose run cordons
// and drains it next (not a checkScript's check) is checked (checkDrain,
// or its verdict of less than DrainRecheck ago); a node whose drain would
// be refused, or whose check failed, is marked Blocked in nodes and
// decideUnblocked asked again, so its slot goes to the next node; at most
// MaxDrainChecks nodes are checked, and the start list is cut to the nodes
// checked. d.DrainBlocked lists the blocked nodes ("NODE: WHY", sorted),
// with those ns's status lists that were not checked this time and still
// wait to run; a node newly blocked gets an Event (on it and on ns). With
// spec.maintenance.maxBlockedNodes reached, the rollout is Halted (reason
// DrainBlocked) and starts nothing, until fewer are blocked. It also
// returns when to look again: DrainRecheck from now while a node is
// blocked, or the NextRetry of a node a skipped drain sent back to
// Pending (zero: no need). Without spec.maintenance.drain it is
// decideUnblocked.
func (c *controller) decideDrainable(ctx context.Context, ns *v1alpha1.NodeScript, nodes []rolloutNode, cached nodeSet, now time.Time) (decision, time.Time, error) {
	d, err := c.decideUnblocked(ctx, ns, nodes, cached, now)
	m := ns.Spec.Maintenance
	if err != nil || m == nil || m.Drain == nil {
		c.w.metrics.drainBlocked.DeleteLabelValues(ns.Name)
		return d, time.Time{}, err
	}
	recheck := pendingRetry(nodes, d.Hash, now)
	dc := &drainChecks{index: map[string]int{}, checked: map[string]bool{}, blocked: map[string]string{}}
	for i, n := range nodes {
		dc.index[n.Name] = i
	}
	if d, err = c.checkDrains(ctx, ns, d, nodes, cached, dc, now); err != nil {
		return decision{}, time.Time{}, err
	}
	d.Start = slices.DeleteFunc(d.Start, func(node string) bool { return !dc.checked[node] })
	// The nodes recorded blocked that were not checked this time (no slot
	// for them now) stay so while they still wait to run.
	for _, e := range ns.Status.DrainBlocked {
		node, why, _ := strings.Cut(e, ": ")
		i, ok := dc.index[node]
		if _, seen := dc.blocked[node]; ok && !seen && !dc.checked[node] && waitsToRun(nodes[i], d.Hash) {
			dc.blocked[node] = why
		}
	}
	d.DrainBlocked = c.drainBlockedList(ns, dc.blocked, cached)
	if len(d.DrainBlocked) > 0 {
		recheck = earliest(recheck, now.Add(DrainRecheck))
	}
	c.w.metrics.drainBlocked.WithLabelValues(ns.Name).Set(float64(len(d.DrainBlocked)))
	haltOnBlocked(&d, m.MaxBlockedNodes)
	return d, recheck, nil
}

// pendingRetry is the earliest NextRetry after now of the nodes Pending
// at hash (a skipped drain sent them back), zero when none.
func pendingRetry(nodes []rolloutNode, hash string, now time.Time) time.Time {
	var recheck time.Time
	for _, n := range nodes {
		if t := n.State.NextRetry; n.State.Hash == hash && n.State.Phase == v1alpha1.PhasePending && t != nil && t.After(now) {
			recheck = earliest(recheck, *t)
		}
	}
	return recheck
}

// drainChecks is decideDrainable's record: nodes' index by name, the
// nodes checked this time, the blocked ones and why.
type drainChecks struct {
	index   map[string]int
	checked map[string]bool
	blocked map[string]string
}

// checkDrains checks the drain of each node d starts whose next step is
// the cordon and drain (at most MaxDrainChecks), marks the blocked ones
// in nodes and decides again while a check found a node newly blocked.
func (c *controller) checkDrains(ctx context.Context, ns *v1alpha1.NodeScript, d decision, nodes []rolloutNode, cached nodeSet, dc *drainChecks, now time.Time) (decision, error) {
	// needsDrain: the node's next step is the cordon and drain, not a check.
	needsDrain := func(node string) bool {
		s := nodes[dc.index[node]].State
		if ns.Spec.CheckScript != "" && !(s.Hash == d.Hash && s.Checked) {
			return false
		}
		return needsPreparation(ns, d.Hash, s)
	}
	for checks := 0; ; {
		var fresh []string
		for _, node := range d.Start {
			if !dc.checked[node] {
				fresh = append(fresh, node)
			}
		}
		if len(fresh) == 0 || checks >= maxDrainChecks {
			return d, nil
		}
		newly := false
		for _, node := range fresh {
			if !needsDrain(node) {
				dc.checked[node] = true
				continue
			}
			if checks >= maxDrainChecks {
				break
			}
			checks++
			dc.checked[node] = true
			if why := c.drainVerdict(ctx, ns, d.Hash, node, now); why != "" {
				nodes[dc.index[node]].Blocked = true
				dc.blocked[node] = why
				newly = true
			}
		}
		if !newly {
			return d, nil
		}
		var err error
		if d, err = c.decideUnblocked(ctx, ns, nodes, cached, now); err != nil {
			return decision{}, err
		}
	}
}

// drainBlockedList is blocked as Decision.DrainBlocked ("NODE: WHY",
// sorted; nil when empty); a node newly blocked gets an Event on it and on
// ns.
func (c *controller) drainBlockedList(ns *v1alpha1.NodeScript, blocked map[string]string, cached nodeSet) []string {
	list := make([]string, 0, len(blocked))
	for node, why := range blocked {
		e := node + ": " + why
		list = append(list, e)
		if n := cached.byName[node]; n != nil && !slices.Contains(ns.Status.DrainBlocked, e) {
			msg := fmt.Sprintf("nodescript %s: node %s not cordoned: its drain would not finish: %s; checked again every %s", ns.Name, node, why, DrainRecheck)
			c.events.Event(n, corev1.EventTypeWarning, v1alpha1.ReasonDrainBlocked, msg)
			c.events.Event(ns, corev1.EventTypeWarning, v1alpha1.ReasonDrainBlocked, msg)
		}
	}
	slices.Sort(list)
	if len(list) == 0 {
		return nil
	}
	return list
}

// haltOnBlocked halts d (reason HaltDrainBlocked), starting nothing, when
// limit (spec.maintenance.maxBlockedNodes; 0: none) nodes or more are
// blocked and the rollout is neither Complete nor Halted.
func haltOnBlocked(d *decision, limit int32) {
	if limit > 0 && len(d.DrainBlocked) >= int(limit) && d.Stage != v1alpha1.StageComplete && d.Stage != v1alpha1.StageHalted {
		d.Stage, d.Start, d.Verify, d.Hold = v1alpha1.StageHalted, nil, nil, ""
		d.HaltReason = fmt.Sprintf("%s: %d nodes cannot be drained, spec.maintenance.maxBlockedNodes is %d (%s)", v1alpha1.HaltDrainBlocked, len(d.DrainBlocked), limit, strings.Join(d.DrainBlocked[:min(len(d.DrainBlocked), 3)], "; "))
	}
}

// waitsToRun reports whether n, selected, still waits to run hash (Pending,
// or a failure to be retried): a blocked record of it still holds.
func waitsToRun(n rolloutNode, hash string) bool {
	s := n.State
	return !n.Ignored && (s.Hash != hash || s.Phase == v1alpha1.PhasePending || (s.Phase == v1alpha1.PhaseFailed && s.Infrastructure))
}

// drainVerdict is why node's drain for ns at hash would be refused ("":
// it would not): the verdict of a check less than DrainRecheck old, else a
// new check (checkDrain; a check that fails counts as refused, with its
// error). Counted in nodeexec_watcher_drain_checks_total.
func (c *controller) drainVerdict(ctx context.Context, ns *v1alpha1.NodeScript, hash, node string, now time.Time) string {
	c.w.mu.Lock()
	v, ok := c.w.drainVerdicts[ns.Name][node]
	c.w.mu.Unlock()
	if ok && v.hash == hash && now.Sub(v.at) < DrainRecheck && !now.Before(v.at) {
		return v.why
	}
	why, err := checkDrain(ctx, c.w.o.Client, node, drainOptionsOf(ns))
	result := "passed"
	switch {
	case err != nil:
		why, result = "drain check failed: "+tail(err.Error(), 256), "error"
		logr.FromContextOrDiscard(ctx).Error(err, "drain check", "node", node)
	case why != "":
		result = "blocked"
	}
	c.w.metrics.drainChecks.WithLabelValues(ns.Name, result).Inc()
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	if c.w.drainVerdicts == nil {
		c.w.drainVerdicts = map[string]map[string]drainVerdict{}
	}
	if c.w.drainVerdicts[ns.Name] == nil {
		c.w.drainVerdicts[ns.Name] = map[string]drainVerdict{}
	}
	if why == "" {
		delete(c.w.drainVerdicts[ns.Name], node)
	} else {
		c.w.drainVerdicts[ns.Name][node] = drainVerdict{hash: hash, why: why, at: now}
	}
	return why
}

// skippedUntil reports whether s, a node's state for hash, is Pending
// after a skipped drain whose NextRetry is after now: not yet due.
func skippedUntil(s nodeState, hash string, now time.Time) bool {
	return s.Hash == hash && s.Phase == v1alpha1.PhasePending && s.NextRetry != nil && now.Before(*s.NextRetry)
}

// skipDrain applies spec.maintenance.drain.onTimeout: Skip to node n,
// whose drain for ns failed with err (s is its state, Draining): it
// uncordons the node when the watcher cordoned it, and makes s Pending
// (reason DrainSkipped, the error in Message) with NextRetry after
// spec.retry.maxBackoff (default 5m): not an attempt, not a failure. It
// reports false, changing nothing, when onTimeout is not Skip or the
// uncordon failed (then the drain is recorded failed as under Retry, and
// the failure policy's uncordon takes over).
func (c *controller) skipDrain(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, s *nodeState, err error, now time.Time) bool {
	if ns.Spec.Maintenance.Drain.OnTimeoutOrDefault() != v1alpha1.DrainOnTimeoutSkip {
		return false
	}
	if s.CordonedByUs && n.Spec.Unschedulable {
		if uerr := c.cordon(ctx, n, false); uerr != nil {
			logr.FromContextOrDiscard(ctx).Error(uerr, "uncordoning after a skipped drain", "node", n.Name)
			return false
		}
		c.events.Eventf(n, corev1.EventTypeNormal, v1alpha1.ReasonUncordoned, "nodescript %s: uncordoned (the watcher had cordoned it): its drain was skipped", ns.Name)
	}
	delay := skipDelay(ns)
	t := now.Add(delay)
	msg := tail("drain skipped (spec.maintenance.drain.onTimeout: Skip): "+err.Error(), 512)
	*s = nodeState{
		Hash: s.Hash, Phase: v1alpha1.PhasePending, Attempts: s.Attempts, AttemptsBefore: s.AttemptsBefore, Checked: s.Checked,
		Since: now, Reason: v1alpha1.ReasonDrainSkipped, Message: msg, NextRetry: &t,
	}
	text := fmt.Sprintf("nodescript %s: node %s: %s; uncordoned, tried again after %s", ns.Name, n.Name, msg, delay)
	c.events.Event(n, corev1.EventTypeWarning, v1alpha1.ReasonDrainSkipped, text)
	c.events.Event(ns, corev1.EventTypeWarning, v1alpha1.ReasonDrainSkipped, text)
	c.w.metrics.drainTimeouts.WithLabelValues(ns.Name, v1alpha1.DrainOnTimeoutSkip).Inc()
	return true
}

// skipDelay is how long a node whose drain was skipped waits before it is
// tried again: spec.retry.maxBackoff, default 5m.
func skipDelay(ns *v1alpha1.NodeScript) time.Duration {
	if b := ns.Spec.Retry.MaxBackoff; b != nil {
		return b.Duration
	}
	return v1alpha1.DefaultMaxBackoff
}

// forceDrain applies spec.maintenance.drain.onTimeout: Force to node n,
// whose drain under o for ns failed with first: it deletes the pods the
// drain would evict (drain.Helper with DisableEviction: their
// PodDisruptionBudgets are not asked) and waits for them to go, within
// o.Timeout again; Events (DrainForced, on the node and ns) name the pods.
// It returns nil once they are gone, else the error. With onTimeout not
// Force, it returns first. RBAC: delete pods (cluster-wide).
func (c *controller) forceDrain(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, o drainOptions, first error) error {
	if first == nil || ctx.Err() != nil || ns.Spec.Maintenance.Drain.OnTimeoutOrDefault() != v1alpha1.DrainOnTimeoutForce {
		return first
	}
	var names []string
	if list, _ := drainHelper(ctx, c.w.o.Client, o).GetPodsForDeletion(n.Name); list != nil {
		for _, p := range list.Pods() {
			names = append(names, p.Namespace+"/"+p.Name)
		}
	}
	text := fmt.Sprintf("nodescript %s: node %s: drain did not finish (%s); forced (spec.maintenance.drain.onTimeout: Force): deleting pod(s) %s instead of evicting them",
		ns.Name, n.Name, tail(first.Error(), 256), strings.Join(names[:min(len(names), maxEventNodes)], ", "))
	c.events.Event(n, corev1.EventTypeWarning, v1alpha1.ReasonDrainForced, text)
	c.events.Event(ns, corev1.EventTypeWarning, v1alpha1.ReasonDrainForced, text)
	c.w.metrics.drainTimeouts.WithLabelValues(ns.Name, v1alpha1.DrainOnTimeoutForce).Inc()
	o.Force = true
	if err := runDrain(ctx, c.w.o.Client, n.Name, o); err != nil {
		return fmt.Errorf("forced: %w (after %w)", err, first)
	}
	return nil
}

// drainMetricSet are the drain checks' metrics (part of metrics).
type drainMetricSet struct {
	drainBlocked               *prometheus.GaugeVec
	drainChecks, drainTimeouts *prometheus.CounterVec
}

// drainMetrics makes the drain checks' metrics of m.
func (m *metrics) drainMetrics() []prometheus.Collector {
	m.drainBlocked = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nodeexec_watcher_drain_blocked_nodes",
		Help: "Selected nodes per NodeScript not cordoned because their drain would be refused (status.drainBlocked).",
	}, []string{"nodescript"})
	m.drainChecks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeexec_watcher_drain_checks_total",
		Help: "Drain checks (dry-run evictions of a node's pods) by NodeScript and result (passed, blocked, error).",
	}, []string{"nodescript", "result"})
	m.drainTimeouts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeexec_watcher_drain_timeouts_total",
		Help: "Drains that did not finish, by NodeScript and what spec.maintenance.drain.onTimeout did (Skip, Force; Retry counts as a DrainFailed run).",
	}, []string{"nodescript", "onTimeout"})
	return []prometheus.Collector{m.drainBlocked, m.drainChecks, m.drainTimeouts}
}
