package watcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/kubectl/pkg/drain"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// Event reasons recorded on nodes and NodeScripts.
const (
	ReasonSucceeded      = "ScriptSucceeded"
	ReasonFailed         = "ScriptFailed"
	ReasonInfrastructure = "RunInfrastructureFailure"
	ReasonVerified       = "VerifySucceeded"
	ReasonVerifyFailed   = "VerifyFailed"
	ReasonRolledBack     = "RollbackSucceeded"
	ReasonRollbackFailed = "RollbackFailed"
	ReasonCordoned       = "Cordoned"
	ReasonUncordoned     = "Uncordoned"
	ReasonDrained        = "Drained"
	ReasonDrainFailed    = "DrainFailed"
	ReasonTaintRemoved   = "StartupTaintRemoved"
	ReasonHalted         = "Halted"
	ReasonComplete       = "Complete"
	ReasonPodCreate      = "PodCreateFailed"
	// ReasonOutputNotRecorded: spec.recordOutput is set and an output
	// record could not be written (on the NodeScript).
	ReasonOutputNotRecorded = "OutputNotRecorded"
	// ReasonLeftCordoned: the NodeScript that cordoned the node after a
	// failure was deleted; the node stays cordoned (on the node).
	ReasonLeftCordoned = "LeftCordoned"
)

