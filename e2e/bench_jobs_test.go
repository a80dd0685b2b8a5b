//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/internal/testcluster"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/watcher"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// Settings of BenchmarkWatcherJobs (environment variables, defaults in
// brackets): NODEEXEC_BENCH_NODES [1000] SIMULATED nodes;
// NODEEXEC_BENCH_JOBS_CONCURRENCY [50] nodes at once on both sides;
// NODEEXEC_BENCH_POD_START [100ms] kwok's PodStartDelay (0: kwok's own 1-5 s
// per pod start stage); NODEEXEC_BENCH_JOBS_SIDES [watcher,jobs] the sides
// run, in order, of watcher, jobs and watcher_kcm_qps (the watcher with
// kube-controller-manager's client limits, QPS 20, burst 30);
// NODEEXEC_BENCH_WATCHER_JOBS_OUT the JSON file.
const (
	jobsBenchNodes       = 1000
	jobsBenchConcurrency = 50
	// jobsPodStart is kwok's PodStartDelay by default: a simulated run
	// lasts 1.2-1.4 s (100-200 ms per start stage, then PodCompleteAfter),
	// so the figures show the machinery around it rather than kwok's sleeps.
	jobsPodStart = 100 * time.Millisecond
	// kube-controller-manager's --kube-api-qps and --kube-api-burst
	// defaults, which the test cluster keeps: with
	// --use-service-account-credentials every controller (job,
	// ttl-after-finished, garbage collector) has a client, and a rate
	// limiter, of its own.
	kcmQPS, kcmBurst = 20, 30
	// jobsBackoffLimit and jobsActiveDeadline are system-upgrade-controller's
	// defaults for its Jobs (pkg/upgrade/job: SYSTEM_UPGRADE_JOB_BACKOFF_LIMIT,
	// SYSTEM_UPGRADE_JOB_ACTIVE_DEADLINE_SECONDS).
	jobsBackoffLimit   = 2
	jobsActiveDeadline = 600
)

