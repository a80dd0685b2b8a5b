//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeexec/nodeexec/internal/testcluster"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/resident"
)

// BenchmarkAgentScale measures `agent install` (resident.Install, the
// library call the CLI makes) on every node of a cluster grown by
// NODEEXEC_BENCH_NODES SIMULATED kwok nodes (default 1,000; a
// comma-separated list runs each size in turn), against kwok's raw pod
// rate in the same run (Kwok.RawPodRate: one bare pod per node, no
// controller, 32 creating goroutines), then `agent uninstall`:
//   - the DaemonSet rollout: from Install's call to its return (every
//     node's agent available), and from the watch of the agent pods the
//     first and the last pod created (the DaemonSet controller's pace) and
//     the last pod Ready;
//   - agent pods per second against raw pods per second (the raw figure
//     includes each pod's PodCompleteAfter of 1 s, the agents' none);
//   - the API requests Install itself made (counted at its client's
//     transport, by verb and resource): its wait costs a DaemonSet get and
//     a list of the Pending agent pods per check, whatever the size;
//   - CPU seconds of the cluster's processes during each phase;
//   - Uninstall's time until every agent pod is gone.
//
// The cluster's real nodes get an agent too (the DaemonSet selects every
// Linux node): agent_pods counts them. kwok runs with Heartbeat: without
// it the node lifecycle controller marks the pods of a simulated node
// NotReady whenever the node's status is 50 s old, and kwok's stock stages
// never make a Running pod Ready again, so the rollout would not complete. Results go to
// NODEEXEC_BENCH_AGENT_SCALE_OUT (JSON, "simulated": true), merged by size
// into what the file holds, and to the log.
func BenchmarkAgentScale(b *testing.B) {
	if env.cluster == nil {
		b.Skip("needs the local test cluster to run kwok")
	}
	sizes := []int{1000}
	if v := os.Getenv("NODEEXEC_BENCH_NODES"); v != "" {
		sizes = nil
		for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }) {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 {
				b.Fatalf("NODEEXEC_BENCH_NODES=%q: want node counts such as 1000 or 1000,5000", v)
			}
			sizes = append(sizes, n)
		}
	}
	// NODEEXEC_BENCH_BUDGET bounds the measurements (a Go duration; default
	// 80m): past it they fail and the cleanups below still run, so that a
	// run that cannot finish in its slot leaves the cluster as it was.
	budget := 80 * time.Minute
	if v := os.Getenv("NODEEXEC_BENCH_BUDGET"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			b.Fatalf("NODEEXEC_BENCH_BUDGET=%q: want a positive Go duration such as 9m", v)
		}
		budget = d
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	k := startKwok(ctx, b, testcluster.KwokOptions{Heartbeat: true}, 10*time.Minute)
	out := os.Getenv("NODEEXEC_BENCH_AGENT_SCALE_OUT")
	doc := map[string]any{}
	if old, err := os.ReadFile(out); out != "" && err == nil {
		_ = json.Unmarshal(old, &doc)
	}
	runs, _ := doc["runs"].(map[string]any)
	if runs == nil {
		runs = map[string]any{}
	}
	b.ResetTimer()
	for _, n := range sizes {
		res := agentScaleRun(ctx, b, k, n)
		runs[strconv.Itoa(n)] = res
		doc["simulated"], doc["runs"] = true, runs
		doc["what"] = "agent install (resident.Install) on SIMULATED kwok nodes plus the cluster's real ones: DaemonSet rollout until every agent is available, against kwok's raw pod rate (one bare pod per node, no controller) in the same run"
		if out != "" {
			j, _ := json.MarshalIndent(doc, "", "  ")
			if err := os.WriteFile(out, append(j, '\n'), 0o644); err != nil {
				b.Error(err)
			}
		}
	}
}

