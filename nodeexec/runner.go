package nodeexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// DefaultMaxConcurrency is how many nodes a Runner works on at once when
// RunnerOptions.MaxConcurrency is zero.
const DefaultMaxConcurrency = 20

// MaxStdinFanOut is the most standard input a Runner buffers to give the same
// input to every node of a multi-node run (64 MiB).
const MaxStdinFanOut = 64 << 20

// Targets selects nodes. Exactly one of Nodes, Selector and All must be set.
type Targets struct {
	// Nodes lists node names; each must exist.
	Nodes []string
	// Selector is a label selector in kubectl syntax, e.g. "kubernetes.io/os=linux,!gpu".
	Selector string
	// All targets every node.
	All bool
}

// Validate reports the first problem, naming the field.
func (t Targets) Validate() error {
	n := 0
	if len(t.Nodes) > 0 {
		n++
	}
	if t.Selector != "" {
		n++
	}
	if t.All {
		n++
	}
	if n != 1 {
		return errors.New("choose the target nodes with exactly one of: node names (--node), a label selector (--selector), or all nodes (--all)")
	}
	for i, name := range t.Nodes {
		if name == "" {
			return fmt.Errorf("Nodes[%d] is empty: give a node name", i)
		}
	}
	if t.Selector != "" {
		if _, err := labels.Parse(t.Selector); err != nil {
			return fmt.Errorf("invalid label selector %q: %w", t.Selector, err)
		}
	}
	return nil
}

// RunnerOptions configure a Runner.
type RunnerOptions struct {
	// Client reads nodes (RBAC: list nodes). Required.
	Client kubernetes.Interface
	// Backend runs the request on each node. Required.
	Backend Backend
	// MaxConcurrency is how many nodes are worked on at once. Defaults to
	// DefaultMaxConcurrency.
	MaxConcurrency int
	// MaxPerZone, when positive, is how many nodes of one zone (the
	// topology.kubernetes.io/zone label, ZoneLabel) are worked on at once,
	// within MaxConcurrency: an incident command never loads all of one
	// zone's nodes together. While a zone is full, nodes of the other zones
	// start in its place (target order within each zone). Nodes without the
	// label form one group of their own (NoZone) that the limit applies to
	// as to any zone; the run logs how many there are. Defaults to 0: no
	// zone limit. Negative is refused by NewRunner.
	MaxPerZone int
	// NoPrefix turns off the "[node] " prefix on every output line. With one
	// target node and NoPrefix the output is passed through unbuffered, as kubectl exec does.
	NoPrefix bool
	// IncludeNotReady also runs on nodes whose Ready condition is not True.
	// By default such nodes fail at once with ErrNodeNotReady, since a pod
	// would wait there until the timeout.
	IncludeNotReady bool
	// Canary is how many nodes, the first in target order, run before any
	// other; the others run only if every canary succeeds. Defaults to 0 (no canary).
	Canary int
	// Batches are the sizes of the stages after the canary, each a count or
	// a percentage of the target nodes (rounded up), e.g. 1, 5, 20%. A stage
	// starts when the previous one has finished; the last size repeats until
	// every node has run. Defaults to one stage of all remaining nodes.
	Batches []intstr.IntOrString
	// MaxErrors is the error budget, a count or a percentage of the target
	// nodes (rounded down): once more nodes than this have failed, no further
	// node is started (those already running finish) and the rest end with
	// ErrSkipped. Nil means no limit.
	MaxErrors *intstr.IntOrString
	// Retries is how often a node is retried after an infrastructure failure
	// (a *PodError: image pull, kubelet rejection, eviction, ...). A non-zero
	// exit, a timeout, cancellation or ErrImageNeverPull (a retry pulls
	// nothing either) is never retried. Defaults to 0.
	Retries int
	// RetryBackoff is the pause before the first retry; it doubles with each
	// retry up to MaxRetryBackoff, plus up to 50% jitter. Defaults to
	// DefaultRetryBackoff.
	RetryBackoff time.Duration
	// TailBytes is how much of the end of each node's stdout and stderr its
	// NodeResult keeps. Defaults to DefaultTailBytes.
	TailBytes int
	// SkipDigest leaves each NodeResult's Stdout.SHA256 and Stderr.SHA256
	// empty: the streams are not hashed. Hashing costs about 0.6 ms of CPU
	// per MB in the goroutine that passes a node's output on (with SHA-NI),
	// which on a busy 2-core machine measured as about 8% of a single
	// node's streaming throughput. Set it only when nothing compares
	// outputs (grouping identical outputs needs the digests). Defaults to
	// false: hashed.
	SkipDigest bool
	// OnStart, when set, is called with a node's name when work on it starts
	// (it has one of the MaxConcurrency slots), before its first attempt, from
	// the goroutine that runs it; calls may be concurrent. Nodes skipped
	// (ErrSkipped) never start: they only get OnResult. With OnResult it lets
	// a caller show progress: started and not yet done is running.
	OnStart func(node string)
	// OnResult, when set, is called with each node's result as soon as the
	// node is done (from the goroutine that ran it; calls may be concurrent).
	OnResult func(NodeResult)
	// Preflight, when set, is called once with the first node before any
	// node runs, whatever the number of nodes; an error stops the run with
	// nothing created (RunNodes returns it). A caller sets it to its own
	// check, for example nodeexec/preflight.Check with its report, which
	// makes the backend's dry-run among other checks. Defaults to the
	// backend's Preflight (Preflighter, found through wrappers with As) on
	// runs of more than one node: with one node the create itself is the
	// admission check, and a refused create leaves nothing behind.
	Preflight func(ctx context.Context, node string) error
	// Clock measures durations and times retries. Defaults to the real clock.
	Clock clock.Clock
}