// BenchmarkWatcherJobs rolls a one-line script out to every SIMULATED node
// twice in one run, on the same kwok nodes, at the same concurrency C:
//
//   - "watcher": a NodeScript (script 'true', maxConcurrency C, canary 0),
//     the watcher in this test process (client QPS 500, burst 1000, as
//     deployed for large clusters);
//   - "jobs": system-upgrade-controller's model. A driver in this process
//     (the part of SUC's controller that matters here) creates one batch/v1
//     Job per node (pod pinned by spec.nodeName, restartPolicy Never,
//     SUC's backoffLimit 2 and activeDeadlineSeconds 600,
//     ttlSecondsAfterFinished 0), at most C not yet finished at once: it
//     creates the next Job when it sees one Complete, after labelling that
//     Job's node as SUC does (plan.upgrade.cattle.io/<plan>=<hash>; here
//     nodeexec.io/bench-jobs-<run>=done). kube-controller-manager's job
//     controller creates the pods and tracks them, its ttl-after-finished
//     controller deletes each finished Job and the garbage collector its
//     pod.
//
// Both sides' pods carry app.kubernetes.io/managed-by=nodeexec, so kwok ends
// them by the same stage (PodCompleteAfter, 1 s, after they are Running;
// PodStartDelay 100 ms unless NODEEXEC_BENCH_POD_START says otherwise): the
// simulated "work" on a node takes the same time on both sides, and what
// differs is the machinery around it.
//
// Throughput is nodes per minute from the first create (the NodeScript's
// apply, the first Job's create) until the last node is done (NodeScript
// Complete; the last Job Complete). API writes per node (see
// sideResult.Writes) count every writer alike (this test, the watcher,
// kube-controller-manager, kwok, the kubelets), from just before a side
// starts until its last object is gone (run pods deleted; Jobs and their
// pods deleted by their controllers): apiserver_request_total deltas of the
// verbs POST, PUT, PATCH, APPLY, DELETE and DELETECOLLECTION for every
// resource but leases (kwok's node heartbeats, the real kubelets'), the
// authentication and authorization reviews (no object written), nodes and
// Events; node writes at the side's own client (SUC's node label, the
// watcher's node status), because kube-controller-manager's node lifecycle
// controller and kwok rewrite simulated nodes whenever a heartbeat is late;
// Events by object (the side's objects), because they are sent
// asynchronously and the node lifecycle controller's are neither side's.
// An idle window of 20 s after the sides checks that nothing else writes
// the resources counted for every writer. kwok runs with node heartbeats
// (Heartbeat): without them the node lifecycle controller marks every
// simulated node NotReady about every 20 s.
//
// The ratios (watcher over jobs) and the targets of issue 28 item 6
// (throughput >= 1.5x the Jobs', writes per node <= 0.5x) go to
// NODEEXEC_BENCH_WATCHER_JOBS_OUT (JSON, "simulated": true) and the log.
// b.N is not used: run it with -benchtime 1x.
func BenchmarkWatcherJobs(b *testing.B) {
	n := envInt(b, "NODEEXEC_BENCH_NODES", jobsBenchNodes)
	c := envInt(b, "NODEEXEC_BENCH_JOBS_CONCURRENCY", jobsBenchConcurrency)
	podStart := jobsPodStart
	if v := os.Getenv("NODEEXEC_BENCH_POD_START"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			b.Fatalf("NODEEXEC_BENCH_POD_START=%q: want a duration such as 100ms, or 0 for kwok's own delays", v)
		}
		podStart = d
	}
	if n < 1 || c < 1 {
		b.Fatalf("NODEEXEC_BENCH_NODES (%d) and NODEEXEC_BENCH_JOBS_CONCURRENCY (%d) must be at least 1", n, c)
	}
	if env.cluster == nil {
		b.Skip("needs the local test cluster to run kwok")
	}
	ctx := context.Background()
	dyn := watcherSetup(b)
	ko := testcluster.KwokOptions{Heartbeat: true, PodStartDelay: podStart}
	k := startKwok(ctx, b, ko, 5*time.Minute)
	t0 := time.Now()
	names, err := k.CreateNodes(ctx, n, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%d SIMULATED nodes Ready %s after the first create", n, time.Since(t0).Round(time.Second))
	ko = k.Options()

	res := map[string]any{
		"simulated":                       true,
		"nodes":                           n,
		"concurrency":                     c,
		"kwok_heartbeat":                  true,
		"kwok_pod_start_delay_ms":         podStart.Milliseconds(),
		"kwok_pod_complete_after_s":       ko.PodCompleteAfter.Seconds(),
		"watcher_client_qps":              500,
		"watcher_client_burst":            1000,
		"kcm_client_qps":                  kcmQPS,
		"kcm_client_burst":                kcmBurst,
		"kcm_concurrent_job_syncs":        5,
		"jobs_ttl_seconds_after_finished": 0,
		"writes_method": "every writer (this test, the watcher, kube-controller-manager, kwok, kubelets) alike, from a side's first create " +
			"until its last object is gone: apiserver_request_total deltas of POST/PUT/PATCH/APPLY/DELETE/DELETECOLLECTION for every " +
			"resource but leases, *reviews, nodes and events; plus node writes at the side's own client; plus Event writes about the " +
			"side's objects (one create and count-1 updates per Event)",
	}

	runs := map[string]func(context.Context, testing.TB) sideResult{
		"watcher": func(ctx context.Context, t testing.TB) sideResult { return watcherSide(ctx, t, dyn, n, c, 500, 1000) },
		"jobs":    func(ctx context.Context, t testing.TB) sideResult { return jobsSide(ctx, t, names, c) },
		"watcher_kcm_qps": func(ctx context.Context, t testing.TB) sideResult {
			return watcherSide(ctx, t, dyn, n, c, kcmQPS, kcmBurst)
		},
	}
	sides := strings.Split(os.Getenv("NODEEXEC_BENCH_JOBS_SIDES"), ",")
	if sides[0] == "" {
		sides = []string{"watcher", "jobs"}
	}
	for _, s := range sides {
		if runs[s] == nil {
			b.Fatalf("NODEEXEC_BENCH_JOBS_SIDES: unknown side %q; want a list of watcher, jobs, watcher_kcm_qps", s)
		}
	}
	res["sides"] = sides
	out := map[string]*sideResult{}
	for _, s := range sides {
		cpu0 := cpuSeconds()
		m0 := writeMetrics(ctx, b)
		r := runs[s](ctx, b)
		d := writeMetrics(ctx, b).sub(m0)
		r.CPUSeconds = cpuSince(cpu0)
		r.WritesRaw, r.WritesBy = d.total(), d
		r.NodesPerMinute = round(float64(n) / r.RolloutSeconds * 60)
		out[s] = &r
		b.Logf("SIMULATED %s: %d nodes in %.1f s (%.0f nodes/min), at most %d pods running at once; %d API writes counted (%.2f per node before the background); objects gone %.1f s after the last node; CPU s %v; writes by verb and resource: %v",
			s, n, r.RolloutSeconds, r.NodesPerMinute, r.MaxRunning, r.WritesRaw, float64(r.WritesRaw)/float64(n), r.CleanupSeconds, r.CPUSeconds, r.WritesBy)
	}

	// Background: what the cluster writes when neither side runs, as a
	// check of the resources counted for every writer (measured after the
	// sides: right after the nodes are created, their first status updates
	// and Events are still coming in).
	const idle = 20 * time.Second
	m0 := writeMetrics(ctx, b)
	time.Sleep(idle)
	bg := writeMetrics(ctx, b).sub(m0)
	_, _, bgRest := bg.split()
	res["background_writes"], res["background_window_s"] = bg, idle.Seconds()
	b.Logf("background: in %s idle, %d API writes (leases and reviews left out), %d of them neither to nodes nor Events: %v", idle, bg.total(), bgRest.total(), bg)
	for _, s := range sides {
		r := out[s]
		nodes, _, rest := r.WritesBy.split()
		r.WritesNodesServer = nodes.total()
		for k, v := range r.ClientWrites {
			if f := strings.Fields(k); len(f) == 2 && (f[1] == "nodes" || strings.HasPrefix(f[1], "nodes/")) {
				r.WritesNodesOwn += v
			}
		}
		r.WritesBackground = int(float64(bgRest.total())/idle.Seconds()*r.WindowSeconds + 0.5)
		r.Writes = rest.total() + r.WritesNodesOwn + r.WritesEvents
		r.WritesPerNode = round(float64(r.Writes) / float64(n))
		res[s] = r
		b.Logf("SIMULATED %s: %d API writes = %.2f per node: %d neither to nodes nor Events (every writer; an idle window predicts %d of them), %d to nodes by the side's own client (%d by every writer), %d to Events of the side's objects",
			s, r.Writes, r.WritesPerNode, rest.total(), r.WritesBackground, r.WritesNodesOwn, r.WritesNodesServer, r.WritesEvents)
	}
	j := out["jobs"]
	for _, s := range []string{"watcher", "watcher_kcm_qps"} {
		w := out[s]
		if w == nil || j == nil {
			continue
		}
		thr, wr := round(w.NodesPerMinute/j.NodesPerMinute), round(w.WritesPerNode/j.WritesPerNode)
		suffix := strings.TrimPrefix(s, "watcher")
		res["throughput_ratio"+suffix], res["writes_per_node_ratio"+suffix] = thr, wr
		res["throughput_target_met"+suffix], res["writes_target_met"+suffix] = thr >= 1.5, wr <= 0.5
		b.Logf("SIMULATED %d nodes, concurrency %d: %s %.0f nodes/min, %.2f writes/node; Jobs %.0f nodes/min, %.2f writes/node; throughput ratio %.2f (target >= 1.5), writes ratio %.2f (target <= 0.5)",
			n, c, s, w.NodesPerMinute, w.WritesPerNode, j.NodesPerMinute, j.WritesPerNode, thr, wr)
	}
	res["target_throughput_ratio_min"], res["target_writes_per_node_ratio_max"] = 1.5, 0.5
	if p := os.Getenv("NODEEXEC_BENCH_WATCHER_JOBS_OUT"); p != "" {
		js, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(p, append(js, '\n'), 0o644); err != nil {
			b.Error(err)
		}
	}
}

