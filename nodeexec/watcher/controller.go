package watcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// controller is one run of the watcher: its caches, queue and recorder.
type controller struct {
	w       *Watcher
	nodes   corelisters.NodeLister
	pods    cache.Indexer
	scripts cache.Store
	events  record.EventRecorder
	queue   workqueue.TypedRateLimitingInterface[string]
	// budgets and plans: MaintenanceBudgets and SUC Plans, nil when not served.
	budgets, plans cache.Store
	// calendars: MaintenanceCalendars, nil when not served (calendar_watch.go).
	calendars cache.Store
	// jobs: the hook Jobs of spec.hooks (hooks.go); nil reads them from the API.
	jobs cache.Store
	// notify delivers spec.notify's notifications (notify.go); nil sends none.
	notify *notifier
}

func (c *controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	log := logr.FromContextOrDiscard(ctx).WithValues("nodescript", key)
	after, err := c.reconcile(logr.NewContext(ctx, log), key)
	if err != nil {
		c.w.metrics.reconciles.WithLabelValues("error").Inc()
		if ctx.Err() == nil {
			log.Error(err, "reconcile failed; retrying with backoff")
			c.queue.AddRateLimited(key)
		}
		return true
	}
	c.w.metrics.reconciles.WithLabelValues("ok").Inc()
	c.queue.Forget(key)
	if after > 0 {
		c.queue.AddAfter(key, after)
	}
	return true
}

// reconcile brings one NodeScript's nodes a step closer to the spec, phase
// by phase: it admits the NodeScript (or finalizes it) and reads its
// run-now override, records the runs that finished, applies rerun
// requests and the failure policy and removes startup taints, starts what
// Decide allows, sets its condition on the nodes, and writes the status. It returns when to look
// again (0: on the next change or resync).
func (c *controller) reconcile(ctx context.Context, name string) (time.Duration, error) {
	if b, ok := budgetKey(name); ok {
		return c.reconcileBudget(ctx, b)
	}
	// 0. The NodeScript, its deletion, its finalizer and its validity.
	ns, err := c.admit(ctx, name)
	if ns == nil || err != nil {
		return 0, err
	}
	now := c.w.o.Clock.Now()
	if invalid, err := c.haltInvalid(ctx, ns, now); invalid || err != nil {
		return 0, err
	}
	if ns, err = c.runNow(ctx, ns, now); err != nil {
		return 0, err
	}
	if ns, err = c.resolveScript(ctx, ns); err != nil {
		return 0, err
	}
	hash := v1alpha1.SpecHash(&ns.Spec)
	cached, err := c.listNodes(name)
	if err != nil {
		return 0, err
	}
	clk := c.w.o.Clock
	took := func(t time.Time) time.Duration { return clk.Since(t).Round(time.Millisecond) }
	// 1. Record the runs that finished, adopt the ones running.
	t1 := clk.Now()
	going, err := c.recordFinished(ctx, ns, cached, now)
	if err != nil {
		return 0, err
	}
	// 2. Per selected node: lost runs, the failure policy, taints.
	t2 := clk.Now()
	nodes, retryAt, err := c.nodePolicies(ctx, ns, hash, cached, going, now)
	if err != nil {
		return 0, err
	}
	// 3. Decide (past the nodes a blocking pod or a blocked drain holds back), and start what it allows.
	t3 := clk.Now()
	d, recheck, err := c.decideAnalyzed(ctx, ns, hash, nodes, cached, now)
	if err != nil {
		return 0, err
	}
	if !recheck.IsZero() && (retryAt.IsZero() || recheck.Before(retryAt)) {
		retryAt = recheck
	}
	d = c.calendarWindow(ctx, ns, d, now)
	d, fitAt := c.fitWindow(ctx, ns, d, nodes, now) // spec.rollout.fitWindow, status.forecast
	if !fitAt.IsZero() && (retryAt.IsZero() || fitAt.Before(retryAt)) {
		retryAt = fitAt
	}
	d, gatesAt := c.gate(ctx, ns, d, nodes, now)
	if !gatesAt.IsZero() && (retryAt.IsZero() || gatesAt.Before(retryAt)) {
		retryAt = gatesAt
	}
	d, release := c.budgetGate(ctx, ns, d, nodes, cached, now)
	defer release()
	d, hooksAt := c.rolloutHooks(ctx, ns, d, cached, now) // spec.hooks.preRollout, postRollout
	retryAt = earliest(retryAt, hooksAt)
	c.w.places.put(ns.Name, d) // NODESCRIPT_ORDINAL, NODESCRIPT_CANARY (annotations_env.go)
	if len(d.Blocked) > 0 || d.Waiting != "" {
		if t := now.Add(blockedRecheck); retryAt.IsZero() || t.Before(retryAt) {
			retryAt = t
		}
	}
	t4 := clk.Now()
	startErr := c.startRuns(ctx, ns, d, cached, nodes, going, now)
	// 4. The NodeScript's condition on each node.
	t5 := clk.Now()
	condErr := c.nodeConditions(ctx, ns, hash, cached, now)
	// 5. Status.
	t6 := clk.Now()
	if err := c.status(ctx, ns, d, hash, startErr, now); err != nil {
		return 0, err
	}
	logr.FromContextOrDiscard(ctx).V(1).Info("reconciled", "stage", d.Stage, "nodes", len(cached.all), "recorded", going.finished,
		"started", len(d.Start), "running", d.Counts.Running, "took", took(t1), "record", t2.Sub(t1).Round(time.Millisecond),
		"policies", t3.Sub(t2).Round(time.Millisecond), "decide", t4.Sub(t3).Round(time.Millisecond), "start", t5.Sub(t4).Round(time.Millisecond),
		"conditions", t6.Sub(t5).Round(time.Millisecond), "status", took(t6))
	if err := errors.Join(startErr, condErr); err != nil {
		return 0, err
	}
	return requeueAfter(d, retryAt, now), nil
}

