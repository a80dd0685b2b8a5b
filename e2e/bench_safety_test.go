//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/nodeexec/nodeexec/nodeexec/watcher"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// safetyGateInterval is the always-open gate's spec.gates[].interval.
const safetyGateInterval = 5 * time.Second

// safetyGateQuery returns no series, so a gate without condition is open.
const safetyGateQuery = "vector(0) > 1"

// BenchmarkWatcherSafety measures what issue 23's safety machinery costs a
// rollout, at NODEEXEC_BENCH_NODES (default 1,000) SIMULATED kwok nodes, in
// one run on the same nodes and watcher: NodeScripts that differ only in
// their gate and budget roll out in turn, alternately,
// NODEEXEC_BENCH_SAFETY_ROUNDS (default 2) times each (order effects):
//   - A, plain: spec.maintenance {cordon: true, prePull: false}, canary 0,
//     maxConcurrency 100%, maxFailures 100%;
//   - B, the same with one always-open Prometheus gate (the test cluster's
//     real Prometheus, query safetyGateQuery, interval 5 s) and
//     spec.maintenanceBudget naming a MaintenanceBudget over the simulated
//     nodes with maxUnavailable 100%.
//
// For each rollout: throughput (nodes/s, apply to Complete), the API writes
// per node of the watcher's clientset, and, for B, the gate queries counted
// both at Prometheus (its own prometheus_http_requests_total for
// /api/v1/query on its /metrics, before and after: nothing else queries it
// under the e2e lock) and by the watcher
// (nodeexec_watcher_gate_queries_total), against rollout/interval + 1.
// Targets (issue 23): B/A throughput >= 0.95; at most one query per gate
// per interval, plus one.
//
// Results go to NODEEXEC_BENCH_WATCHER_SAFETY_OUT (JSON) and the log.
func BenchmarkWatcherSafety(b *testing.B) {
	n, rounds := 1000, 2
	if v := os.Getenv("NODEEXEC_BENCH_NODES"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	if v := os.Getenv("NODEEXEC_BENCH_SAFETY_ROUNDS"); v != "" {
		rounds, _ = strconv.Atoi(v)
	}
	if env.cluster == nil {
		b.Skip("needs the local test cluster (kwok, Prometheus)")
	}
	ctx := context.Background()
	dyn := watcherSetup(b)
	installBudgetCRD(ctx, b, dyn)
	k, _ := simulatedNodes(ctx, b, n, 0)
	b.Cleanup(func() {
		if err := k.DeleteNodes(context.Background()); err != nil {
			b.Errorf("deleting the simulated nodes: %v", err)
		}
	})
	budget := uniqueName("bench-safety-")
	createBudgetDoc(ctx, b, dyn, fmt.Sprintf(`apiVersion: nodeexec.io/v1alpha1
kind: MaintenanceBudget
metadata: {name: %s}
spec:
  nodeSelector: {matchLabels: {type: kwok}}
  maxUnavailable: "100%%"
`, budget))
	reg := prometheus.NewRegistry()
	writes := startSafetyWatcher(b, dyn, reg)
	prom := env.cluster.PrometheusURL()

	type run struct {
		Kind           string             `json:"kind"`
		Name           string             `json:"name"`
		RolloutS       float64            `json:"rollout_s"`
		NodesPerS      float64            `json:"nodes_per_s"`
		WritesPerNode  float64            `json:"writes_per_node"`
		Writes         map[string]int     `json:"writes"`
		CPUS           map[string]float64 `json:"cpu_s"`
		Succeeded      int32              `json:"succeeded"`
		Failed         int32              `json:"failed"`
		PromQueries    float64            `json:"prometheus_queries,omitempty"`
		WatcherQueries float64            `json:"watcher_gate_queries,omitempty"`
		QueryBound     float64            `json:"query_bound,omitempty"`
	}
	var runs []run
	b.ResetTimer()
	for r := 0; r < rounds; r++ {
		for _, kind := range []string{"A", "B"} {
			if r%2 == 1 { // A B, then B A: each goes first once
				kind = map[string]string{"A": "B", "B": "A"}[kind]
			}
			name := uniqueName("bench-safety-" + strings.ToLower(kind) + "-")
			cleanupNodeScript(b, dyn, name)
			extra := ""
			if kind == "B" {
				extra = fmt.Sprintf(`  maintenanceBudget: %s
  gates:
  - name: always-open
    interval: %s
    prometheus: {url: %q, query: %q}
`, budget, safetyGateInterval, prom, safetyGateQuery)
			}
			q0, err := promQueryRequests(ctx, prom)
			if err != nil {
				b.Fatal(err)
			}
			w0 := gateQueries(b, reg, name)
			writes.reset()
			cpu0 := cpuSeconds()
			t0 := time.Now()
			applyNodeScript(ctx, b, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  nodeSelector: {matchLabels: {type: kwok}}
  script: 'true'
  rollout: {canary: 0, maxConcurrency: "100%%", maxFailures: "100%%"}
  maintenance: {cordon: true, prePull: false}
%s`, name, extra))
			ns := waitNodeScript(ctx, b, dyn, name, 30*time.Minute, "complete", func(ns *v1alpha1.NodeScript) bool {
				return ns.Status.Stage == v1alpha1.StageComplete
			})
			took := time.Since(t0)
			cpu := cpuSince(cpu0)
			by, all, _ := writes.counts()
			// Prometheus' counter is read once the rollout is Complete (no
			// more gate reads); the watcher's too.
			q1, err := promQueryRequests(ctx, prom)
			if err != nil {
				b.Fatal(err)
			}
			ru := run{Kind: kind, Name: name, RolloutS: round(took.Seconds()), NodesPerS: round(float64(n) / took.Seconds()),
				WritesPerNode: round(float64(all) / float64(n)), Writes: by, CPUS: cpu, Succeeded: ns.Status.Succeeded, Failed: ns.Status.Failed}
			if kind == "B" {
				ru.PromQueries, ru.WatcherQueries = q1-q0, gateQueries(b, reg, name)-w0
				ru.QueryBound = float64(int(took/safetyGateInterval) + 1)
			}
			b.Logf("SIMULATED %d nodes, %s (%s): rollout %s = %.1f nodes/s; %d succeeded, %d failed; %.2f API writes per node %v; CPU s %v; gate queries: Prometheus saw %.0f, watcher counted %.0f, bound %.0f (rollout / %s + 1)",
				n, kind, name, took.Round(time.Millisecond), ru.NodesPerS, ns.Status.Succeeded, ns.Status.Failed, ru.WritesPerNode, by, cpu,
				ru.PromQueries, ru.WatcherQueries, ru.QueryBound, safetyGateInterval)
			runs = append(runs, ru)
		}
	}
	b.StopTimer()

	mean := func(kind string, f func(run) float64) float64 {
		var s float64
		var c int
		for _, r := range runs {
			if r.Kind == kind {
				s += f(r)
				c++
			}
		}
		return s / float64(max(c, 1))
	}
	thr := func(r run) float64 { return r.NodesPerS }
	wpn := func(r run) float64 { return r.WritesPerNode }
	a, bb := mean("A", thr), mean("B", thr)
	res := map[string]any{
		"simulated": true, "nodes": n, "rounds": rounds, "gate_interval_s": safetyGateInterval.Seconds(), "gate_query": safetyGateQuery,
		"runs": runs, "a_nodes_per_s": round(a), "b_nodes_per_s": round(bb), "throughput_ratio_b_a": round(bb / a),
		"a_writes_per_node": round(mean("A", wpn)), "b_writes_per_node": round(mean("B", wpn)),
	}
	queriesOK := true
	for _, r := range runs {
		if r.Kind == "B" && (r.PromQueries > r.QueryBound || r.WatcherQueries > r.QueryBound) {
			queriesOK = false
		}
	}
	res["queries_within_bound"] = queriesOK
	b.Logf("SIMULATED %d nodes, %d rounds: A %.1f nodes/s, B (gate + budget) %.1f nodes/s: B/A %.3f (issue 23 target >= 0.95); API writes per node A %.2f, B %.2f; gate queries within one per %s + 1: %v",
		n, rounds, a, bb, bb/a, mean("A", wpn), mean("B", wpn), safetyGateInterval, queriesOK)
	if !queriesOK {
		b.Errorf("more gate queries than one per gate per %s plus one: %+v", safetyGateInterval, runs)
	}
	if out := os.Getenv("NODEEXEC_BENCH_WATCHER_SAFETY_OUT"); out != "" {
		j, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(out, append(j, '\n'), 0o644); err != nil {
			b.Error(err)
		}
	}
}

// startSafetyWatcher is startScaleWatcher with the watcher's metrics
// registered in reg (none when nil).
func startSafetyWatcher(t testing.TB, dyn dynamic.Interface, reg prometheus.Registerer) *writeCounter {
	t.Helper()
	wc := &writeCounter{by: map[string]int{}}
	cfg := *env.config
	cfg.QPS, cfg.Burst = 500, 1000
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
	startWatcherWith(t, watcher.Options{Client: cs, Dynamic: dyn, SuccessLogLines: -1, CreateParallelism: 32, Metrics: reg})
	return wc
}

// createBudgetDoc creates the MaintenanceBudget in doc, deleted when the
// test ends.
func createBudgetDoc(ctx context.Context, t testing.TB, dyn dynamic.Interface, doc string) {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	if _, err := dyn.Resource(v1alpha1.BudgetResource).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = dyn.Resource(v1alpha1.BudgetResource).Delete(context.Background(), u.GetName(), metav1.DeleteOptions{})
	})
}

// gateQueries sums nodeexec_watcher_gate_queries_total of NodeScript name
// (every gate, every result) in reg.
func gateQueries(t testing.TB, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var s float64
	for _, mf := range mfs {
		if mf.GetName() != "nodeexec_watcher_gate_queries_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "nodescript" && l.GetValue() == name {
					s += m.GetCounter().GetValue()
				}
			}
		}
	}
	return s
}

// promQueryRequests reads Prometheus' own count of instant queries
// (prometheus_http_requests_total{handler="/api/v1/query"}, every code)
// from its /metrics endpoint at base; reading it is not a query.
func promQueryRequests(ctx context.Context, base string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("reading Prometheus' metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("reading Prometheus' metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("parsing Prometheus' metrics: %w", err)
	}
	var s float64
	for _, m := range mfs["prometheus_http_requests_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "handler" && l.GetValue() == "/api/v1/query" {
				s += m.GetCounter().GetValue()
			}
		}
	}
	return s, nil
}