// sideResult is one side's figures (JSON in the benchmark's output).
type sideResult struct {
	// RolloutSeconds: from the first create until the last node is done.
	RolloutSeconds float64 `json:"rollout_s"`
	NodesPerMinute float64 `json:"nodes_per_min"`
	// CleanupSeconds: from the last node done until every object of the
	// side (run pods; Jobs and their pods) is gone.
	CleanupSeconds float64 `json:"cleanup_s"`
	// WindowSeconds: RolloutSeconds + CleanupSeconds, the writes' window.
	WindowSeconds float64 `json:"window_s"`
	// MaxRunning: the most pods of the side not yet ended at once, as a pod
	// informer of this test saw them.
	MaxRunning int `json:"max_running_pods"`
	Succeeded  int `json:"succeeded"`
	Failed     int `json:"failed"`
	// WritesRaw: the counted writes in the window, every writer, every
	// resource (WritesBy).
	WritesRaw int `json:"writes_counted"`
	// Writes, the figure compared, is the sum of three parts:
	//   - the writes of every writer in the window to every resource but
	//     nodes and Events (pods, pod status, Jobs, Job status,
	//     NodeScripts...), from apiserver_request_total;
	//   - WritesNodesOwn, the node writes of the side's own client (the
	//     watcher's clientset; the Jobs driver's node labels): on the API
	//     server, kube-controller-manager's node lifecycle controller and
	//     kwok also rewrite simulated nodes whenever a heartbeat is late (a
	//     loaded machine), writes of neither side at a rate no idle window
	//     predicts;
	//   - WritesEvents, the Event writes about the side's objects, by
	//     object: Events go out asynchronously (kube-controller-manager's
	//     keep coming after the Jobs are gone) and the node lifecycle
	//     controller's NodeNotReady Events are neither side's.
	Writes        int     `json:"writes"`
	WritesPerNode float64 `json:"writes_per_node"`
	// WritesBackground: what an idle window's rate of the first part
	// predicts for this window (a check: about 0).
	WritesBackground int `json:"writes_background_check"`
	WritesNodesOwn   int `json:"writes_nodes_own_client"`
	// WritesNodesServer: the node writes in the window, every writer.
	WritesNodesServer int `json:"writes_nodes_all_writers"`
	// WritesEvents: for the watcher, its client's Event writes plus those
	// of other components about its run pods; for the Jobs, the Events in
	// their namespace (the Jobs' and their pods'), each Event one create
	// and count-1 updates, once their number has stopped growing.
	WritesEvents int `json:"writes_events"`
	// WritesBy: the counted writes by "VERB resource[/subresource]".
	WritesBy writeCounts `json:"writes_by"`
	// ClientWrites: the writes of the side's own client in this process (the
	// watcher's clientset; the Jobs driver's), by verb and resource.
	ClientWrites map[string]int     `json:"client_writes"`
	CPUSeconds   map[string]float64 `json:"cpu_s"`
}

