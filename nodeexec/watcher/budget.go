package watcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// The other maintainers' marks the budget count reads (see BudgetCount).
const (
	// DefaultKuredDaemonSet is kured's DaemonSet by default (its --ds-namespace and --ds-name).
	DefaultKuredDaemonSet = "kube-system/kured"
)

// disruptionTaints are the taint keys of a node another tool is taking
// away: cluster-autoscaler's scale-down, Karpenter's disruption (v1, and
// the v1beta1 key before it).
func disruptionTaints() []string {
	return []string{"ToBeDeletedByClusterAutoscaler", "karpenter.sh/disrupted", "karpenter.sh/disruption"}
}

// planResource is system-upgrade-controller's Plan: status.applying lists
// the nodes it is upgrading.
var planResource = runtimeGVR("upgrade.cattle.io", "v1", "plans")

// budgetRecheck is how soon a NodeScript waiting for room on its budget
// is looked at again (besides node and NodeScript changes).
const budgetRecheck = 5 * time.Second

// budgetSources are the other maintainers' marks a budget count reads
// beside the nodes: kured's lock holders and the applying SUC Plans.
type budgetSources struct {
	// KuredHolders are the node names holding kured's lock.
	KuredHolders map[string]bool
	// Plans maps a node name to the Plans applying on it.
	Plans map[string][]string
}

// holder is a NodeScript out of service on a node, or running there.
type holder struct {
	// Name of the NodeScript.
	Name string
	// Disrupts: its run holds the node out of service (maintenance, or reboot).
	Disrupts bool
	// Exclusive is the NodeScript's spec.exclusive.
	Exclusive bool
}

// budgetCount is the count of one budget's nodes: Reasons has each selected
// node out of service, with why.
type budgetCount struct {
	Selected, Max int
	Reasons       map[string][]string
}

// Unavailable is how many selected nodes are out of service.
func (b budgetCount) Unavailable() int { return len(b.Reasons) }

// Room is how many more nodes may go out of service (0 or more).
func (b budgetCount) Room() int { return max(b.Max-len(b.Reasons), 0) }

// maxUnavailable is spec.maxUnavailable as a count of selected nodes: a
// percentage rounded down, at least 1 (so that a budget over few nodes
// still lets one go at a time).
func maxUnavailable(v intstr.IntOrString, selected int) int {
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, selected, false)
	if err != nil {
		return 1
	}
	return max(n, 1)
}

// countBudget counts budget b over nodes: each node b selects is out of
// service when it is unschedulable, not Ready (False or Unknown), holds
// kured's lock or carries kured's reboot annotation, is under an applying
// Plan, carries a disruption taint, or a NodeScript in holders[node]
// disrupts it. It is a pure function.
func countBudget(b *v1alpha1.MaintenanceBudget, nodes []*corev1.Node, src budgetSources, holders map[string][]holder) (budgetCount, error) {
	sel, err := metav1.LabelSelectorAsSelector(&b.Spec.NodeSelector)
	if err != nil {
		return budgetCount{}, fmt.Errorf("maintenancebudget %s: spec.nodeSelector: %w", b.Name, err)
	}
	c := budgetCount{Reasons: map[string][]string{}}
	for _, n := range nodes {
		if !sel.Matches(labels.Set(n.Labels)) {
			continue
		}
		c.Selected++
		var why []string
		if n.Spec.Unschedulable {
			why = append(why, v1alpha1.BudgetUnschedulable)
		}
		if ready, _ := nodeReady(n); !ready {
			why = append(why, v1alpha1.BudgetNotReady)
		}
		if src.KuredHolders[n.Name] {
			why = append(why, v1alpha1.BudgetKuredLock)
		}
		if _, ok := n.Annotations[v1alpha1.KuredRebootAnnotation]; ok {
			why = append(why, v1alpha1.BudgetKuredReboot)
		}
		for _, p := range src.Plans[n.Name] {
			why = append(why, v1alpha1.BudgetPlanPrefix+p)
		}
		for _, t := range n.Spec.Taints {
			if slices.Contains(disruptionTaints(), t.Key) && !slices.Contains(why, v1alpha1.BudgetTaintPrefix+t.Key) {
				why = append(why, v1alpha1.BudgetTaintPrefix+t.Key)
			}
		}
		for _, h := range holders[n.Name] {
			if h.Disrupts {
				why = append(why, v1alpha1.BudgetNodeScriptPrefix+h.Name)
			}
		}
		if len(why) > 0 {
			c.Reasons[n.Name] = why
		}
	}
	c.Max = maxUnavailable(b.Spec.MaxUnavailable, c.Selected)
	return c, nil
}