// nodeSet is the cluster's nodes as one reconcile sees them (the cache).
type nodeSet struct {
	all    []*corev1.Node
	byName map[string]*corev1.Node
}

// runPods says which nodes have a pod of a NodeScript still going (running,
// or terminating: a terminating pod may still run).
type runPods struct {
	// busy holds the nodes with a run pod (ActionRun, or ActionCheck
	// before it).
	busy map[string]bool
	// actions holds "node/action" for every action with a pod.
	actions map[string]bool
	// finished counts the finished pods recorded.
	finished int
}

// admit is phase 0: it reads NodeScript name from the cache and returns it
// when it is to be rolled out, with Finalizer on it. It returns nil when
// there is nothing more to do: the NodeScript is gone (what the process
// remembers of it and its metrics are dropped) or being deleted (it is
// finalized: its state leaves every node, then Finalizer).
func (c *controller) admit(ctx context.Context, name string) (*v1alpha1.NodeScript, error) {
	obj, exists, err := c.scripts.GetByKey(name)
	if err != nil {
		return nil, err
	}
	if !exists {
		c.w.forget(name)
		c.w.metrics.nodes.DeletePartialMatch(prometheus.Labels{"nodescript": name})
		c.w.metrics.drainBlocked.DeleteLabelValues(name)
		c.w.metrics.gateOpen.DeletePartialMatch(prometheus.Labels{"nodescript": name})
		c.w.metrics.annotationGates.DeletePartialMatch(prometheus.Labels{"nodescript": name})
		c.w.metrics.gateQueries.DeletePartialMatch(prometheus.Labels{"nodescript": name})
		c.w.metrics.calendarOpen.DeletePartialMatch(prometheus.Labels{"nodescript": name})
		c.w.metrics.hooks.DeletePartialMatch(prometheus.Labels{"nodescript": name})
		c.w.metrics.notifications.DeletePartialMatch(prometheus.Labels{"nodescript": name})
		c.notify.forget(name)
		return nil, nil
	}
	ns, err := nodescript.ToNodeScript(obj)
	if err != nil {
		return nil, err
	}
	v1alpha1.SetDefaults(ns) // the one place: the rest reads the defaulted spec
	if ns.DeletionTimestamp != nil {
		all, err := c.nodes.List(labels.Everything())
		if err != nil {
			return nil, err
		}
		return nil, c.finalize(ctx, ns, all)
	}
	if err := ensureFinalizer(ctx, c.w.o.Dynamic, ns); err != nil {
		return nil, err
	}
	return ns, nil
}