// controller is one run of the watcher: its caches, queue and recorder.
type controller struct {
	w       *Watcher
	nodes   corelisters.NodeLister
	pods    cache.Indexer
	scripts cache.Store
	events  record.EventRecorder
	queue   workqueue.TypedRateLimitingInterface[string]
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
// by phase: it admits the NodeScript (or finalizes it), records the runs
// that finished, applies the failure policy and removes startup taints,
// starts what Decide allows, and writes the status. It returns when to look
// again (0: on the next change or resync).
func (c *controller) reconcile(ctx context.Context, name string) (time.Duration, error) {
	// 0. The NodeScript, its deletion, its finalizer and its validity.
	ns, err := c.admit(ctx, name)
	if ns == nil || err != nil {
		return 0, err
	}
	now := c.w.o.Clock.Now()
	if invalid, err := c.haltInvalid(ctx, ns, now); invalid || err != nil {
		return 0, err
	}
	hash := v1alpha1.SpecHash(&ns.Spec)
	cached, err := c.listNodes(name)
	if err != nil {
		return 0, err
	}
	// 1. Record the runs that finished, adopt the ones running.
	going, err := c.recordFinished(ctx, ns, cached, now)
	if err != nil {
		return 0, err
	}
	// 2. Per selected node: lost runs, the failure policy, taints.
	nodes, retryAt, err := c.nodePolicies(ctx, ns, hash, cached, going, now)
	if err != nil {
		return 0, err
	}
	// 3. Decide, and start what it allows.
	d, err := Decide(ns, nodes, now)
	if err != nil {
		return 0, err
	}
	startErr := c.startRuns(ctx, ns, d, cached, nodes, going, now)
	// 4. Status.
	if err := c.status(ctx, ns, d, hash, startErr, now); err != nil {
		return 0, err
	}
	if startErr != nil {
		return 0, startErr
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
	// busy holds the nodes with a run pod (ActionRun).
	busy map[string]bool
	// actions holds "node/action" for every action with a pod.
	actions map[string]bool
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
		return nil, nil
	}
	ns, err := toNodeScript(obj)
	if err != nil {
		return nil, err
	}
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
	st.Stage = StageHalted
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
// an infrastructure failure (NodeRebooted). Output: the pods still going.
func (c *controller) recordFinished(ctx context.Context, ns *v1alpha1.NodeScript, cached nodeSet, now time.Time) (runPods, error) {
	podObjs, err := c.pods.ByIndex(byNodeScript, ns.Name)
	if err != nil {
		return runPods{}, err
	}
	going := runPods{busy: map[string]bool{}, actions: map[string]bool{}}
	var finish []func() error
	for _, o := range podObjs {
		pod := o.(*corev1.Pod)
		node, action := pod.Spec.NodeName, pod.Labels[LabelAction]
		n := cached.byName[node]
		if n == nil {
			// The node is gone; its pods go with it (pod GC).
			continue
		}
		ready, since := nodeReady(n)
		out := PodOutcome(pod, ready, since, now, c.w.o.NotReadyGrace)
		if action == ActionRun && out.Done {
			if s, ok := c.w.state(ctx, ns.Name, n); ok && s.Pod == pod.Name {
				bootID, err := c.bootID(ctx, n, s, out)
				if err != nil {
					return runPods{}, err
				}
				out = Rebooted(out, s.BootID, bootID)
			}
		}
		if pod.DeletionTimestamp != nil && !out.Done {
			out = Outcome{}
		}
		if !out.Done || pod.DeletionTimestamp != nil {
			// Running, or being deleted (a terminating pod may still run).
			going.actions[node+"/"+action] = true
			if action == ActionRun {
				going.busy[node] = true
				if pod.DeletionTimestamp == nil {
					if err := c.adopt(ctx, ns, n, pod); err != nil {
						return runPods{}, err
					}
				}
			}
			continue
		}
		finish = append(finish, func() error { return c.finish(ctx, ns, n, pod, out, now) })
	}
	return going, c.parallel(finish)
}

// nodePolicies is phase 2. Inputs: ns at spec hash, the cached nodes, the
// pods still going (phase 1) and now. For each node selected at hash, in
// parallel: a run recorded Running whose pod is gone is recorded lost (an
// infrastructure failure); a script failure gets ns's failure policy
// (rollback, cordon, drain); after a success the startup taint is removed
// and the watcher's own cordon undone. Outputs: every node with a readable
// state, as Decide takes them (a node still running a run of an older spec
// counts as Running), and the earliest NextRetry of the infrastructure
// failures waiting for one (zero when none).
func (c *controller) nodePolicies(ctx context.Context, ns *v1alpha1.NodeScript, hash string, cached nodeSet, going runPods, now time.Time) ([]Node, time.Time, error) {
	sel, _ := metav1.LabelSelectorAsSelector(&ns.Spec.NodeSelector) // validated
	var (
		nodes   []Node
		work    []func() error
		retryAt time.Time
	)
	for _, n := range cached.all {
		s, ok := c.w.state(ctx, ns.Name, n)
		if !ok {
			continue
		}
		ready, _ := nodeReady(n)
		if going.busy[n.Name] && !(s.Hash == hash && s.Phase == PhaseRunning) {
			// A run of an older spec still going: it counts as running.
			s = NodeState{Hash: hash, Phase: PhaseRunning}
		}
		nodes = append(nodes, Node{Name: n.Name, UID: string(n.UID), Labels: n.Labels, Ready: ready, State: s})
		if !selects(&ns.Spec, sel, n.Name, n.Labels) || s.Hash != hash {
			continue
		}
		switch {
		case s.Phase == PhaseRunning && !going.busy[n.Name] && !c.w.expected(s.Pod):
			work = append(work, func() error { return c.lost(ctx, ns, n, s, now) })
		case s.Phase == PhaseFailed && s.Infrastructure && s.NextRetry != nil:
			if retryAt.IsZero() || s.NextRetry.Before(retryAt) {
				retryAt = *s.NextRetry
			}
		case s.Phase == PhaseFailed && !s.Infrastructure:
			work = append(work, func() error { return c.failurePolicy(ctx, ns, n, s, going.actions[n.Name+"/"+ActionRollback], now) })
		case s.Phase == PhaseSucceeded:
			if t := ns.Spec.StartupTaint; t != nil && hasTaint(n, t) {
				work = append(work, func() error { return c.removeTaint(ctx, n, t) })
			}
			if s.CordonedByUs && n.Spec.Unschedulable {
				work = append(work, func() error { return c.uncordon(ctx, ns, n, s) })
			}
		}
	}
	return nodes, retryAt, c.parallel(work)
}

// startRuns is phase 3. Inputs: ns, the decision d taken on nodes (the
// states phase 2 returned), the cached nodes, the pods still going (phase 1)
// and now.
// It creates, in parallel, the run pod of each node in d.Start (recording
// it Running) and the verify pod of each node in d.Verify that has none
// going. Output: the joined errors of the pods not created, for the status.
func (c *controller) startRuns(ctx context.Context, ns *v1alpha1.NodeScript, d Decision, cached nodeSet, nodes []Node, going runPods, now time.Time) error {
	prev := map[string]NodeState{}
	for _, n := range nodes {
		prev[n.Name] = n.State
	}
	var start []func() error
	for _, node := range d.Start {
		n, s := cached.byName[node], prev[node]
		start = append(start, func() error { return c.start(ctx, ns, d.Hash, n, s, ActionRun, now) })
	}
	for _, node := range d.Verify {
		if !going.actions[node+"/"+ActionVerify] {
			n, s := cached.byName[node], prev[node]
			start = append(start, func() error { return c.start(ctx, ns, d.Hash, n, s, ActionVerify, now) })
		}
	}
	return c.parallel(start)
}

// requeueAfter is when to reconcile again after a reconcile at now that
// decided d: at the earliest retryAt (phase 2), at least a second from now;
// every 2 seconds at most while the canaries soak; 0 otherwise (on the next
// change or resync).
func requeueAfter(d Decision, retryAt, now time.Time) time.Duration {
	var after time.Duration
	if !retryAt.IsZero() {
		after = max(retryAt.Sub(now), time.Second)
	}
	if d.Stage == StageSoaking && (after == 0 || after > 2*time.Second) {
		after = 2 * time.Second
	}
	return after
}

// bootID is node n's boot ID to judge the finished run out recorded as s:
// the cached one, or the API's when the cache still shows the boot the run
// started on and a reboot may explain the failure. After a reboot the
// kubelet reports the new boot ID and the dead run pod on separate
// requests, which reach this process through separate watches: the pod's
// failure can arrive first, and must not be recorded as the script's.
func (c *controller) bootID(ctx context.Context, n *corev1.Node, s NodeState, out Outcome) (string, error) {
	cached := n.Status.NodeInfo.BootID
	if s.Phase != PhaseRunning || s.BootID == "" || cached != s.BootID || !rebootCandidate(out) {
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

// start creates the pod of action on node n (s is its current state) and
// records the run as Running.
func (c *controller) start(ctx context.Context, ns *v1alpha1.NodeScript, hash string, n *corev1.Node, s NodeState, action string, now time.Time) error {
	attempt := 1
	if action == ActionRun && s.Hash == hash {
		attempt = s.Attempts + 1
	}
	pod, err := RunPod(RunPodSpec{NodeScript: ns, Node: n.Name, Action: action, Attempt: attempt, Now: now})
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
	if action != ActionRun {
		return nil
	}
	// One Event per run, with its result (see finish); the start is in the
	// node's state annotation (Running, the pod, the attempt).
	return c.w.writeState(ctx, ns.Name, n, NodeState{
		Hash: hash, Phase: PhaseRunning, Attempts: attempt, Since: now, Pod: pod.Name, BootID: n.Status.NodeInfo.BootID,
		CordonedByUs: s.CordonedByUs, Cordoned: s.Cordoned && s.CordonedByUs,
	})
}

// adopt records a run pod found running as the node's run (after a restart
// between the pod's creation and the state's write).
func (c *controller) adopt(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, pod *corev1.Pod) error {
	s, ok := c.w.state(ctx, ns.Name, n)
	podHash := pod.Labels[nodeexec.LabelRunID]
	if !ok || (s.Phase == PhaseRunning && s.Pod == pod.Name) || (s.Pod == pod.Name && s.Hash == podHash) {
		return nil
	}
	attempt, _ := strconv.Atoi(pod.Annotations[AnnotationAttempt])
	return c.w.writeState(ctx, ns.Name, n, NodeState{
		Hash: podHash, Phase: PhaseRunning, Attempts: attempt, Since: pod.CreationTimestamp.Time, Pod: pod.Name,
		CordonedByUs: s.CordonedByUs, Cordoned: s.Cordoned && s.CordonedByUs,
	})
}

// finish records a finished run pod's outcome on its node, then deletes the pod.
func (c *controller) finish(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, pod *corev1.Pod, out Outcome, now time.Time) error {
	s, ok := c.w.state(ctx, ns.Name, n)
	if !ok {
		return nil
	}
	podHash := pod.Labels[nodeexec.LabelRunID]
	action := pod.Labels[LabelAction]
	attempt, _ := strconv.Atoi(pod.Annotations[AnnotationAttempt])
	result := "succeeded"
	switch {
	case out.Infrastructure:
		result = "infrastructure"
	case out.Reason == "Timeout":
		result = "timeout"
	case out.ExitCode != 0:
		result = "failed"
	}
	msg := func() string {
		if out.Reason != "" {
			return fmt.Sprintf("nodescript %s (spec %s) %s on pod %s/%s: %s %s", ns.Name, podHash, action, pod.Namespace, pod.Name, out.Reason, out.Message)
		}
		return fmt.Sprintf("nodescript %s (spec %s) %s attempt %d on pod %s/%s: exit code %d", ns.Name, podHash, action, attempt, pod.Namespace, pod.Name, out.ExitCode)
	}
	recorded := false
	switch action {
	case ActionRun:
		if s.Pod == pod.Name && s.Phase != PhaseRunning {
			break // recorded before; only the pod's deletion is left
		}
		next := NodeState{Hash: podHash, Attempts: attempt, Since: now, Pod: pod.Name, Reason: out.Reason,
			CordonedByUs: s.CordonedByUs, Cordoned: s.Cordoned && s.CordonedByUs}
		output := out.Tail
		switch result {
		case "infrastructure":
			next.Phase, next.Infrastructure, next.Message = PhaseFailed, true, out.Message
			t := now.Add(backoff(ns, attempt))
			next.NextRetry = &t
			c.events.Event(n, corev1.EventTypeWarning, ReasonInfrastructure, msg())
		case "succeeded":
			next.Phase, next.ExitCode = PhaseSucceeded, ptr.To(0)
			if ns.Spec.RecordOutput && c.w.o.SuccessLogLines > 0 {
				output = c.logTail(ctx, pod)
			}
			c.events.Event(n, corev1.EventTypeNormal, ReasonSucceeded, msg())
		default:
			next.Phase, next.ExitCode = PhaseFailed, ptr.To(out.ExitCode)
			c.events.Event(n, corev1.EventTypeWarning, ReasonFailed, msg())
		}
		c.recordOutput(ctx, ns, n, podHash, action, output, now)
		if err := c.w.writeState(ctx, ns.Name, n, next); err != nil {
			return err
		}
		recorded = true
	case ActionVerify:
		if s.Hash != podHash || s.Phase != PhaseSucceeded || s.Verified || out.Infrastructure {
			break
		}
		if result == "succeeded" {
			s.Verified = true
			c.events.Event(n, corev1.EventTypeNormal, ReasonVerified, msg())
		} else {
			s.Phase, s.Reason, s.ExitCode, s.Since = PhaseFailed, "VerifyFailed", ptr.To(out.ExitCode), now
			c.recordOutput(ctx, ns, n, podHash, action, out.Tail, now)
			c.events.Event(n, corev1.EventTypeWarning, ReasonVerifyFailed, msg())
		}
		if err := c.w.writeState(ctx, ns.Name, n, s); err != nil {
			return err
		}
		recorded = true
	case ActionRollback:
		if s.Hash != podHash || s.Rollback != "Running" {
			break
		}
		s.RollbackExitCode = ptr.To(out.ExitCode)
		c.recordOutput(ctx, ns, n, podHash, action, out.Tail, now)
		if result == "succeeded" {
			s.Rollback, s.Phase, s.Since = PhaseSucceeded, PhaseRolledBack, now
			c.events.Event(n, corev1.EventTypeNormal, ReasonRolledBack, msg())
		} else {
			s.Rollback = PhaseFailed
			c.events.Event(n, corev1.EventTypeWarning, ReasonRollbackFailed, msg())
		}
		if err := c.w.writeState(ctx, ns.Name, n, s); err != nil {
			return err
		}
		recorded = true
	}
	if recorded {
		c.w.metrics.runs.WithLabelValues(ns.Name, action, result).Inc()
		c.w.metrics.duration.WithLabelValues(action).Observe(now.Sub(pod.CreationTimestamp.Time).Seconds())
	}
	err := c.w.o.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &pod.UID}, PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
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
		c.events.Event(ns, corev1.EventTypeWarning, ReasonOutputNotRecorded, fmt.Sprintf("node %s, %s: %v", n.Name, action, err))
	}
}

// logTail is the end of a finished pod's log, or "" when it cannot be read.
func (c *controller) logTail(ctx context.Context, pod *corev1.Pod) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lines := int64(c.w.o.SuccessLogLines)
	b, err := c.w.o.Client.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{TailLines: &lines, LimitBytes: ptr.To(int64(16 << 10))}).DoRaw(ctx)
	if err != nil {
		logr.FromContextOrDiscard(ctx).V(1).Info("reading the run's log", "pod", pod.Name, "error", err.Error())
		return ""
	}
	return string(b)
}