// kuredHolders parses the value of kured's lock annotation
// (KuredLockAnnotation) into the node names holding it at now: the single
// form {"nodeID": ...} or the multi form {"maxOwners": N, "locks": [...]};
// a lock whose TTL (nanoseconds, 0: none) has passed since created holds
// nothing. An empty value holds nothing; one that is not either form is an
// error.
func kuredHolders(value string, now time.Time) ([]string, error) {
	if strings.TrimSpace(value) == "" {
		return nil, nil
	}
	type lock struct {
		NodeID  string        `json:"nodeID"`
		Created time.Time     `json:"created"`
		TTL     time.Duration `json:"TTL"`
	}
	var v struct {
		lock
		MaxOwners *int   `json:"maxOwners"`
		Locks     []lock `json:"locks"`
	}
	if err := json.Unmarshal([]byte(value), &v); err != nil {
		return nil, fmt.Errorf("kured lock annotation %s: %w", v1alpha1.KuredLockAnnotation, err)
	}
	locks := v.Locks
	if v.MaxOwners == nil && v.Locks == nil {
		if v.NodeID == "" {
			return nil, fmt.Errorf("kured lock annotation %s: neither nodeID nor locks in %q", v1alpha1.KuredLockAnnotation, value)
		}
		locks = []lock{v.lock}
	}
	var out []string
	for _, l := range locks {
		if l.NodeID == "" || (l.TTL > 0 && !now.Before(l.Created.Add(l.TTL))) {
			continue
		}
		out = append(out, l.NodeID)
	}
	return out, nil
}

// planNodes maps each node to the system-upgrade-controller Plans whose
// status.applying lists it, from the Plans (unstructured) given.
func planNodes(plans []*unstructured.Unstructured) map[string][]string {
	out := map[string][]string{}
	for _, p := range plans {
		applying, _, _ := unstructured.NestedStringSlice(p.Object, "status", "applying")
		name := p.GetName()
		if p.GetNamespace() != "" {
			name = p.GetNamespace() + "/" + name
		}
		for _, n := range applying {
			out[n] = append(out[n], name)
		}
	}
	return out
}

// disrupts reports whether a run of spec takes its node out of service:
// spec.maintenance.cordon, or spec.reboot other than Never.
func disrupts(s *v1alpha1.NodeScriptSpec) bool {
	return (s.Maintenance != nil && s.Maintenance.Cordon) || (s.Reboot != "" && s.Reboot != v1alpha1.RebootNever)
}

// ledger is the watcher's in-process record of the budget decisions not
// yet visible in the API (the node states the informer does not show yet),
// so that two reconciles never spend the same room or start two exclusive
// NodeScripts on one node: each decision is taken under mu, and a node
// started is reserved until its start was recorded (release).
type ledger struct {
	mu sync.Mutex
	// reserved maps node -> NodeScript -> disrupts, for the starts decided
	// and not yet recorded.
	reserved map[string]map[string]bool
	// waiting maps budget -> NodeScript -> priority, for the NodeScripts
	// that found no room when they last looked.
	waiting map[string]map[string]int32
}

func (l *ledger) reserve(node, ns string, disrupts bool) {
	if l.reserved == nil {
		l.reserved = map[string]map[string]bool{}
	}
	if l.reserved[node] == nil {
		l.reserved[node] = map[string]bool{}
	}
	l.reserved[node][ns] = disrupts
}