// haltInvalid is the rest of phase 0: it reports whether ns's spec fails
// v1alpha1.Validate, and then writes the status Halted (reason InvalidSpec,
// with the validation errors) and touches no node.
func (c *controller) haltInvalid(ctx context.Context, ns *v1alpha1.NodeScript, now time.Time) (bool, error) {
	errs := v1alpha1.Validate(ns)
	if len(errs) == 0 {
		return false, nil
	}
	st := ns.Status.DeepCopy()
	st.ObservedGeneration = ns.Generation
	st.Stage = v1alpha1.StageHalted
	setCondition(st, v1alpha1.ConditionHalted, true, "InvalidSpec", errs.ToAggregate().Error(), ns.Generation, now)
	setCondition(st, v1alpha1.ConditionProgressing, false, "InvalidSpec", "the spec is invalid; fix it with nodeexec apply", ns.Generation, now)
	return true, c.writeStatus(ctx, ns, st)
}

// listNodes returns the cached nodes, and drops what the process remembers
// for NodeScript name of nodes that no longer exist.
func (c *controller) listNodes(name string) (nodeSet, error) {
	all, err := c.nodes.List(labels.Everything())
	if err != nil {
		return nodeSet{}, err
	}
	byName := make(map[string]*corev1.Node, len(all))
	for _, n := range all {
		byName[n.Name] = n
	}
	c.w.prune(name, byName)
	return nodeSet{all: all, byName: byName}, nil
}

// recordFinished is phase 1. Inputs: ns's run, verify and rollback pods in
// the cache, the cached nodes, and now (for NotReadyGrace). Each finished pod's
// outcome is recorded in its node's state (finish: state, Event, output
// record) and the pod deleted, in parallel; a run pod still going is
// adopted as its node's run when the state does not name it yet (adopt). A
// run that failed on a node that rebooted since it started is recorded as
// an infrastructure failure (NodeRebooted). A finished pod this process
// recorded and deleted that the cache still shows (the informer lags; for at
// most a minute) is not recorded or deleted again; one being deleted counts
// as going like any other. Output: the pods still going.
func (c *controller) recordFinished(ctx context.Context, ns *v1alpha1.NodeScript, cached nodeSet, now time.Time) (runPods, error) {
	podObjs, err := c.pods.ByIndex(byNodeScript, ns.Name)
	if err != nil {
		return runPods{}, err
	}
	going := runPods{busy: map[string]bool{}, actions: map[string]bool{}}
	var (
		finish []func() error
		ok     succeeded
	)
	for _, o := range podObjs {
		pod := o.(*corev1.Pod)
		node, action := pod.Spec.NodeName, pod.Labels[v1alpha1.LabelAction]
		n := cached.byName[node]
		if n == nil {
			// The node is gone; its pods go with it (pod GC).
			continue
		}
		if action == v1alpha1.ActionPrePull {
			c.strayPrePull(ctx, ns, n, pod) // judged in phase 2 (pulling)
			continue
		}
		ready, since := nodeReady(n)
		out := podOutcome(pod, ready, since, now, c.w.o.NotReadyGrace)
		if out.Done && pod.DeletionTimestamp == nil && c.w.alreadyRecorded(pod.UID) {
			// Recorded and deleted by an earlier reconcile; the cache lags.
			// Skipped before its boot ID is read (an API GET for a failed
			// run). One the cache shows being deleted still counts as going,
			// below: its container may run until the kubelet confirms.
			continue
		}
		if runsScript(action) && out.Done {
			if s, ok := c.w.state(ctx, ns.Name, n); ok {
				start := nodescript.StartBootID(pod, s)
				bootID, err := c.bootID(ctx, n, start, out)
				if err != nil {
					return runPods{}, err
				}
				out = rebooted(out, start, bootID)
			}
		}
		if pod.DeletionTimestamp != nil && !out.Done {
			out = runOutcome{}
		}
		if !out.Done || pod.DeletionTimestamp != nil {
			// Running, or being deleted (a terminating pod may still run).
			going.actions[node+"/"+action] = true
			if runsScript(action) {
				going.busy[node] = true
				if pod.DeletionTimestamp == nil {
					c.adopt(ctx, ns, n, pod)
				}
			}
			continue
		}
		finish = append(finish, func() error { return c.finish(ctx, ns, n, pod, out, &ok, now) })
	}
	going.finished = len(finish)
	err = c.parallel(finish)
	ok.event(c.events, ns)
	return going, err
}