// watcherSide rolls a NodeScript out to the n simulated nodes with
// maxConcurrency c, a watcher in this process whose client has qps and
// burst, stopped again when the side is done.
func watcherSide(ctx context.Context, t testing.TB, dyn dynamic.Interface, n, c int, qps float32, burst int) sideResult {
	t.Helper()
	name := uniqueName("bench-jobs-peer-")
	cleanupNodeScript(t, dyn, name)
	pods := recordPods(t, name)
	cs, wc := countingClient(t, qps, burst)
	stop := startWatcherWith(t, watcher.Options{Client: cs, Dynamic: dyn, SuccessLogLines: -1, CreateParallelism: 32})
	defer stop()
	t0 := time.Now()
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  nodeSelector: {matchLabels: {type: kwok}}
  script: 'true'
  rollout: {canary: 0, maxConcurrency: %d, maxFailures: "100%%"}
`, name, c))
	ns := waitNodeScript(ctx, t, dyn, name, 30*time.Minute, "complete", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete
	})
	done := time.Now()
	if int(ns.Status.Nodes) != n || int(ns.Status.Succeeded) != n {
		t.Errorf("watcher: status %+v; want %d nodes, all succeeded", ns.Status, n)
	}
	sel := v1alpha1.LabelNodeScript + "=" + name
	if !waitFor(5*time.Minute, func() bool {
		l, err := env.client.CoreV1().Pods(v1alpha1.DefaultNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		return err == nil && len(l.Items) == 0
	}) {
		t.Fatalf("watcher: run pods of %s still there 5 minutes after the rollout", name)
	}
	gone := time.Now()
	by, _, events := wc.counts()
	// Events of other components about the run pods (the watcher's own
	// are counted at its client).
	runPods := map[string]bool{}
	pods.mu.Lock()
	for _, names := range pods.pods {
		for _, p := range names {
			runPods[p] = true
		}
	}
	pods.mu.Unlock()
	events += eventWrites(ctx, t, v1alpha1.DefaultNamespace, func(e *corev1.Event) bool {
		return e.InvolvedObject.Kind == "Pod" && runPods[e.InvolvedObject.Name] && e.Source.Component != "nodeexec-watcher" && e.ReportingController != "nodeexec-watcher"
	})
	return sideResult{
		RolloutSeconds: round(done.Sub(t0).Seconds()),
		CleanupSeconds: round(gone.Sub(done).Seconds()),
		WindowSeconds:  round(gone.Sub(t0).Seconds()),
		MaxRunning:     pods.max(),
		Succeeded:      int(ns.Status.Succeeded),
		Failed:         int(ns.Status.Failed),
		ClientWrites:   by,
		WritesEvents:   events,
	}
}

// jobsSide runs system-upgrade-controller's model on nodes: one Job per
// node, at most c unfinished at once (see BenchmarkWatcherJobs), in a
// namespace of its own, deleted when the benchmark ends.
func jobsSide(ctx context.Context, t testing.TB, nodes []string, c int) sideResult {
	t.Helper()
	run := uniqueName("")
	label := "nodeexec.io/bench-jobs-" + run
	ns := jobsNamespace(ctx, t, run)
	cs, wc := countingClient(t, 500, 1000)

	// The driver's view: Jobs finishing (and the pods, to see the most
	// running at once) from informers of the run, as SUC watches its Jobs.
	var mu sync.Mutex
	finished := map[string]bool{} // Job name -> seen finished
	failed := 0
	live := map[types.UID]bool{}
	maxLive := 0
	slots := make(chan string, len(nodes)) // node of each Job seen finished
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = nodeexec.LabelRunID + "=" + run }))
	jobs, pods := f.Batch().V1().Jobs().Informer(), f.Core().V1().Pods().Informer()
	onJob := func(obj any) {
		j, ok := obj.(*batchv1.Job)
		if !ok {
			return
		}
		var ended, bad bool
		for _, cond := range j.Status.Conditions {
			if cond.Status == corev1.ConditionTrue && (cond.Type == batchv1.JobComplete || cond.Type == batchv1.JobFailed) {
				ended, bad = true, cond.Type == batchv1.JobFailed
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if !ended || finished[j.Name] {
			return
		}
		finished[j.Name] = true
		if bad {
			failed++
		}
		slots <- j.Spec.Template.Spec.NodeName
	}
	_, _ = jobs.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onJob, UpdateFunc: func(_, obj any) { onJob(obj) }})
	onPod := func(obj any, deleted bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if deleted || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			delete(live, p.UID)
		} else {
			live[p.UID] = true
		}
		maxLive = max(maxLive, len(live))
	}
	_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { onPod(obj, false) },
		UpdateFunc: func(_, obj any) { onPod(obj, false) },
		DeleteFunc: func(obj any) { onPod(obj, true) },
	})
	stop := make(chan struct{})
	defer close(stop)
	f.Start(stop)
	if !cache.WaitForCacheSync(stop, jobs.HasSynced, pods.HasSynced) {
		t.Fatal("jobs: informers did not sync")
	}

	deadline := time.Now().Add(30 * time.Minute)
	errs := make(chan error, len(nodes))
	create := func(node string) {
		_, err := cs.BatchV1().Jobs(ns).Create(ctx, benchJob(run, node, deadline), metav1.CreateOptions{})
		if err != nil {
			errs <- fmt.Errorf("create the Job of %s: %w", node, err)
		}
	}
	// SUC labels a node once its Job has completed.
	labelNode := func(node string) {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"done"}}}`, label)
		if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			errs <- fmt.Errorf("label node %s: %w", node, err)
		}
	}
	t0 := time.Now()
	next := 0
	for ; next < min(c, len(nodes)); next++ {
		go create(nodes[next])
	}
	timeout := time.After(30 * time.Minute)
	var wg sync.WaitGroup
	for done := 0; done < len(nodes); done++ {
		select {
		case node := <-slots:
			wg.Add(1)
			go func(node string, next int) {
				defer wg.Done()
				labelNode(node)
				if next < len(nodes) {
					create(nodes[next])
				}
			}(node, next)
			next++
		case err := <-errs:
			t.Fatal(err)
		case <-timeout:
			t.Fatalf("jobs: %d of %d Jobs finished within 30 minutes", done, len(nodes))
		}
	}
	end := time.Now()
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	// Finished Jobs go by their TTL (0 s): the ttl-after-finished controller
	// deletes each (foreground), the garbage collector its pod.
	if !waitFor(10*time.Minute, func() bool {
		jl, err := env.client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(jl.Items) > 0 {
			return false
		}
		pl, err := env.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(pl.Items) == 0
	}) {
		t.Fatalf("jobs: Jobs or pods still in %s 10 minutes after the last Job finished", ns)
	}
	gone := time.Now()
	events := eventWrites(ctx, t, ns, func(*corev1.Event) bool { return true })
	mu.Lock()
	defer mu.Unlock()
	by, _, _ := wc.counts()
	return sideResult{
		RolloutSeconds: round(end.Sub(t0).Seconds()),
		CleanupSeconds: round(gone.Sub(end).Seconds()),
		WindowSeconds:  round(gone.Sub(t0).Seconds()),
		MaxRunning:     maxLive,
		Succeeded:      len(nodes) - failed,
		Failed:         failed,
		ClientWrites:   by,
		WritesEvents:   events,
	}
}