func (l *ledger) unreserve(node, ns string) {
	delete(l.reserved[node], ns)
	if len(l.reserved[node]) == 0 {
		delete(l.reserved, node)
	}
}

func (l *ledger) wait(budget, ns string, prio int32, waits bool) {
	if !waits {
		delete(l.waiting[budget], ns)
		return
	}
	if l.waiting == nil {
		l.waiting = map[string]map[string]int32{}
	}
	if l.waiting[budget] == nil {
		l.waiting[budget] = map[string]int32{}
	}
	l.waiting[budget][ns] = prio
}

// ahead reports whether NodeScript a (priority pa) starts before b (pb):
// the higher priority, then the name.
func ahead(a string, pa int32, b string, pb int32) bool {
	if pa != pb {
		return pa > pb
	}
	return a < b
}

// scriptList is every NodeScript in the cache (unreadable ones skipped).
func (c *controller) scriptList() []*v1alpha1.NodeScript {
	var out []*v1alpha1.NodeScript
	for _, o := range c.scripts.List() {
		if ns, err := nodescript.ToNodeScript(o); err == nil {
			v1alpha1.SetDefaults(ns)
			out = append(out, ns)
		}
	}
	return out
}

// holders returns, per node, the NodeScripts running there (recorded
// Running, with a run or check pod going, or reserved in the ledger) with
// whether each holds the node out of service: a run under maintenance
// (Draining, Drained, Rebooting, or cordoned for it), or any run of a
// NodeScript whose runs disrupt (disrupts). The caller holds the ledger's mu.
func (c *controller) holders(ctx context.Context, scripts []*v1alpha1.NodeScript, cached nodeSet) map[string][]holder {
	out := map[string][]holder{}
	for _, s := range scripts {
		dis := disrupts(&s.Spec)
		seen := map[string]bool{}
		add := func(node string, d bool) {
			if seen[node] {
				return
			}
			seen[node] = true
			out[node] = append(out[node], holder{Name: s.Name, Disrupts: d, Exclusive: s.Spec.Exclusive})
		}
		for _, n := range cached.all {
			st, ok := c.w.state(ctx, s.Name, n)
			if ok && st.Phase == v1alpha1.PhaseRunning {
				add(n.Name, dis || st.Maintenance != "" || st.Cordoned)
			}
		}
		if c.pods != nil {
			objs, _ := c.pods.ByIndex(byNodeScript, s.Name)
			for _, o := range objs {
				p := o.(*corev1.Pod)
				if runsScript(p.Labels[v1alpha1.LabelAction]) && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed && cached.byName[p.Spec.NodeName] != nil {
					add(p.Spec.NodeName, dis && p.Labels[v1alpha1.LabelAction] == v1alpha1.ActionRun)
				}
			}
		}
		for node, by := range c.w.ledger.reserved {
			if d, ok := by[s.Name]; ok {
				add(node, d)
			}
		}
	}
	return out
}

// budgetSources reads kured's lock (a GET of each of
// Options.KuredDaemonSets; one that does not exist holds nothing) and the
// applying Plans (from the Plan informer, when the cluster serves Plans).
// RBAC: get on daemonsets (apps) in kured's namespace; list/watch on
// plans.upgrade.cattle.io. An error (refused, unreadable) is returned: the
// budget is then closed.
func (c *controller) budgetSources(ctx context.Context, now time.Time) (budgetSources, error) {
	src := budgetSources{KuredHolders: map[string]bool{}}
	for _, ds := range c.w.o.KuredDaemonSets {
		nsName, name, _ := strings.Cut(ds, "/")
		d, err := c.w.o.Client.AppsV1().DaemonSets(nsName).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return budgetSources{}, fmt.Errorf("reading kured's lock on daemonset %s: %w", ds, err)
		}
		ids, err := kuredHolders(d.Annotations[v1alpha1.KuredLockAnnotation], now)
		if err != nil {
			return budgetSources{}, fmt.Errorf("daemonset %s: %w", ds, err)
		}
		for _, id := range ids {
			src.KuredHolders[id] = true
		}
	}
	if c.plans != nil {
		var plans []*unstructured.Unstructured
		for _, o := range c.plans.List() {
			if u, ok := o.(*unstructured.Unstructured); ok {
				plans = append(plans, u)
			}
		}
		src.Plans = planNodes(plans)
	}
	return src, nil
}