// agentScaleRun is one size of BenchmarkAgentScale: it creates n simulated
// nodes, measures, and deletes them.
func agentScaleRun(ctx context.Context, b *testing.B, k *testcluster.Kwok, n int) map[string]any {
	b.Helper()
	t0 := time.Now()
	names, err := k.CreateNodes(ctx, n, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if err := k.DeleteNodes(cctx); err != nil {
			b.Errorf("deleting the simulated nodes: %v", err)
		}
	}()
	b.Logf("SIMULATED %d nodes Ready in %s", n, time.Since(t0).Round(time.Second))
	res := map[string]any{"simulated": true, "nodes": n, "real_nodes": len(env.nodes), "kwok_heartbeat": true}

	// agent install, its pods watched from before the DaemonSet exists.
	ns := uniqueName("nodeexec-agents-bench-")
	counts := &agentScaleCounts{n: map[string]int{}}
	cfg := *env.config
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return agentScaleRT{rt, counts} }
	client := kubernetes.NewForConfigOrDie(&cfg)
	b.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if err := resident.Uninstall(cctx, env.client, resident.Options{Namespace: ns, Timeout: 10 * time.Minute}); err != nil {
			b.Errorf("uninstalling the agents in %s: %v", ns, err)
		}
	})
	seen := watchAgentPods(ctx, b, ns)
	cpu0 := cpuSeconds()
	start := time.Now()
	if err := resident.Install(ctx, client, resident.Options{Namespace: ns, Image: agent.DefaultImage, Timeout: 30 * time.Minute}); err != nil {
		b.Fatal(err)
	}
	took := time.Since(start)
	res["cpu_s_install"] = cpuSince(cpu0)
	first, lastCreated, lastReady, pods := seen.stop(start)
	if want := n + len(env.nodes); pods != want {
		b.Errorf("%d agent pods Ready, want %d (every simulated and real node)", pods, want)
	}
	rate := float64(pods) / took.Seconds()
	res["agent_pods"], res["install_s"], res["agent_pods_per_s"] = pods, round(took.Seconds()), round(rate)
	res["first_pod_created_s"], res["last_pod_created_s"], res["last_pod_ready_s"] = round(first.Seconds()), round(lastCreated.Seconds()), round(lastReady.Seconds())
	by, total := counts.snapshot()
	res["install_requests"], res["install_requests_total"] = by, total
	b.Logf("SIMULATED %d nodes: agent install: %d agents available in %s = %.1f pods/s; pods created %s..%s, last Ready %s; Install's own API requests %d: %v",
		n, pods, took.Round(time.Millisecond), rate, first.Round(time.Millisecond), lastCreated.Round(time.Millisecond), lastReady.Round(time.Millisecond), total, by)

	cpu0 = cpuSeconds()
	start = time.Now()
	if err := resident.Uninstall(ctx, env.client, resident.Options{Namespace: ns, Timeout: 10 * time.Minute}); err != nil {
		b.Fatal(err)
	}
	res["uninstall_s"], res["cpu_s_uninstall"] = round(time.Since(start).Seconds()), cpuSince(cpu0)
	b.Logf("SIMULATED %d nodes: agent uninstall: every agent pod and the namespace gone in %s", n, time.Since(start).Round(time.Millisecond))

	// The peer, after the agents are gone: kwok's raw pod rate, one bare
	// pod per simulated node. A failure of its own is recorded, not fatal:
	// the rollout's figures stand.
	rawNS := agentScaleNamespace(ctx, b, "bench-agent-raw-")
	cpu0 = cpuSeconds()
	created, completed, err := k.RawPodRate(ctx, rawNS, names, 32)
	if err != nil {
		b.Errorf("the raw pod rate: %v", err)
		res["raw_error"] = err.Error()
		return res
	}
	raw := float64(n) / completed.Seconds()
	res["raw_pods_per_s"], res["raw_created_s"], res["raw_completed_s"], res["cpu_s_raw"] = round(raw), round(created.Seconds()), round(completed.Seconds()), cpuSince(cpu0)
	res["rate_ratio_vs_raw"] = round(rate / raw)
	b.Logf("SIMULATED %d nodes: raw pod rate %.1f/s (created in %s, all ended in %s); agent install %.1f pods/s: ratio %.2f", n, raw, created.Round(time.Millisecond), completed.Round(time.Millisecond), rate, rate/raw)
	return res
}