// succeeded collects the nodes whose run succeeded in one reconcile, for
// one Event on the NodeScript instead of one per node.
type succeeded struct {
	mu    sync.Mutex
	nodes []string
}

func (s *succeeded) add(node string) {
	s.mu.Lock()
	s.nodes = append(s.nodes, node)
	s.mu.Unlock()
}

// maxEventNodes bounds the node names one aggregated Event lists.
const maxEventNodes = 20

// event records one Normal ReasonSucceeded Event on ns naming the nodes
// added (the first maxEventNodes, sorted, and how many more); none when
// there are none.
func (s *succeeded) event(r record.EventRecorder, ns *v1alpha1.NodeScript) {
	if len(s.nodes) == 0 {
		return
	}
	slices.Sort(s.nodes)
	names := strings.Join(s.nodes[:min(len(s.nodes), maxEventNodes)], ", ")
	if more := len(s.nodes) - maxEventNodes; more > 0 {
		names += fmt.Sprintf(" and %d more", more)
	}
	r.Eventf(ns, corev1.EventTypeNormal, v1alpha1.ReasonSucceeded, "the script succeeded on %d node(s): %s", len(s.nodes), names)
}

// nodePolicies is phase 2. Inputs: ns at spec hash, the cached nodes, the
// pods still going (phase 1) and now. A node's rerun request is applied
// first (rerun: the node becomes Pending), then spec.reapply (reapply: a
// success due again becomes Pending). Then for each node selected at
// hash (and not ignored), in parallel: a run recorded Running whose pod is
// gone is recorded lost (an infrastructure failure); a script failure gets
// ns's failure policy (rollback, cordon, drain; not a check's failure);
// after a success (or NotNeeded) the startup taint is removed and the watcher's own cordon undone. Outputs:
// every node with a readable state, as Decide takes them (a node still
// running a run of an older spec counts as Running), and the earliest of
// the NextRetry of the infrastructure failures waiting for one and the
// times spec.reapply.interval makes a success due (zero when none).
func (c *controller) nodePolicies(ctx context.Context, ns *v1alpha1.NodeScript, hash string, cached nodeSet, going runPods, now time.Time) ([]rolloutNode, time.Time, error) {
	sel, _ := metav1.LabelSelectorAsSelector(&ns.Spec.NodeSelector) // validated
	var (
		nodes []rolloutNode
		p     policyPass
	)
	for _, n := range cached.all {
		if node, ok := c.nodePolicy(ctx, ns, hash, sel, n, going, now, &p); ok {
			nodes = append(nodes, node)
		}
	}
	if err := c.parallel(p.work); err != nil {
		return nodes, p.retryAt, err
	}
	// Silences of nodes back in service expired (after the uncordons above).
	t, err := c.silenceUpkeep(ctx, ns, cached, now)
	p.at(t)
	return nodes, p.retryAt, err
}

// policyPass gathers phase 2's work and the earliest time to look again.
type policyPass struct {
	work    []func() error
	retryAt time.Time
}

func (p *policyPass) add(w func() error) {
	if w != nil {
		p.work = append(p.work, w)
	}
}

// at keeps t as retryAt when it is earlier (a zero t is none).
func (p *policyPass) at(t time.Time) { p.retryAt = earliest(p.retryAt, t) }