// getBudget reads MaintenanceBudget name from the cache. Errors: the
// MaintenanceBudget CRD is not served, or the budget does not exist.
func (c *controller) getBudget(name string) (*v1alpha1.MaintenanceBudget, error) {
	if c.budgets == nil {
		return nil, errors.New("the MaintenanceBudget CRD (maintenancebudgets.nodeexec.io) is not installed: kubectl apply -f deploy/crd/")
	}
	obj, exists, err := c.budgets.GetByKey(name)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, fmt.Errorf("maintenancebudget %s does not exist", name)
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("unexpected object %T", obj)
	}
	b := &v1alpha1.MaintenanceBudget{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, b); err != nil {
		return nil, fmt.Errorf("maintenancebudget %s: %w", name, err)
	}
	return b, nil
}

// budgetGate is the budget and exclusivity step between Decide and the
// starts. Under the ledger's lock it drops from d.Start each node where a
// NodeScript runs that cannot share it with ns (spec.exclusive on either
// side: d.Blocked says which), then, when ns names a MaintenanceBudget,
// trims the starts that take a node out of service (disrupts; not a check)
// to the budget's room: a node already out of service costs nothing, a
// NodeScript of higher priority waiting for room on the budget goes first
// (ns gets none), and a budget that cannot be read or counted lets nothing
// start. What nothing may start is d.Hold HoldBudget with d.Waiting saying
// why. The nodes kept are reserved until release is called (after the
// starts), so that another reconcile counts them.
func (c *controller) budgetGate(ctx context.Context, ns *v1alpha1.NodeScript, d decision, nodes []rolloutNode, cached nodeSet, now time.Time) (decision, func()) {
	name := ns.Spec.MaintenanceBudget
	if len(d.Start) == 0 && name == "" {
		return d, func() {}
	}
	scripts := c.scriptList()
	anyExclusive := ns.Spec.Exclusive
	for _, s := range scripts {
		anyExclusive = anyExclusive || s.Spec.Exclusive
	}
	if name == "" && !anyExclusive {
		return d, func() {}
	}
	l := &c.w.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	held := c.holders(ctx, scripts, cached)
	c.exclusivity(ns, &d, held, cached)
	var costly []string
	if name != "" && disrupts(&ns.Spec) {
		costly = costlyStarts(ns, d, nodes)
	}
	var waits bool
	if name != "" && d.Stage != v1alpha1.StageComplete && d.Stage != v1alpha1.StageHalted {
		waits = c.applyBudget(ctx, ns, &d, costly, scripts, held, cached, now)
	}
	if name != "" {
		l.wait(name, ns.Name, ns.Spec.Priority, waits)
	}
	for _, node := range d.Start {
		l.reserve(node, ns.Name, slices.Contains(costly, node))
	}
	start := slices.Clone(d.Start)
	return d, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, node := range start {
			l.unreserve(node, ns.Name)
		}
	}
}

// exclusivity drops from d.Start each node where a NodeScript runs (held)
// that cannot share it with ns (spec.exclusive on either side): d.Blocked
// says which, and a node newly blocked gets an Event.
func (c *controller) exclusivity(ns *v1alpha1.NodeScript, d *decision, held map[string][]holder, cached nodeSet) {
	var kept []string
	for _, node := range d.Start {
		if other := conflict(ns, held[node]); other != "" {
			msg := node + ": nodescript " + other + " runs here (exclusive)"
			d.Blocked = append(d.Blocked, msg)
			if n := cached.byName[node]; n != nil && !slices.Contains(ns.Status.Blocked, msg) {
				c.events.Eventf(n, corev1.EventTypeNormal, v1alpha1.ReasonExclusiveWait, "nodescript %s: not started while nodescript %s runs here (spec.exclusive)", ns.Name, other)
			}
			continue
		}
		kept = append(kept, node)
	}
	d.Start = kept
	slices.Sort(d.Blocked)
}