// lost records a run whose pod disappeared before its outcome was recorded
// (deleted by someone else, or with its node): an infrastructure failure.
func (c *controller) lost(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, s NodeState, now time.Time) error {
	s.Phase, s.Infrastructure, s.Reason, s.Since = PhaseFailed, true, "PodDisappeared", now
	t := now.Add(backoff(ns, s.Attempts))
	s.NextRetry = &t
	c.events.Eventf(n, corev1.EventTypeWarning, ReasonInfrastructure, "nodescript %s: run pod %s disappeared before its outcome was recorded", ns.Name, s.Pod)
	c.w.metrics.runs.WithLabelValues(ns.Name, ActionRun, "infrastructure").Inc()
	return c.w.writeState(ctx, ns.Name, n, s)
}

// backoff is the pause before retry number attempt: InitialBackoff doubled
// per attempt, capped at MaxBackoff, with 10% jitter.
func backoff(ns *v1alpha1.NodeScript, attempt int) time.Duration {
	initial, maxB := 10*time.Second, 5*time.Minute
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

// failurePolicy applies OnFailure to a node whose script failed: rollback
// script, cordon, drain. Each step is recorded in the node's state, so it
// is taken once, also across restarts.
func (c *controller) failurePolicy(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, s NodeState, rollbackBusy bool, now time.Time) error {
	p := ns.Spec.OnFailure
	changed := false
	if p.Cordon && !s.Cordoned {
		if !n.Spec.Unschedulable {
			if err := c.cordon(ctx, n, true); err != nil {
				return err
			}
			s.CordonedByUs = true
			c.events.Eventf(n, corev1.EventTypeWarning, ReasonCordoned, "nodescript %s failed here: cordoned", ns.Name)
		}
		s.Cordoned, changed = true, true
	}
	if p.Rollback && s.Rollback == "" && !rollbackBusy {
		pod, err := RunPod(RunPodSpec{NodeScript: ns, Node: n.Name, Action: ActionRollback, Attempt: 1, Now: now})
		if err != nil {
			return err
		}
		c.w.expect(pod.Name, now)
		if _, err := c.w.o.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{FieldManager: "nodeexec-watcher"}); err != nil && !apierrors.IsAlreadyExists(err) {
			c.w.unexpect(pod.Name)
			return fmt.Errorf("node %s: creating rollback pod: %w", n.Name, err)
		}
		s.Rollback, changed = "Running", true
	} else if s.Rollback == "Running" && !rollbackBusy {
		name := RunPodName(ns.Name, s.Hash, n.Name, ActionRollback, 1)
		if !c.w.expected(name) {
			s.Rollback, changed = PhaseFailed, true
			c.events.Eventf(n, corev1.EventTypeWarning, ReasonRollbackFailed, "nodescript %s: rollback pod %s disappeared before its outcome was recorded", ns.Name, name)
		}
	}
	if changed {
		if err := c.w.writeState(ctx, ns.Name, n, s); err != nil {
			return err
		}
	}
	if p.Drain && s.Cordoned && s.Drain == "" {
		c.drain(ctx, ns, n)
	}
	return nil
}