// nodePolicy is phase 2 for node n (sel ns's parsed nodeSelector): its
// requests (rerun, reapply), its annotations' work, then the lifecycle's
// (lifecycleWork) and spec.hooks.postNode. The result is n as Decide
// takes it; ok is false when n's state is unreadable.
func (c *controller) nodePolicy(ctx context.Context, ns *v1alpha1.NodeScript, hash string, sel labels.Selector, n *corev1.Node, going runPods, now time.Time, p *policyPass) (rolloutNode, bool) {
	s, ok := c.w.state(ctx, ns.Name, n)
	if !ok {
		return rolloutNode{}, false
	}
	// selectsNode, with ignored kept for the Node below.
	ign := nodescript.Ignored(n, ns.Name)
	selected := !ign && nodescript.Selects(&ns.Spec, sel, n.Name, n.Labels)
	s = c.requests(ctx, ns, hash, n, s, selected, going, now, p)
	ready, _ := nodeReady(n)
	busy := going.busy[n.Name]
	if busy && !(s.Hash == hash && s.Phase == v1alpha1.PhaseRunning) {
		// A run of an older spec still going: it counts as running.
		s = nodeState{Hash: hash, Phase: v1alpha1.PhaseRunning}
	}
	node := rolloutNode{Name: n.Name, UID: string(n.UID), Labels: n.Labels, Ready: ready, Ignored: ign, State: s}
	if w, at := c.annotationWork(ctx, ns, hash, n, s, selected, busy, now); w != nil || !at.IsZero() {
		p.at(at) // spec.hooks.beforeRun, afterRun (annotations.go)
		if w != nil {
			p.add(w)
			return node, true
		}
	}
	if !selected || s.Hash != hash {
		return node, true
	}
	c.lifecycleWork(ctx, ns, hash, n, s, going, now, p)
	if !busy && postNodeDue(ns, hash, n, s) { // spec.hooks.postNode (hooks.go)
		p.at(now.Add(hookRecheck))
		p.add(func() error { return c.postNode(ctx, ns, hash, n, s, now) })
	}
	return node, true
}

// requests applies node n's rerun request (the node becomes Pending), then
// for a selected node without one spec.reapply (a success due again
// becomes Pending): the state after them.
func (c *controller) requests(ctx context.Context, ns *v1alpha1.NodeScript, hash string, n *corev1.Node, s nodeState, selected bool, going runPods, now time.Time, p *policyPass) nodeState {
	s, write := c.rerun(ctx, ns, hash, n, s, selected, going, now)
	p.add(write)
	if selected && write == nil {
		var due time.Time
		s, write, due = c.reapply(ctx, ns, hash, n, s, going, now)
		p.add(write)
		p.at(due)
	}
	return s
}

// lifecycleWork is the work the transition table (transitions.go) gives
// node n in state s, of the current hash.
func (c *controller) lifecycleWork(ctx context.Context, ns *v1alpha1.NodeScript, hash string, n *corev1.Node, s nodeState, going runPods, now time.Time, p *policyPass) {
	busy := going.busy[n.Name]
	switch transition(s.Phase, nodeEvent(s, busy, func() bool { return c.w.expected(s.Pod) })) {
	case actRebooting:
		p.at(now.Add(rebootRecheck))
		p.add(func() error { return c.rebooting(ctx, ns, hash, n, s, now) })
	case actRunDrained:
		p.add(func() error { return c.start(ctx, ns, hash, n, s, v1alpha1.ActionRun, now) })
	case actResumeDrain:
		c.resumeDrain(ctx, ns, n)
	case actPulling:
		p.at(now.Add(prePullRecheck))
		p.add(func() error { return c.pulling(ctx, ns, hash, n, s, now) })
	case actPreNodeWait:
		p.at(now.Add(hookRecheck)) // spec.hooks.preNode (hooks.go)
		p.add(func() error { return c.preNodeWaiting(ctx, ns, hash, n, s, now) })
	case actLost:
		p.add(func() error { return c.lost(ctx, ns, n, s, now) })
	case actAwaitRetry:
		p.at(*s.NextRetry)
		if s.CordonedByUs && n.Spec.Unschedulable && !ns.Spec.OnFailure.Cordon {
			// Back in service while it waits: the retry cordons again.
			p.add(func() error {
				return c.uncordon(ctx, ns, n, s, "its run failed for the infrastructure ("+s.Reason+") and waits to be retried")
			})
		}
	case actFailurePolicy:
		p.add(func() error {
			return c.failurePolicy(ctx, ns, n, s, going.actions[n.Name+"/"+v1alpha1.ActionRollback], now)
		})
	case actAfterSuccess:
		c.afterSuccess(ctx, ns, hash, n, s, now, p)
	}
}