// costlyStarts are the nodes of d.Start a start takes out of service: all
// but those whose next step is spec.checkScript's check.
func costlyStarts(ns *v1alpha1.NodeScript, d decision, nodes []rolloutNode) []string {
	prev := map[string]nodeState{}
	for _, n := range nodes {
		prev[n.Name] = n.State
	}
	var costly []string
	for _, node := range d.Start {
		s := prev[node]
		if !(ns.Spec.CheckScript != "" && !(s.Hash == d.Hash && s.Checked)) {
			costly = append(costly, node)
		}
	}
	return costly
}

// applyBudget trims d.Start's costly nodes to the room on ns's
// MaintenanceBudget (none when it cannot be read or counted, or a
// NodeScript ahead waits for room); it reports whether ns now waits for
// room. The caller holds the ledger's mu.
func (c *controller) applyBudget(ctx context.Context, ns *v1alpha1.NodeScript, d *decision, costly []string, scripts []*v1alpha1.NodeScript, held map[string][]holder, cached nodeSet, now time.Time) bool {
	name := ns.Spec.MaintenanceBudget
	count, err := c.countBudget(ctx, name, cached, held, now)
	switch {
	case err != nil:
		// Closed: nothing that disrupts starts.
		d.Start = slices.DeleteFunc(d.Start, func(n string) bool { return slices.Contains(costly, n) })
		d.Waiting = fmt.Sprintf("maintenancebudget %s cannot be counted, so no node that it covers starts: %v", name, err)
		if d.Hold == "" && len(d.Start) == 0 {
			d.Hold = v1alpha1.HoldBudget
		}
		return len(costly) > 0
	case len(costly) == 0:
		return false
	}
	room := count.Room()
	if first := c.firstWaiter(name, ns, scripts); first != "" {
		room = 0
		d.Waiting = fmt.Sprintf("nodescript %s (priority ahead of %d) waits for room on maintenancebudget %s first", first, ns.Spec.Priority, name)
	}
	trimmed := trimToRoom(d, costly, count, room)
	if trimmed == 0 {
		return false
	}
	if d.Waiting == "" {
		d.Waiting = budgetMessage(name, count)
	}
	if len(d.Start) == 0 {
		d.Hold = v1alpha1.HoldBudget
	}
	return true
}

// countBudget counts MaintenanceBudget name (and sets its metrics).
func (c *controller) countBudget(ctx context.Context, name string, cached nodeSet, held map[string][]holder, now time.Time) (budgetCount, error) {
	b, err := c.getBudget(name)
	if err != nil {
		return budgetCount{}, err
	}
	src, err := c.budgetSources(ctx, now)
	if err != nil {
		return budgetCount{}, err
	}
	count, err := countBudget(b, cached.all, src, held)
	if err != nil {
		return count, err
	}
	c.w.metrics.budgetUnavailable.WithLabelValues(name).Set(float64(count.Unavailable()))
	c.w.metrics.budgetMax.WithLabelValues(name).Set(float64(count.Max))
	return count, nil
}

// trimToRoom keeps in d.Start the nodes that cost nothing (not costly, or
// already out of service) and room of the costly ones; the result is how
// many it dropped.
func trimToRoom(d *decision, costly []string, count budgetCount, room int) int {
	var out []string
	trimmed := 0
	for _, node := range d.Start {
		switch {
		case !slices.Contains(costly, node), count.Reasons[node] != nil:
			out = append(out, node)
		case room > 0:
			out = append(out, node)
			room--
		default:
			trimmed++
		}
	}
	d.Start = out
	return trimmed
}

// conflict names a NodeScript among running (those on a node) that ns
// cannot share the node with: any other when ns is exclusive, an exclusive
// one otherwise; "" when none.
func conflict(ns *v1alpha1.NodeScript, running []holder) string {
	for _, h := range running {
		if h.Name != ns.Name && (ns.Spec.Exclusive || h.Exclusive) {
			return h.Name
		}
	}
	return ""
}