// agentScaleNamespace creates a namespace deleted when the benchmark ends and
// waits for its default ServiceAccount.
func agentScaleNamespace(ctx context.Context, tb testing.TB, prefix string) string {
	tb.Helper()
	runID := uniqueName("bench-")
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: uniqueName(prefix), Labels: map[string]string{
		nodeexec.LabelManagedBy: nodeexec.ManagedByValue, nodeexec.LabelRunID: runID}}}
	if _, err := env.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = env.client.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), ns.Name, metav1.DeleteOptions{})
	})
	if err := testcluster.WaitDefaultServiceAccount(ctx, env.client, ns.Name); err != nil {
		tb.Fatal(err)
	}
	return ns.Name
}

// agentScaleCounts counts API requests by verb and resource.
type agentScaleCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *agentScaleCounts) snapshot() (map[string]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out, total := map[string]int{}, 0
	for k, v := range c.n {
		out[k], total = v, total+v
	}
	return out, total
}

type agentScaleRT struct {
	rt http.RoundTripper
	c  *agentScaleCounts
}

func (c agentScaleRT) RoundTrip(r *http.Request) (*http.Response, error) {
	// /api/v1/namespaces/NS/RESOURCE[/NAME] or /apis/G/V/namespaces/NS/RESOURCE[/NAME], or a cluster-scoped /.../RESOURCE[/NAME]
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	rest := parts[min(len(parts), 2):]
	if parts[0] == "apis" {
		rest = parts[min(len(parts), 3):]
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		rest = rest[2:]
	}
	key := r.Method + " " + strings.Join(rest, "/")
	if len(rest) >= 1 {
		key = r.Method + " " + rest[0]
		if r.Method == http.MethodGet && len(rest) == 1 {
			key = "LIST " + rest[0]
		}
	}
	c.c.mu.Lock()
	c.c.n[key]++
	c.c.mu.Unlock()
	return c.rt.RoundTrip(r)
}

// agentPodWatch records when each agent pod in a namespace was first seen
// and first Ready.
type agentPodWatch struct {
	w       watch.Interface
	done    chan struct{}
	mu      sync.Mutex
	created map[string]time.Time
	ready   map[string]time.Time
}

func watchAgentPods(ctx context.Context, tb testing.TB, ns string) *agentPodWatch {
	tb.Helper()
	w, err := env.client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: resident.Selector()})
	if err != nil {
		tb.Fatal(err)
	}
	a := &agentPodWatch{w: w, done: make(chan struct{}), created: map[string]time.Time{}, ready: map[string]time.Time{}}
	go func() {
		defer close(a.done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			now := time.Now()
			a.mu.Lock()
			if _, seen := a.created[p.Name]; !seen {
				a.created[p.Name] = now
			}
			if _, seen := a.ready[p.Name]; !seen && agentPodReady(p) {
				a.ready[p.Name] = now
			}
			a.mu.Unlock()
		}
	}()
	return a
}

// stop ends the watch and returns, from start, when the first and the last
// agent pod were seen and the last became Ready, and how many are Ready.
func (a *agentPodWatch) stop(start time.Time) (first, lastCreated, lastReady time.Duration, ready int) {
	time.Sleep(time.Second) // events on their way
	a.w.Stop()
	<-a.done
	a.mu.Lock()
	defer a.mu.Unlock()
	var cs []time.Duration
	for _, t := range a.created {
		cs = append(cs, t.Sub(start))
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i] < cs[j] })
	if len(cs) > 0 {
		first, lastCreated = cs[0], cs[len(cs)-1]
	}
	for _, t := range a.ready {
		lastReady = max(lastReady, t.Sub(start))
	}
	return first, lastCreated, lastReady, len(a.ready)
}

func agentPodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