// cordon sets the node's unschedulable field with kubectl's cordon helper.
func (c *controller) cordon(ctx context.Context, n *corev1.Node, desired bool) error {
	h := &drain.Helper{Ctx: ctx, Client: c.w.o.Client, Out: io.Discard, ErrOut: io.Discard}
	if err := drain.RunCordonOrUncordon(h, n.DeepCopy(), desired); err != nil {
		return fmt.Errorf("node %s: cordon=%t: %w", n.Name, desired, err)
	}
	return nil
}

// uncordon undoes the watcher's own cordon once the node succeeded (a
// corrected spec ran there); a node cordoned by someone else is left alone.
func (c *controller) uncordon(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, s NodeState) error {
	if err := c.cordon(ctx, n, false); err != nil {
		return err
	}
	s.CordonedByUs, s.Cordoned = false, false
	c.events.Eventf(n, corev1.EventTypeNormal, ReasonUncordoned, "nodescript %s succeeded here: uncordoned (the watcher had cordoned it)", ns.Name)
	return c.w.writeState(ctx, ns.Name, n, s)
}

// drain evicts the node's pods in the background with kubectl's drain
// helper (DaemonSet pods and nodeexec's own pods stay), within DrainTimeout,
// and records the outcome in the node's state.
func (c *controller) drain(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node) {
	c.w.mu.Lock()
	if c.w.draining[n.Name] {
		c.w.mu.Unlock()
		return
	}
	c.w.draining[n.Name] = true
	c.w.mu.Unlock()
	timeout := 5 * time.Minute
	if t := ns.Spec.OnFailure.DrainTimeout; t != nil {
		timeout = t.Duration
	}
	go func() {
		defer func() {
			c.w.mu.Lock()
			delete(c.w.draining, n.Name)
			c.w.mu.Unlock()
			c.queue.Add(ns.Name)
		}()
		h := &drain.Helper{
			Ctx: ctx, Client: c.w.o.Client, GracePeriodSeconds: -1, IgnoreAllDaemonSets: true,
			DeleteEmptyDirData: true, Timeout: timeout, Out: io.Discard, ErrOut: io.Discard,
			PodSelector: nodeexec.LabelManagedBy + "!=" + nodeexec.ManagedByValue,
		}
		result, reason, typ := ReasonDrained, ReasonDrained, corev1.EventTypeNormal
		if err := drain.RunNodeDrain(h, n.Name); err != nil {
			if ctx.Err() != nil {
				return // stopped: drained again on the next start
			}
			result, reason, typ = tail("drain failed: "+err.Error(), 256), ReasonDrainFailed, corev1.EventTypeWarning
		}
		c.events.Eventf(n, typ, reason, "nodescript %s failed here: %s", ns.Name, result)
		// The node as known now, not n: n's state annotation is the one from
		// before the failure policy's writes, which the informer has seen
		// since (so they are no longer in the overlay); recording the drain
		// on it would undo them (the cordon record, the failed run).
		cur, err := c.nodes.Get(n.Name)
		if err != nil {
			return // the node is gone
		}
		s, ok := c.w.state(ctx, ns.Name, cur)
		if !ok {
			return
		}
		s.Drain = result
		if err := c.w.writeState(ctx, ns.Name, n, s); err != nil {
			logr.FromContextOrDiscard(ctx).Error(err, "recording the drain", "node", n.Name)
		}
	}()
}