// firstWaiter names the NodeScript ahead of ns (ahead: priority, then
// name) that waits for room on budget: known waiting to this process (the
// ledger), or whose status says BudgetExhausted (a restart of the
// watcher); "" when none. The caller holds the ledger's mu.
func (c *controller) firstWaiter(budget string, ns *v1alpha1.NodeScript, scripts []*v1alpha1.NodeScript) string {
	best, bestPrio := "", int32(0)
	for _, s := range scripts {
		if s.Name == ns.Name || s.Spec.MaintenanceBudget != budget || s.DeletionTimestamp != nil || s.Spec.Paused {
			continue
		}
		_, inLedger := c.w.ledger.waiting[budget][s.Name]
		cond := findStatusCondition(s.Status.Conditions, v1alpha1.ConditionProgressing)
		if !inLedger && (cond == nil || cond.Reason != v1alpha1.ReasonBudgetExhausted || cond.ObservedGeneration != s.Generation) {
			continue
		}
		if !ahead(s.Name, s.Spec.Priority, ns.Name, ns.Spec.Priority) {
			continue
		}
		if best == "" || ahead(s.Name, s.Spec.Priority, best, bestPrio) {
			best, bestPrio = s.Name, s.Spec.Priority
		}
	}
	return best
}

func findStatusCondition(cs []metav1.Condition, t string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}

// budgetMessage says why a NodeScript waits on budget: its count, and the
// nodes out of service with why (the first maxEventNodes).
func budgetMessage(name string, c budgetCount) string {
	return fmt.Sprintf("maintenancebudget %s has no room: %d of %d selected nodes out of service (maxUnavailable %d): %s",
		name, c.Unavailable(), c.Selected, c.Max, describeNodes(c.Reasons))
}

// describeNodes lists nodes with their reasons, sorted, the first maxEventNodes.
func describeNodes(reasons map[string][]string) string {
	names := make([]string, 0, len(reasons))
	for n := range reasons {
		names = append(names, n)
	}
	sortStrings(names)
	var parts []string
	for i, n := range names {
		if i == maxEventNodes {
			parts = append(parts, fmt.Sprintf("and %d more", len(names)-i))
			break
		}
		parts = append(parts, n+" ("+strings.Join(reasons[n], ", ")+")")
	}
	return strings.Join(parts, ", ")
}

func sortStrings(s []string) { sort.Strings(s) }

// budgetStatus puts the budget's wait into st (a NodeScript's status being
// written from d): with d.Hold HoldBudget the Progressing condition is
// False, reason BudgetExhausted, with d.Waiting (an Event on ns when it
// starts waiting); when only some nodes wait, d.Waiting is added to the
// Progressing message.
func (c *controller) budgetStatus(ns *v1alpha1.NodeScript, st *v1alpha1.NodeScriptStatus, d decision, now time.Time) {
	if d.Waiting == "" {
		return
	}
	if d.Hold == v1alpha1.HoldBudget {
		was := findStatusCondition(ns.Status.Conditions, v1alpha1.ConditionProgressing)
		if was == nil || was.Reason != v1alpha1.ReasonBudgetExhausted {
			c.events.Event(ns, corev1.EventTypeNormal, v1alpha1.ReasonBudgetExhausted, d.Waiting)
		}
		setCondition(st, v1alpha1.ConditionProgressing, false, v1alpha1.ReasonBudgetExhausted, tail(fmt.Sprintf("waiting (%d running): %s", d.Counts.Running, d.Waiting), 1024), ns.Generation, now)
		return
	}
	if cond := findStatusCondition(st.Conditions, v1alpha1.ConditionProgressing); cond != nil && cond.Status == metav1.ConditionTrue {
		setCondition(st, v1alpha1.ConditionProgressing, true, cond.Reason, tail(cond.Message+"; some nodes wait: "+d.Waiting, 1024), ns.Generation, now)
	}
}