// Runner fans a Request out over nodes. It is safe for concurrent use.
type Runner struct {
	o RunnerOptions
}

// NewRunner validates o and returns a Runner.
func NewRunner(o RunnerOptions) (*Runner, error) {
	switch {
	case o.Client == nil:
		return nil, errors.New("RunnerOptions.Client is nil: give a Kubernetes client")
	case o.Backend == nil:
		return nil, errors.New("RunnerOptions.Backend is nil: give a backend, e.g. debugpod.New(...)")
	case o.MaxConcurrency < 0:
		return nil, fmt.Errorf("MaxConcurrency %d is negative: give a positive number, or 0 for the default %d", o.MaxConcurrency, DefaultMaxConcurrency)
	case o.MaxPerZone < 0:
		return nil, fmt.Errorf("MaxPerZone %d is negative: give a positive number of nodes per zone, or 0 for no zone limit", o.MaxPerZone)
	}
	if err := validateRollout(o); err != nil {
		return nil, err
	}
	if o.TailBytes == 0 {
		o.TailBytes = DefaultTailBytes
	}
	if o.RetryBackoff == 0 {
		o.RetryBackoff = DefaultRetryBackoff
	}
	if o.MaxConcurrency == 0 {
		o.MaxConcurrency = DefaultMaxConcurrency
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return &Runner{o: o}, nil
}

// Run resolves targets, checks with RunnerOptions.Preflight (by default
// the backend's Preflight, when it has one and there is more than one node)
// that the cluster will accept the pods, and then runs req on every target
// node, at most MaxConcurrency at a time. req.Node is ignored; req.Stdout and
// req.Stderr receive every node's output, line by line with a "[node] "
// prefix unless NoPrefix is set.
//
// The error is non-nil only when nothing was run: bad targets or request,
// nodes that do not exist (ErrNodeNotFound), an empty match (ErrNoNodes), an
// unreachable API server, or a failed preflight. Otherwise the outcome of each
// node, in target order, is in the returned slice; see Failed. With
// MaxPerZone, at most that many nodes of one zone run at once.
func (r *Runner) Run(ctx context.Context, targets Targets, req Request) ([]NodeResult, error) {
	if err := targets.Validate(); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	nodes, err := r.Resolve(ctx, targets)
	if err != nil {
		return nil, err
	}
	return r.RunNodes(ctx, nodes, req)
}

// RunNodes is Run on nodes already resolved (by Resolve), for callers that
// look at the nodes first; it makes no node request of its own. nodes must
// not be empty. A backend that is a NodeObserver is shown the nodes first.
func (r *Runner) RunNodes(ctx context.Context, nodes []*corev1.Node, req Request) ([]NodeResult, error) {
	if len(nodes) == 0 {
		return nil, fmt.Errorf("%w: no nodes given", ErrNoNodes)
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if o, ok := As[NodeObserver](r.o.Backend); ok {
		o.ObserveNodes(nodes)
	}
	var err error
	switch p, ok := As[Preflighter](r.o.Backend); {
	case r.o.Preflight != nil:
		err = r.o.Preflight(ctx, nodes[0].Name)
	case ok && len(nodes) > 1:
		// With several nodes, check once before any pod is made.
		err = p.Preflight(ctx, nodes[0].Name)
	}
	if err != nil {
		return nil, err
	}
	var stdin []byte
	if req.Stdin != nil && len(nodes) > 1 {
		// Every node gets the same input.
		stdin, err = io.ReadAll(io.LimitReader(req.Stdin, MaxStdinFanOut+1))
		if err != nil {
			return nil, fmt.Errorf("reading standard input: %w", err)
		}
		if len(stdin) > MaxStdinFanOut {
			return nil, fmt.Errorf("standard input is larger than %d bytes, the most a multi-node run buffers", MaxStdinFanOut)
		}
	}
	stdout := &lockedWriter{w: orDiscard(req.Stdout)}
	stderr := &lockedWriter{w: orDiscard(req.Stderr)}

	results := make([]NodeResult, len(nodes))
	budget := errorBudget(r.o.MaxErrors, len(nodes))
	var (
		mu       sync.Mutex
		failures int
		halted   error // why the remaining nodes are skipped
	)
	skip := func(i int, why error) {
		now := r.o.Clock.Now()
		results[i] = NodeResult{
			Result: Result{Node: nodes[i].Name, ExitCode: -1, Started: now, Finished: now, Backend: r.o.Backend.Name()},
			Err:    fmt.Errorf("node %q: %w: %w", nodes[i].Name, ErrSkipped, why),
		}
		if r.o.OnResult != nil {
			r.o.OnResult(results[i])
		}
	}
	zoneOf := zonesOf(nodes, r.o.MaxPerZone)
	if r.o.MaxPerZone > 0 {
		if n := CountZones(nodes)[NoZone]; n > 0 {
			logr.FromContextOrDiscard(ctx).Info("nodes without a zone label count as one zone for MaxPerZone", "label", ZoneLabel, "nodes", n, "of", len(nodes))
		}
	}
	sl := newSlots(r.o.MaxConcurrency, r.o.MaxPerZone)
	stages := plan(len(nodes), r.o.Canary, r.o.Batches)
	for si, stage := range stages {
		var wg sync.WaitGroup
		q := newQueue(stage, zoneOf)
		for q.pending > 0 {
			mu.Lock()
			why := halted
			mu.Unlock()
			i, acquired := -1, false
			if why == nil {
				i, acquired = sl.take(ctx, q)
				mu.Lock()
				why = halted
				mu.Unlock()
			}
			if why == nil && ctx.Err() != nil {
				// Cancelled (Ctrl-C): no node starts any more.
				why = fmt.Errorf("the run was cancelled before it started: %w", context.Cause(ctx))
			}
			if why != nil {
				if acquired {
					sl.release(zoneOf[i])
					skip(i, why)
				}
				for _, j := range q.drain() {
					skip(j, why)
				}
				break
			}
			wg.Go(func() {
				defer sl.release(zoneOf[i])
				if r.o.OnStart != nil {
					r.o.OnStart(nodes[i].Name)
				}
				nreq := req
				nreq.Node = nodes[i].Name
				if stdin != nil {
					nreq.Stdin = bytes.NewReader(stdin)
				}
				res := r.runOne(ctx, nodes[i], nreq, stdout, stderr, len(nodes) == 1)
				results[i] = res
				if res.Err != nil {
					mu.Lock()
					failures++
					if budget >= 0 && failures > budget && halted == nil {
						halted = fmt.Errorf("%d nodes failed, more than the error budget of %d (MaxErrors %s)", failures, budget, r.o.MaxErrors.String())
					}
					mu.Unlock()
				}
				if r.o.OnResult != nil {
					r.o.OnResult(res)
				}
			})
		}
		wg.Wait()
		if si == 0 && r.o.Canary > 0 && len(stages) > 1 {
			var failed []string
			for _, i := range stage {
				if results[i].Err != nil {
					failed = append(failed, nodes[i].Name)
				}
			}
			mu.Lock()
			if len(failed) > 0 && halted == nil {
				halted = fmt.Errorf("canary failed on %q", failed)
			}
			mu.Unlock()
		}
	}
	return results, nil
}

func (r *Runner) runOne(ctx context.Context, node *corev1.Node, req Request, stdout, stderr *lockedWriter, single bool) NodeResult {
	log := logr.FromContextOrDiscard(ctx).WithValues("node", node.Name)
	if !r.o.IncludeNotReady && !IsNodeReady(node) {
		now := r.o.Clock.Now()
		return NodeResult{
			Result: Result{Node: node.Name, ExitCode: -1, Started: now, Finished: now, Backend: r.o.Backend.Name()},
			Err:    fmt.Errorf("node %q: %w (the kubelet does not report Ready; use IncludeNotReady to try anyway)", node.Name, ErrNodeNotReady),
		}
	}
	var flush []func() error
	req.Stdout = r.lineWriter(node.Name, req.Stdout, stdout, single, &flush)
	req.Stderr = r.lineWriter(node.Name, req.Stderr, stderr, single, &flush)
	var (
		res            Result
		err            error
		attempts       int
		outRec, errRec *recorder
	)
	base := req
	for {
		attempts++
		outRec, errRec = newRecorder(r.o.TailBytes, !r.o.SkipDigest), newRecorder(r.o.TailBytes, !r.o.SkipDigest)
		req.Stdout, req.Stderr = tee(base.Stdout, outRec), tee(base.Stderr, errRec)
		res, err = r.o.Backend.Run(logr.NewContext(ctx, log), req)
		var pe *PodError
		if err == nil || !errors.As(err, &pe) || errors.Is(err, ErrImageNeverPull) || attempts > r.o.Retries || ctx.Err() != nil {
			break
		}
		wait := backoff(r.o.RetryBackoff, attempts)
		log.V(1).Info("retrying after an infrastructure failure", "attempt", attempts, "backoff", wait.String(), "err", err)
		select {
		case <-r.o.Clock.After(wait):
		case <-ctx.Done():
		}
		if base.Stdin != nil {
			// A retried node reads its input again only when it can be re-read.
			if s, ok := base.Stdin.(io.Seeker); ok {
				_, _ = s.Seek(0, io.SeekStart)
			}
		}
	}
	for _, f := range flush {
		_ = f()
	}
	res.Node = node.Name
	if res.Backend == "" {
		res.Backend = r.o.Backend.Name()
	}
	if err != nil {
		log.V(1).Info("run failed", "err", err)
	}
	return NodeResult{Result: res, Err: err, Attempts: attempts, Stdout: outRec.output(), Stderr: errRec.output()}
}

// lineWriter is where one stream of node's output goes: nil when the caller
// discards it (only the recorder sees it then), the shared writer itself for
// one node without prefix, else a prefixWriter onto it (its Flush added to
// flush).
func (r *Runner) lineWriter(node string, w io.Writer, shared *lockedWriter, single bool, flush *[]func() error) io.Writer {
	switch {
	case w == nil:
		return nil
	case r.o.NoPrefix && single:
		return shared.w
	}
	p := newPrefixWriter(node, r.o.NoPrefix, shared)
	*flush = append(*flush, p.Flush)
	return p
}

// slimNode is the part of node n a run keeps (see Resolve): a new object,
// so that nothing else of n, nor of the list page n came in, stays in
// memory.
func slimNode(n *corev1.Node) *corev1.Node {
	out := &corev1.Node{
		TypeMeta: n.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Generation: n.Generation,
			Labels: n.Labels, Annotations: n.Annotations,
			CreationTimestamp: n.CreationTimestamp, DeletionTimestamp: n.DeletionTimestamp,
		},
		Spec: n.Spec,
		Status: corev1.NodeStatus{
			Capacity: n.Status.Capacity, Allocatable: n.Status.Allocatable,
			Addresses: n.Status.Addresses, DaemonEndpoints: n.Status.DaemonEndpoints,
			NodeInfo: n.Status.NodeInfo, RuntimeHandlers: n.Status.RuntimeHandlers,
		},
	}
	for _, c := range n.Status.Conditions {
		// Ready, and any other condition that is not False: a pressure
		// condition that holds, a condition in an unknown state, a
		// condition of another component (NodeProblemDetector's, a
		// NodeScript's). The False ones ("kubelet has sufficient memory
		// available") say nothing and are most of a node's size after
		// its images.
		if c.Type == corev1.NodeReady || c.Status != corev1.ConditionFalse {
			out.Status.Conditions = append(out.Status.Conditions, c)
		}
	}
	return out
}

// Resolve returns the nodes targets select, in the order given (names) or by
// name (selector, all). It lists nodes page by page (RBAC: list nodes) and
// fails with ErrNodeNotFound naming every missing node, or ErrNoNodes.
//
// The nodes are trimmed to what a run reads, because a run holds its nodes
// from start to end (at 5,000 nodes tens of MiB otherwise): metadata keeps
// name, UID, resourceVersion, generation, labels, annotations and the
// creation and deletion timestamps (no managedFields, owner references or
// finalizers); spec is whole; status keeps capacity, allocatable,
// addresses, daemonEndpoints, nodeInfo, runtimeHandlers, and of the
// conditions Ready and every one whose status is not False. Dropped are
// status.images (a kubelet reports up to 50 per node), volumes, config,
// features and phase.
func (r *Runner) Resolve(ctx context.Context, targets Targets) ([]*corev1.Node, error) {
	if err := targets.Validate(); err != nil {
		return nil, err
	}
	sel := labels.Everything()
	if targets.Selector != "" {
		sel, _ = labels.Parse(targets.Selector) // validated above
	}
	want := map[string]bool{}
	for _, n := range targets.Nodes {
		want[n] = true
	}
	found := map[string]*corev1.Node{}
	var all []*corev1.Node
	opts := metav1.ListOptions{LabelSelector: sel.String(), Limit: 500}
	for {
		list, err := r.o.Client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing nodes: %w", err)
		}
		for i := range list.Items {
			n := slimNode(&list.Items[i])
			if len(want) > 0 {
				if want[n.Name] {
					found[n.Name] = n
				}
				continue
			}
			all = append(all, n)
		}
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	if len(want) > 0 {
		var missing []string
		for _, n := range targets.Nodes {
			if found[n] == nil {
				missing = append(missing, n)
				continue
			}
			if !slices.Contains(all, found[n]) {
				all = append(all, found[n])
			}
		}
		if len(missing) > 0 {
			return nil, fmt.Errorf("%w: %q (see `kubectl get nodes`)", ErrNodeNotFound, missing)
		}
		return all, nil
	}
	if len(all) == 0 {
		if targets.Selector != "" {
			return nil, fmt.Errorf("%w: label selector %q matched no node", ErrNoNodes, targets.Selector)
		}
		return nil, fmt.Errorf("%w: the cluster has no nodes", ErrNoNodes)
	}
	slices.SortFunc(all, func(a, b *corev1.Node) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return all, nil
}

// IsNodeReady reports whether the node's Ready condition is True.
func IsNodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Failed returns the results whose Err is non-nil.
func Failed(results []NodeResult) []NodeResult {
	var out []NodeResult
	for _, r := range results {
		if r.Err != nil {
			out = append(out, r)
		}
	}
	return out
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