// jobsNamespace creates the Jobs' namespace, deleted when the benchmark
// ends, and waits for its default ServiceAccount (the Jobs' pods are
// refused without it).
func jobsNamespace(ctx context.Context, t testing.TB, run string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench-jobs-" + run, Labels: map[string]string{
		nodeexec.LabelManagedBy: nodeexec.ManagedByValue, nodeexec.LabelRunID: run,
	}}}
	if _, err := env.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_ = env.client.CoreV1().Namespaces().Delete(cctx, ns.Name, metav1.DeleteOptions{})
		waitFor(time.Minute, func() bool {
			_, err := env.client.CoreV1().Namespaces().Get(cctx, ns.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
	})
	if !waitFor(time.Minute, func() bool {
		_, err := env.client.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	}) {
		t.Fatalf("namespace %s: no default ServiceAccount within a minute", ns.Name)
	}
	return ns.Name
}

// benchJob is the Job of one node, shaped as system-upgrade-controller's
// (pkg/upgrade/job.New) where it matters to the API server: one pod,
// restartPolicy Never, backoffLimit 2, activeDeadlineSeconds 600; pinned by
// spec.nodeName (SUC uses a required node affinity on kubernetes.io/hostname,
// which adds the scheduler's binding to each pod) and deleted at once when
// finished (SUC's ttlSecondsAfterFinished is 900: the same deletes, later).
// Its pod runs sh -c true and carries managed-by=nodeexec, so kwok ends it
// as it ends the watcher's run pods.
func benchJob(run, node string, deadline time.Time) *batchv1.Job {
	labels := map[string]string{nodeexec.LabelManagedBy: nodeexec.ManagedByValue, nodeexec.LabelRunID: run}
	meta := metav1.ObjectMeta{
		Labels:      labels,
		Annotations: map[string]string{nodeexec.AnnotationNode: node, nodeexec.AnnotationDeadline: deadline.UTC().Format(time.RFC3339)},
	}
	job := meta.DeepCopy()
	job.Name = "apply-bench-on-" + node
	return &batchv1.Job{
		ObjectMeta: *job,
		Spec: batchv1.JobSpec{
			BackoffLimit:            ptr.To[int32](jobsBackoffLimit),
			ActiveDeadlineSeconds:   ptr.To[int64](jobsActiveDeadline),
			TTLSecondsAfterFinished: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: meta,
				Spec: corev1.PodSpec{
					NodeName:                      node,
					RestartPolicy:                 corev1.RestartPolicyNever,
					TerminationGracePeriodSeconds: ptr.To[int64](0),
					AutomountServiceAccountToken:  ptr.To(false),
					Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{
						Name: "upgrade", Image: testcluster.BusyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
						Command: []string{"sh", "-c", "true"},
					}},
				},
			},
		},
	}
}