// removeTaint removes the startup taint from a node where the script
// succeeded, with a JSON patch that fails if the node changed since read.
func (c *controller) removeTaint(ctx context.Context, n *corev1.Node, t *corev1.Taint) error {
	patch, _ := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/resourceVersion", "value": n.ResourceVersion},
		{"op": "replace", "path": "/spec/taints", "value": withoutTaint(n, t)},
	})
	if _, err := c.w.o.Client.CoreV1().Nodes().Patch(ctx, n.Name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: "nodeexec-watcher"}); err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsConflict(err) {
			return fmt.Errorf("node %s changed while removing taint %s; retrying: %w", n.Name, t.Key, err)
		}
		return fmt.Errorf("node %s: removing taint %s: %w", n.Name, t.Key, err)
	}
	c.events.Eventf(n, corev1.EventTypeNormal, ReasonTaintRemoved, "the script succeeded here: taint %s removed", t.Key)
	return nil
}

// status is phase 4: it writes ns's status (stage, counts, conditions) from
// the decision d taken at spec hash, with startErr, phase 3's pod creation
// errors, as the Progressing condition (PodCreateFailed); it sets the
// per-phase node metrics and records an Event on ns when the rollout
// becomes Halted or Complete.
func (c *controller) status(ctx context.Context, ns *v1alpha1.NodeScript, d Decision, hash string, startErr error, now time.Time) error {
	st := ns.Status.DeepCopy()
	st.ObservedGeneration, st.SpecHash, st.Stage = ns.Generation, hash, d.Stage
	st.Nodes, st.Pending, st.Running = int32(d.Counts.Nodes), int32(d.Counts.Pending), int32(d.Counts.Running)
	st.Succeeded, st.Failed, st.RolledBack = int32(d.Counts.Succeeded), int32(d.Counts.Failed), int32(d.Counts.RolledBack)
	gen := ns.Generation
	switch d.Stage {
	case StageHalted:
		reason := "ErrorBudgetExceeded"
		if strings.HasPrefix(d.HaltReason, "canary") {
			reason = "CanaryFailed"
		}
		setCondition(st, v1alpha1.ConditionHalted, true, reason, d.HaltReason, gen, now)
		setCondition(st, v1alpha1.ConditionProgressing, false, reason, "halted: "+d.HaltReason, gen, now)
		setCondition(st, v1alpha1.ConditionComplete, false, reason, "halted", gen, now)
	case StageComplete:
		setCondition(st, v1alpha1.ConditionHalted, false, "Complete", "", gen, now)
		setCondition(st, v1alpha1.ConditionProgressing, false, "Complete", "every selected node ran the script", gen, now)
		msg := fmt.Sprintf("%d nodes succeeded", d.Counts.Succeeded)
		if f := d.Counts.Failed + d.Counts.RolledBack; f > 0 {
			msg += fmt.Sprintf(", %d failed (within the error budget)", f)
		}
		setCondition(st, v1alpha1.ConditionComplete, true, "Complete", msg, gen, now)
	default:
		setCondition(st, v1alpha1.ConditionHalted, false, d.Stage, "", gen, now)
		progressing := d.Stage != StageAwaitingPromotion || d.Counts.Running > 0
		msg := fmt.Sprintf("%d of %d nodes succeeded, %d running", d.Counts.Succeeded, d.Counts.Nodes, d.Counts.Running)
		if d.Stage == StageAwaitingPromotion {
			msg += "; promote with: nodeexec promote " + ns.Name + " --to all"
		}
		setCondition(st, v1alpha1.ConditionProgressing, progressing, d.Stage, msg, gen, now)
		setCondition(st, v1alpha1.ConditionComplete, false, d.Stage, "", gen, now)
	}
	if startErr != nil {
		setCondition(st, v1alpha1.ConditionProgressing, false, ReasonPodCreate, tail(startErr.Error(), 512), gen, now)
	}
	for phase, v := range map[string]int{PhasePending: d.Counts.Pending, PhaseRunning: d.Counts.Running, PhaseSucceeded: d.Counts.Succeeded, PhaseFailed: d.Counts.Failed, PhaseRolledBack: d.Counts.RolledBack} {
		c.w.metrics.nodes.WithLabelValues(ns.Name, phase).Set(float64(v))
	}
	if ns.Status.Stage != st.Stage {
		switch st.Stage {
		case StageHalted:
			c.events.Event(ns, corev1.EventTypeWarning, ReasonHalted, d.HaltReason)
		case StageComplete:
			c.events.Eventf(ns, corev1.EventTypeNormal, ReasonComplete, "%d nodes succeeded", d.Counts.Succeeded)
		}
	}
	return c.writeStatus(ctx, ns, st)
}

// writeStatus updates the status subresource when st differs from ns.Status.
func (c *controller) writeStatus(ctx context.Context, ns *v1alpha1.NodeScript, st *v1alpha1.NodeScriptStatus) error {
	if apiEqualStatus(&ns.Status, st) {
		return nil
	}
	// A merge patch of the whole status: the watcher is its only writer
	// (one leader), so it needs no resourceVersion and cannot conflict with
	// a spec change made meanwhile.
	patch, err := json.Marshal(map[string]any{"status": st})
	if err != nil {
		return err
	}
	_, err = c.w.o.Dynamic.Resource(v1alpha1.Resource).Patch(ctx, ns.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "nodeexec-watcher"}, "status")
	if err != nil {
		return fmt.Errorf("updating status of nodescript %s: %w", ns.Name, err)
	}
	return nil
}

func apiEqualStatus(a, b *v1alpha1.NodeScriptStatus) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func setCondition(st *v1alpha1.NodeScriptStatus, typ string, status bool, reason, msg string, gen int64, now time.Time) {
	s := metav1.ConditionFalse
	if status {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(now),
	})
}