// resumeDrain drains node n again, recorded Draining, when no drain of it
// goes (after a restart of the watcher).
func (c *controller) resumeDrain(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node) {
	if !c.w.drainGoing(n.Name) && ns.Spec.Maintenance != nil && ns.Spec.Maintenance.Drain != nil {
		c.drainBefore(ctx, ns, n)
	}
}

// afterSuccess adds the work on node n after a success (or NotNeeded):
// the startup taint removed; the watcher's own cordon undone, or
// spec.hooks.afterRun awaited, or the node labelled.
func (c *controller) afterSuccess(ctx context.Context, ns *v1alpha1.NodeScript, hash string, n *corev1.Node, s nodeState, now time.Time, p *policyPass) {
	if t := ns.Spec.StartupTaint; t != nil && hasTaint(n, t) {
		p.add(func() error { return c.removeTaint(ctx, n, t) })
	}
	switch {
	case s.CordonedByUs && n.Spec.Unschedulable:
		p.add(func() error { return c.uncordon(ctx, ns, n, s, "it succeeded here") })
	case nodescript.WaitsAfterRun(s):
		p.add(func() error { return c.awaitAfter(ctx, ns, n, s, now) }) // spec.hooks.afterRun
	case wantsLabels(ns, hash, n, s):
		p.add(func() error { return c.labelNode(ctx, ns, n) })
	}
}

// startRuns is phase 3. Inputs: ns, the decision d taken on nodes (the
// states phase 2 returned), the cached nodes, the pods still going (phase 1)
// and now.
// It creates, in parallel, the run pod of each node in d.Start (recording
// it Running; the check pod instead where spec.checkScript is set and has
// not yet said the node needs the script) and the verify pod of each node in d.Verify that has none
// going. Output: the joined errors of the pods not created, for the status.
func (c *controller) startRuns(ctx context.Context, ns *v1alpha1.NodeScript, d decision, cached nodeSet, nodes []rolloutNode, going runPods, now time.Time) error {
	prev := map[string]nodeState{}
	for _, n := range nodes {
		prev[n.Name] = n.State
	}
	var start []func() error
	for _, node := range d.Start {
		n, s := cached.byName[node], prev[node]
		action := v1alpha1.ActionRun
		if ns.Spec.CheckScript != "" && !(s.Hash == d.Hash && s.Checked) {
			action = v1alpha1.ActionCheck
		}
		start = append(start, func() error { return c.start(ctx, ns, d.Hash, n, s, action, now) })
	}
	for _, node := range d.Verify {
		if !going.actions[node+"/"+v1alpha1.ActionVerify] {
			n, s := cached.byName[node], prev[node]
			start = append(start, func() error { return c.start(ctx, ns, d.Hash, n, s, v1alpha1.ActionVerify, now) })
		}
	}
	return c.parallel(start)
}

// requeueAfter is when to reconcile again after a reconcile at now that
// decided d: at the earliest retryAt (phase 2), when the window opens or the
// run-now override ends, at least a second from now; every 2 seconds at
// most while the canaries soak; 0 otherwise (on the next change or resync).
func requeueAfter(d decision, retryAt, now time.Time) time.Duration {
	var after time.Duration
	if !retryAt.IsZero() {
		after = max(retryAt.Sub(now), time.Second)
	}
	if d.Stage == v1alpha1.StageSoaking && (after == 0 || after > 2*time.Second) {
		after = 2 * time.Second
	}
	for _, t := range []time.Time{d.NextWindow, d.RunNow, d.NextStart, d.WindowCloses} {
		if t.IsZero() {
			continue
		}
		// The window opens, or the run-now override ends: look again then
		// (a clock jump or a missed event costs at most the resync).
		if w := max(t.Sub(now), time.Second); after == 0 || w < after {
			after = w
		}
	}
	return after
}

// parallel runs fns, at most CreateParallelism at once, and joins their errors.
func (c *controller) parallel(fns []func() error) error {
	if len(fns) == 1 {
		return fns[0]()
	}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, c.w.o.CreateParallelism)
	)
	for _, f := range fns {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := f(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