// writeCounts are apiserver_request_total's write requests by "VERB
// resource[/subresource]".
type writeCounts map[string]int

// writeMetrics reads the API server's apiserver_request_total and returns
// its write requests (POST, PUT, PATCH, APPLY, DELETE, DELETECOLLECTION) by
// verb and resource, every response code, leases and *reviews left out.
func writeMetrics(ctx context.Context, t testing.TB) writeCounts {
	t.Helper()
	raw, err := env.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("reading apiserver metrics: %v", err)
	}
	out := writeCounts{}
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		i := strings.LastIndexByte(line, '}')
		l := parseLabels(line[len("apiserver_request_total{"):i])
		v, err := strconv.ParseFloat(strings.TrimSpace(line[i+1:]), 64)
		if err != nil {
			continue
		}
		switch l["verb"] {
		case "POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION":
		default:
			continue
		}
		if l["resource"] == "leases" || strings.HasSuffix(l["resource"], "reviews") {
			continue
		}
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		out[key] += int(v)
	}
	return out
}

// sub returns w minus before, keys with no change left out.
func (w writeCounts) sub(before writeCounts) writeCounts {
	out := writeCounts{}
	for k, v := range w {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// split returns the writes to nodes (and their subresources), to Events
// (core and events.k8s.io), and the rest.
func (w writeCounts) split() (nodes, events, rest writeCounts) {
	nodes, events, rest = writeCounts{}, writeCounts{}, writeCounts{}
	for k, v := range w {
		f := strings.Fields(k)
		switch {
		case len(f) == 2 && (f[1] == "nodes" || strings.HasPrefix(f[1], "nodes/")):
			nodes[k] = v
		case len(f) == 2 && f[1] == "events":
			events[k] = v
		default:
			rest[k] = v
		}
	}
	return nodes, events, rest
}

// eventWrites waits until the Events in namespace that match keep stop
// growing (no change for 10 s, at most 2 minutes) and returns their writes:
// one create and count-1 updates each.
func eventWrites(ctx context.Context, t testing.TB, namespace string, keep func(*corev1.Event) bool) int {
	t.Helper()
	last, since := -1, time.Now()
	for start := time.Now(); time.Since(start) < 2*time.Minute; time.Sleep(2 * time.Second) {
		l, err := env.client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("list Events in %s: %v", namespace, err)
		}
		w := 0
		for i := range l.Items {
			if e := &l.Items[i]; keep(e) {
				w += max(int(e.Count), 1)
			}
		}
		if w != last {
			last, since = w, time.Now()
		} else if time.Since(since) >= 10*time.Second {
			break
		}
	}
	return last
}

func (w writeCounts) total() int {
	s := 0
	for _, v := range w {
		s += v
	}
	return s
}

// String lists the counts, largest first.
func (w writeCounts) String() string {
	keys := make([]string, 0, len(w))
	for k := range w {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return w[keys[i]] > w[keys[j]] || w[keys[i]] == w[keys[j]] && keys[i] < keys[j] })
	var s strings.Builder
	for i, k := range keys {
		if i > 0 {
			s.WriteString(", ")
		}
		fmt.Fprintf(&s, "%s %d", k, w[k])
	}
	return s.String()
}

// envInt is the integer in the environment variable name, or def when it
// is unset.
func envInt(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	i, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: want an integer", name, v)
	}
	return i
}

// countingClient is a clientset on the test cluster with client-side limits
// qps and burst, whose write requests wc counts (writeCounter.note).
func countingClient(t testing.TB, qps float32, burst int) (*kubernetes.Clientset, *writeCounter) {
	t.Helper()
	wc := &writeCounter{by: map[string]int{}}
	cfg := *env.config
	cfg.QPS, cfg.Burst = qps, burst
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			wc.note(r)
			return rt.RoundTrip(r)
		})
	})
	cs, err := kubernetes.NewForConfig(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs, wc
}
