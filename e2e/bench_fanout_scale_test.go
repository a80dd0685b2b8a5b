//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeexec/nodeexec/internal/testcluster"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/resident"
)

// The environment of BenchmarkFanoutScale (`make bench-fanout-scale` sets the
// first from BENCH_SCALE_NODES).
const (
	// scaleNodesEnv lists the fleet sizes, comma-separated (default
	// "100,1000,5000").
	scaleNodesEnv = "NODEEXEC_BENCH_SCALE_NODES"
	// scaleConcurrencyEnv is the raised --max-concurrency (default 100); the
	// default one is nodeexec.DefaultMaxConcurrency.
	scaleConcurrencyEnv = "NODEEXEC_BENCH_SCALE_CONCURRENCY"
	// scalePeerNodesEnv is the largest fleet the kubectl peers run on
	// (default 1000: the pods peer starts one kubectl per node, on the
	// 2 cores the cluster runs on too).
	scalePeerNodesEnv = "NODEEXEC_BENCH_SCALE_PEER_NODES"
	// scalePathsEnv lists the paths: pods (the default nsenter pod per
	// node) and resident (--use-resident), default both; "none" makes no
	// pair (only the extras).
	scalePathsEnv = "NODEEXEC_BENCH_SCALE_PATHS"
	// scaleRealEnv, set to 1, runs on the real nodes instead of simulated
	// ones (to debug the harness; the fleet sizes are then ignored).
	scaleRealEnv = "NODEEXEC_BENCH_SCALE_REAL"
	// scaleOutEnv is where the JSON goes.
	scaleOutEnv = "NODEEXEC_BENCH_SCALE_OUT"
	// scaleRaisedQPSEnv is nodeexec's --qps with the raised concurrency
	// (default 300, --burst twice that): at the default 50 requests/s a
	// run of 3 requests per node is bound to 17 nodes/s whatever C is.
	scaleRaisedQPSEnv = "NODEEXEC_BENCH_SCALE_RAISED_QPS"
	// scaleBudgetEnv bounds the measurements (a duration, default 22m):
	// no run starts after it, so the cleanup still fits the cluster slot;
	// the runs left out are listed in the JSON.
	scaleBudgetEnv = "NODEEXEC_BENCH_SCALE_BUDGET"
	// scaleLargeConcurrencyEnv says which concurrencies run beyond the
	// peers' sizes: "default" (the default), "raised" or "default,raised".
	// On this machine a raised one is no faster there (the simulated
	// nodes' commands share the client's 2 cores) and takes longer.
	scaleLargeConcurrencyEnv = "NODEEXEC_BENCH_SCALE_LARGE_CONCURRENCY"
	// scalePeerConcurrencyEnv says the same up to the peers' sizes
	// (default "default,raised").
	scalePeerConcurrencyEnv = "NODEEXEC_BENCH_SCALE_PEER_CONCURRENCY"
	// scaleExtrasEnv lists the runs made besides the pairs: ndjson
	// (nodeexec -o ndjson on the pods path) and interrupt (Ctrl-C on the
	// largest fleet); default "ndjson,interrupt", "none" for neither.
	scaleExtrasEnv = "NODEEXEC_BENCH_SCALE_EXTRAS"
)

// scaleRun is one timed run of one tool over a whole fleet.
type scaleRun struct {
	Tool        string `json:"tool"` // nodeexec, or kubectl_xargs (the peer)
	Path        string `json:"path"` // pods or resident
	Output      string `json:"output"`
	Nodes       int    `json:"nodes"`
	Concurrency int    `json:"concurrency"`
	QPS         int    `json:"client_qps,omitempty"` // nodeexec's --qps (0: its default)
	Command     string `json:"command"`
	ExitCode    int    `json:"exit_code"`
	// Seconds from the process start: to its exit, and to the first and the
	// last line of a node's output as it arrived on stdout.
	WallS        float64 `json:"wall_s"`
	FirstOutputS float64 `json:"first_output_s"`
	LastOutputS  float64 `json:"last_output_s"`
	// OutputLines counts the lines of the command's output ("ready");
	// NodesWithOutput the distinct nodes they name (nodeexec: its prefix or
	// record; the peer's lines name no node: 0).
	OutputLines     int `json:"output_lines"`
	NodesWithOutput int `json:"nodes_with_output"`
	// Memory sampled every 100 ms (sampleRSS): the largest peak RSS of one
	// process of the run (the peer: its largest kubectl, C run at once),
	// and the largest total of all of them at one moment.
	MaxRSSMiB   float64 `json:"max_rss_mib"`
	GroupRSSMiB float64 `json:"group_rss_mib"`
	// User+system CPU of the process and every child it waited for
	// (rusage from wait4; the peer: sh, xargs and all its kubectls).
	CPUS float64 `json:"cpu_s"`
	// The leader's (nodeexec's) RSS at its largest sample: its anonymous
	// and file-backed parts.
	PeakRSSAnonMiB float64 `json:"peak_rss_anon_mib,omitempty"`
	PeakRSSFileMiB float64 `json:"peak_rss_file_mib,omitempty"`
	// The run's API requests, from kube-apiserver's audit log: every
	// request of the run's own user (a client certificate made for it, in
	// testcluster.AuditAllGroup), by "VERB resource[/subresource]".
	Requests        int            `json:"api_requests"`
	RequestsPerNode float64        `json:"api_requests_per_node"`
	RequestsByCall  map[string]int `json:"api_requests_by_call"`
	// Status429 are the run's requests answered 429 (audit log);
	// APFRejected the delta of apiserver_flowcontrol_rejected_requests_total
	// over the run (every client).
	Status429 int `json:"status_429"`
	// PhaseMedianS: the median seconds of each step of a node's pod or
	// stream, from the audit log's timestamps (phaseMedians): where a
	// node's time goes.
	PhaseMedianS map[string]float64 `json:"phase_median_s,omitempty"`
	APFRejected  int                `json:"apf_rejected_all_clients"`
	Stderr       string             `json:"stderr_tail,omitempty"`
}

// BenchmarkFanoutScale runs `nodeexec run -l type=kwok -- echo ready` over
// 100, 1,000 and 5,000 SIMULATED nodes ($NODEEXEC_BENCH_SCALE_NODES), kwok
// answering the exec and the port-forward, on the default path (an nsenter
// pod per node) and the resident path (--use-resident), each at the default
// --max-concurrency and a raised one; and in the same run its peers at the
// same concurrency C:
//
//   - pods: kubectl get nodes -l type=kwok -o name | xargs -P C -I{}
//     kubectl debug {} -i --profile=sysadmin --image=IMG -- echo ready
//   - resident: kubectl get pods -n NS (the agents) -o name | xargs -P C
//     -I{} kubectl exec -n NS {} -c agent -- nodeexec agent nsenter
//     --target 1 -- echo ready
//
// and nodeexec with -o ndjson on the pods path (its memory target). Per run:
// wall time, the first and the last node's output, client RSS and CPU, API
// requests per node (the audit log, a user per run), 429s; per tool and
// path, the growth from the smallest to the largest fleet. JSON to
// $NODEEXEC_BENCH_SCALE_OUT. One iteration does everything: -benchtime 1x.
func BenchmarkFanoutScale(b *testing.B) {
	if env.cluster == nil {
		b.Skip("needs the local test cluster (kwok and its audit log)")
	}
	if _, err := os.Stat(kubectlPath); err != nil {
		b.Fatalf("the peer %s is needed: %v", kubectlPath, err)
	}
	ctx := context.Background()
	sizes := intList(b, scaleNodesEnv, "100,1000,5000")
	raised := intList(b, scaleConcurrencyEnv, "100")[0]
	peerMax := intList(b, scalePeerNodesEnv, "1000")[0]
	paths := wordList(b, scalePathsEnv, "pods,resident", "pods", "resident")
	real := os.Getenv(scaleRealEnv) == "1"
	if real {
		sizes = []int{len(env.nodes)}
	}
	dir := b.TempDir()
	fast := fastClient(b)
	res := map[string]any{
		"simulated":           !real,
		"command":             "echo ready",
		"default_concurrency": nodeexec.DefaultMaxConcurrency,
		"raised_concurrency":  raised,
		"client_qps_burst":    fmt.Sprintf("%v/%d (nodeexec's defaults; each kubectl of the peers has its own)", nodeexec.DefaultQPS, nodeexec.DefaultBurst),
		"peer_max_nodes":      peerMax,
		"requests_method":     "kube-apiserver's audit log: each run (nodeexec, or the whole peer pipeline) has a client certificate user of its own in group " + testcluster.AuditAllGroup + ", whose every request the test cluster's audit policy records (Metadata level; pod writes at the Request level); counted are that user's events",
		"rss_method":          "sampled every 100 ms from /proc/PID/status of every process of the run's process group: max_rss_mib is the largest VmHWM (peak RSS) of one process (nodeexec: itself; the peer: its largest kubectl, C run at once), group_rss_mib the largest sum of the group's VmRSS at one moment (the peer: all its kubectls together); wait4's ru_maxrss is not used, it counts the test binary's memory at the fork",
		"first_last_output":   "seconds from the process start to the first and the last line of a node's output on stdout, timestamped as read",
		"machine":             "2 cores shared by the whole test cluster (API server, etcd, kwok) and the client",
		"simulated_pod_start": fmt.Sprintf("kwok makes a pod Running %s-%s after its creation (two stages of %s-%s), for nodeexec's pods and the peer's alike; kwok renews a Lease per node every 10 s (heartbeats)", 2*scalePodStartDelay, 4*scalePodStartDelay, scalePodStartDelay, 2*scalePodStartDelay),
	}
	budget := 22 * time.Minute
	if v := os.Getenv(scaleBudgetEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			b.Fatalf("%s=%q: give a duration such as 20m", scaleBudgetEnv, v)
		}
		budget = d
	}
	extras := wordList(b, scaleExtrasEnv, "ndjson,interrupt", "ndjson", "interrupt")
	ndjson := slicesContain(extras, "ndjson")
	raisedQPS := intList(b, scaleRaisedQPSEnv, "300")[0]
	// Up to the peers' sizes both tools at the concurrencies
	// $NODEEXEC_BENCH_SCALE_PEER_CONCURRENCY names, beyond them only
	// nodeexec at those $NODEEXEC_BENCH_SCALE_LARGE_CONCURRENCY names; -o
	// ndjson at the first of them. A raised concurrency runs with the
	// raised QPS.
	peerConcurrencies := concurrencySet(b, scalePeerConcurrencyEnv, "default,raised", raised)
	largeConcurrencies := concurrencySet(b, scaleLargeConcurrencyEnv, "default", raised)
	qpsFor := func(c int) int {
		if c == nodeexec.DefaultMaxConcurrency {
			return 0
		}
		return raisedQPS
	}
	res["raised_client_qps_burst"] = fmt.Sprintf("%d/%d", raisedQPS, 2*raisedQPS)
	t0 := time.Now()
	var runs []scaleRun
	var skipped []string
	pairs := 0
	fleet := newScaleFleet(ctx, b, fast, real)
	for _, n := range sizes {
		if time.Since(t0) > budget {
			skipped = append(skipped, fmt.Sprintf("%d nodes: all runs (budget %s spent)", n, budget))
			continue
		}
		selector, agentsNS := fleet.grow(ctx, b, n, slicesContain(paths, "resident"))
		peer := n <= peerMax
		if !peer {
			res[fmt.Sprintf("peer_not_run_at_%d", n)] = fmt.Sprintf("the kubectl peers run up to %s=%d nodes: at %d the pods peer alone starts %d kubectl processes on the 2 cores the cluster shares; nodeexec runs alone there, at the concurrencies %s names", scalePeerNodesEnv, peerMax, n, n, scaleLargeConcurrencyEnv)
		}
		var specs []scaleSpec
		concurrencies := peerConcurrencies
		if !peer {
			concurrencies = largeConcurrencies
		}
		ndjsonRun := scaleSpec{ours: true, path: "pods", nodes: n, concurrency: concurrencies[0], qps: qpsFor(concurrencies[0]), selector: selector, output: "ndjson"}
		if !peer && ndjson {
			specs = append(specs, ndjsonRun)
		}
		for _, c := range concurrencies {
			qps := qpsFor(c)
			for _, path := range paths {
				// Who goes first alternates from pair to pair.
				order := []bool{true, false}
				if pairs++; pairs%2 == 0 {
					order = []bool{false, true}
				}
				for _, ours := range order {
					if !ours && !peer {
						continue
					}
					specs = append(specs, scaleSpec{ours: ours, path: path, nodes: n, concurrency: c, qps: qps, selector: selector, agentsNS: agentsNS, output: "text"})
				}
			}
		}
		if peer && ndjson {
			specs = append(specs, ndjsonRun)
		}
		for _, sp := range specs {
			if time.Since(t0) > budget {
				skipped = append(skipped, fmt.Sprintf("%d nodes: %s %s -o %s C=%d (budget %s spent)", n, map[bool]string{true: "nodeexec", false: "kubectl_xargs"}[sp.ours], sp.path, sp.output, sp.concurrency, budget))
				continue
			}
			runs = append(runs, scaleOnce(ctx, b, fast, dir, sp))
		}
	}
	if slicesContain(extras, "interrupt") && len(sizes) > 0 && time.Since(t0) <= budget {
		// Ctrl-C on the largest fleet, at the raised concurrency: the
		// most pods live at once.
		res["interrupt"] = scaleInterrupt(ctx, b, sizes[len(sizes)-1], raised, raisedQPS)
	}
	fleet.cleanup()
	res["skipped"] = skipped
	res["measure_s"] = round(time.Since(t0).Seconds())
	b.StopTimer()
	res["runs"] = runs
	res["growth"] = scaleGrowth(runs)
	res["targets"] = scaleTargets(runs)
	out, _ := json.MarshalIndent(res, "", "  ")
	b.Logf("\n%s\n%s", out, scaleTable(runs))
	b.ReportMetric(0, "ns/op")
	if f := os.Getenv(scaleOutEnv); f != "" {
		if err := os.WriteFile(f, append(out, '\n'), 0o644); err != nil {
			b.Error(err)
		}
	}
}

// interruptRun is what Ctrl-C did to a run over a whole fleet.
type interruptRun struct {
	Nodes       int    `json:"nodes"`
	Concurrency int    `json:"concurrency"`
	Command     string `json:"command"`
	// LivePods: nodeexec's pods on the simulated nodes when SIGINT was
	// sent; SignalAfterS: seconds from the start to SIGINT.
	LivePods int `json:"live_pods_at_signal"`
	// NodesDone: the nodes whose "done" line nodeexec had printed when
	// SIGINT was sent.
	NodesDone    int     `json:"nodes_done_at_signal"`
	SignalAfterS float64 `json:"signal_after_s"`
	// ReturnedS: seconds from SIGINT to the process's exit (the target:
	// within 10 s); ExitCode: its exit code (not 0).
	ReturnedS float64 `json:"returned_s"`
	ExitCode  int     `json:"exit_code"`
	// PodsAtExit: nodeexec's pods still present when it exited, of which
	// NotDeleting have no deletion timestamp; Uncollectable: those with
	// neither a deletion timestamp nor a deadline for gc (the target: 0).
	PodsAtExit    int `json:"pods_at_exit"`
	NotDeleting   int `json:"pods_not_deleting_at_exit"`
	Uncollectable int `json:"pods_uncollectable_at_exit"`
	// GoneS: seconds from the exit until no pod of the run was left (-1:
	// some were left after 2 minutes).
	GoneS float64 `json:"all_gone_after_exit_s"`
}

// scaleInterrupt starts `nodeexec run -l type=kwok -- sh -c 'sleep 5; echo
// done'` on the whole simulated fleet of n nodes at concurrency c, sends
// SIGINT (Ctrl-C) in the middle of the run, at least 20 s after its start
// and with c pods present (or after 60 s), when waves of nodes are done and
// c are in flight, and measures how fast it returns and what it leaves.
func scaleInterrupt(ctx context.Context, b *testing.B, n, c, qps int) interruptRun {
	b.Helper()
	args := []string{"--kubeconfig", env.kubeconfig, "run", "-l", testcluster.KwokNodeSelector, "--max-concurrency", strconv.Itoa(c),
		"--qps", strconv.Itoa(qps), "--burst", strconv.Itoa(2 * qps), "--agent-image", agentImage(), "--", "sh", "-c", "sleep 5; echo done"}
	r := interruptRun{Nodes: n, Concurrency: c, Command: "nodeexec " + strings.Join(args[2:], " ")}
	cmd := exec.Command(env.cli, args...)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	var live int
	waitFor(60*time.Second, func() bool {
		select {
		case <-done:
			return true // ended: nothing to interrupt
		default:
		}
		live = len(kwokPods(ctx, b))
		return live >= c && time.Since(t0) >= 20*time.Second
	})
	r.NodesDone = strings.Count(out.String(), "] done\n")
	r.LivePods, r.SignalAfterS = live, round3(time.Since(t0))
	select {
	case <-done:
		b.Fatalf("SIMULATED: the run on %d nodes ended %.1f s after its start, before Ctrl-C was sent: give a fleet that takes longer than 20 s at C=%d", n, r.SignalAfterS, c)
	default:
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		b.Fatal(err)
	}
	ts := time.Now()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		b.Errorf("SIMULATED: still running 60 s after Ctrl-C on %d nodes; output:\n%s", n, tailLines(out.String(), 20))
	}
	r.ReturnedS, r.ExitCode = round3(time.Since(ts)), cmd.ProcessState.ExitCode()
	te := time.Now()
	left := kwokPods(ctx, b)
	r.PodsAtExit = len(left)
	for _, p := range left {
		if p.DeletionTimestamp == nil {
			r.NotDeleting++
			if p.Annotations[nodeexec.AnnotationDeadline] == "" {
				r.Uncollectable++
			}
		}
	}
	r.GoneS = -1
	if waitFor(2*time.Minute, func() bool { return len(kwokPods(ctx, b)) == 0 }) {
		r.GoneS = round3(time.Since(te))
	}
	b.Logf("SIMULATED: Ctrl-C on %d nodes, C=%d, %d nodes done and %d pods live at %.1f s: returned in %.2f s (exit %d); at exit %d pods left (%d not deleting, %d without a deadline), all gone %.1f s later",
		n, c, r.NodesDone, r.LivePods, r.SignalAfterS, r.ReturnedS, r.ExitCode, r.PodsAtExit, r.NotDeleting, r.Uncollectable, r.GoneS)
	if r.ReturnedS > 10 || r.ExitCode == 0 || r.Uncollectable > 0 || r.GoneS < 0 {
		b.Errorf("SIMULATED: Ctrl-C on %d nodes missed its target (returned within 10 s, a failure exit code, every pod deleted or collectable): %+v\n%s", n, r, tailLines(out.String(), 20))
	}
	return r
}

// concurrencySet reads the comma-separated list of "default" and "raised"
// in environment variable name (def when unset) as concurrencies.
func concurrencySet(b *testing.B, name, def string, raised int) []int {
	b.Helper()
	var cs []int
	for _, w := range wordList(b, name, def, "default", "raised") {
		if w == "default" {
			cs = append(cs, nodeexec.DefaultMaxConcurrency)
		} else {
			cs = append(cs, raised)
		}
	}
	if len(cs) == 0 {
		b.Fatalf("%s=none: give default, raised or default,raised", name)
	}
	return cs
}

// wordList reads the comma-separated words of environment variable name
// (def when unset), each one of allowed; "none" alone is the empty list.
// Any other word fails the benchmark, naming the variable, before anything
// is created.
func wordList(b *testing.B, name, def string, allowed ...string) []string {
	b.Helper()
	v := envOr(name, def)
	if v == "none" {
		return nil
	}
	words := strings.Split(v, ",")
	for _, w := range words {
		if !slicesContain(allowed, w) {
			b.Fatalf("%s=%q: give a comma-separated list of %s, or none", name, v, strings.Join(allowed, ", "))
		}
	}
	return words
}

// scaleSpec is one run to make.
type scaleSpec struct {
	ours        bool
	path        string // pods or resident
	output      string // text or ndjson (nodeexec only)
	nodes       int
	concurrency int
	qps         int // nodeexec's --qps; 0: its default
	selector    string
	agentsNS    string
}

// scaleFleet is the benchmark's fleet: SIMULATED nodes that answer exec
// and port-forward (kwok), grown from one size to the next, and the
// resident agents on them; or the real nodes.
type scaleFleet struct {
	b        *testing.B
	cs       kubernetes.Interface
	real     bool
	k        *testcluster.Kwok
	agentsNS string
	once     sync.Once
}

func newScaleFleet(ctx context.Context, b *testing.B, cs kubernetes.Interface, real bool) *scaleFleet {
	b.Helper()
	f := &scaleFleet{b: b, cs: cs, real: real}
	b.Cleanup(f.cleanup)
	if !real {
		k, err := env.cluster.StartKwok(ctx, scaleKwokOptions())
		if err != nil {
			b.Fatal(err)
		}
		f.k = k
	}
	return f
}

// grow makes the fleet n nodes (kwok-node-1..n), with the agents on all
// of them when agents, and returns its label selector and the agents'
// namespace.
func (f *scaleFleet) grow(ctx context.Context, b *testing.B, n int, agents bool) (selector, agentsNS string) {
	b.Helper()
	selector = "type=kwok"
	if f.real {
		selector = "type!=kwok"
	} else {
		t0 := time.Now()
		if _, err := f.k.CreateNodes(ctx, n, nil); err != nil {
			b.Fatal(err)
		}
		b.Logf("%d SIMULATED nodes Ready %s after the first create", n, time.Since(t0).Round(time.Second))
	}
	if agents {
		if f.agentsNS == "" {
			f.agentsNS = "nodeexec-bench-scale-" + randomSuffix()
		}
		t0 := time.Now()
		// install again on a grown fleet: it waits until every node's agent is available.
		if _, stderr, code := cli(ctx, "", "agent", "install", "--namespace", f.agentsNS, "--agent-image", agentImage(), "--timeout", "15m"); code != 0 {
			b.Fatalf("agent install: exit %d\n%s", code, stderr)
		}
		b.Logf("%d nodes: agents available %s after install", n, time.Since(t0).Round(time.Second))
	}
	return selector, f.agentsNS
}

// cleanup uninstalls the agents, deletes kubectl's pods and the simulated
// nodes and stops kwok.
func (f *scaleFleet) cleanup() {
	f.once.Do(func() {
		b, ctx := f.b, context.Background()
		if f.agentsNS != "" {
			if _, stderr, code := cli(ctx, "", "agent", "uninstall", "--namespace", f.agentsNS, "--timeout", "10m"); code != 0 {
				b.Errorf("agent uninstall: exit %d\n%s", code, stderr)
			}
		}
		deleteDebuggerPods(ctx, b, f.cs)
		if f.k != nil {
			if err := f.k.DeleteNodes(ctx); err != nil {
				b.Errorf("deleting the simulated nodes: %v", err)
			}
			if err := f.k.Stop(ctx); err != nil {
				b.Errorf("stopping kwok: %v", err)
			}
		}
	})
}

// scalePodStartDelay is kwok's PodStartDelay in BenchmarkFanoutScale.
const scalePodStartDelay = 250 * time.Millisecond

// scaleRunTimeout bounds one run unless $NODEEXEC_BENCH_SCALE_RUN_TIMEOUT
// says otherwise: on this 2-core machine, where the simulated nodes' commands
// run too, a 5,000-node run of the pods path takes about 10 minutes.
const scaleRunTimeout = 8 * time.Minute

// scaleRunTimeoutEnv overrides scaleRunTimeout (a duration).
const scaleRunTimeoutEnv = "NODEEXEC_BENCH_SCALE_RUN_TIMEOUT"

// runTimeout is scaleRunTimeout or its override.
func runTimeout(b *testing.B) time.Duration {
	v := os.Getenv(scaleRunTimeoutEnv)
	if v == "" {
		return scaleRunTimeout
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("%s=%q: give a duration such as 15m", scaleRunTimeoutEnv, v)
	}
	return d
}

// scaleOnce makes one run under a new audited user and measures it.
func scaleOnce(ctx context.Context, b *testing.B, cs kubernetes.Interface, dir string, s scaleSpec) scaleRun {
	b.Helper()
	tool := "nodeexec"
	if !s.ours {
		tool = "kubectl_xargs"
	}
	user := fmt.Sprintf("bench-%s-%s-%s-%d-%d-%s", strings.ReplaceAll(tool, "_", "-"), s.path, s.output, s.nodes, s.concurrency, randomSuffix())
	kc, restarted, err := env.cluster.AuditedUser(ctx, user, dir)
	if err != nil {
		b.Fatal(err)
	}
	if restarted {
		// Once per cluster: its audit policy predates the rule.
		b.Logf("the API server was restarted for the audit policy's %s rule", testcluster.AuditAllGroup)
	}
	r := scaleRun{Tool: tool, Path: s.path, Output: s.output, Nodes: s.nodes, Concurrency: s.concurrency}
	if s.ours {
		r.QPS = s.qps
	}
	var cmd *exec.Cmd
	if s.ours {
		args := []string{"--kubeconfig", kc, "run", "-l", s.selector, "--max-concurrency", strconv.Itoa(s.concurrency), "--agent-image", agentImage()}
		if s.path == "resident" {
			args = append(args, "--use-resident", "--resident-namespace", s.agentsNS)
		}
		if s.qps > 0 {
			args = append(args, "--qps", strconv.Itoa(s.qps), "--burst", strconv.Itoa(2*s.qps))
		}
		if s.output != "text" {
			args = append(args, "-o", s.output)
		}
		args = append(args, "--", "echo", "ready")
		cmd = exec.Command(env.cli, args...)
		r.Command = "nodeexec " + strings.Join(args[2:], " ")
	} else {
		k := kubectlPath + " --kubeconfig " + kc
		var line string
		if s.path == "resident" {
			// Only the agents on the fleet's nodes.
			var fs []string
			for _, n := range env.nodes {
				if s.selector != "type!=kwok" {
					fs = append(fs, "spec.nodeName!="+n)
				}
			}
			field := ""
			if len(fs) > 0 {
				field = " --field-selector " + strings.Join(fs, ",")
			}
			line = fmt.Sprintf("%s get pods -n %s -l %s%s -o name | xargs -P %d -I{} %s exec -n %s {} -c %s -- %s agent nsenter --target 1 -- echo ready",
				k, s.agentsNS, resident.Selector(), field, s.concurrency, k, s.agentsNS, agent.ContainerName, agent.Path)
		} else {
			line = fmt.Sprintf("%s get nodes -l %s -o name | xargs -P %d -I{} %s debug {} -i --profile=sysadmin --image=%s -- echo ready",
				k, s.selector, s.concurrency, k, env.image)
		}
		cmd = exec.Command("sh", "-c", line)
		r.Command = strings.ReplaceAll(line, " --kubeconfig "+kc, "")
	}
	// A run that hangs is killed with its whole process group (the peer's
	// sh, xargs and kubectls) after runTimeout, and says so.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	apf0 := apfRejected(ctx, b)
	limit := runTimeout(b)
	timer := time.AfterFunc(limit, func() {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	})
	measureProcess(b, cmd, &r)
	if !timer.Stop() {
		r.Stderr = fmt.Sprintf("killed after %s\n%s", limit, r.Stderr)
		b.Errorf("%s: killed after %s", r.Command, limit)
	}
	r.APFRejected = apfRejected(ctx, b) - apf0
	if !s.ours && s.path == "pods" {
		deleteDebuggerPods(ctx, b, cs) // kubectl leaves its pods behind; outside the timing
	}
	ac := auditUserRequests(b, user)
	r.Requests, r.RequestsByCall, r.Status429, r.PhaseMedianS = ac.requests, ac.byCall, ac.status429, ac.phases
	r.RequestsPerNode = round(float64(r.Requests) / float64(s.nodes))
	if r.Requests == 0 {
		b.Errorf("%s: the audit log has no request of user %s: is its policy the current one (testcluster.AuditAllGroup)?", r.Command, user)
	}
	b.Logf("%s %s -o %s, %d nodes, C=%d: wall %.1fs, first/last output %.2f/%.1fs, %d lines (%d nodes named), exit %d, RSS %.1f MiB (all processes %.1f), CPU %.1fs, %d requests (%.2f/node), 429s %d, APF rejections %d",
		tool, s.path, s.output, s.nodes, s.concurrency, r.WallS, r.FirstOutputS, r.LastOutputS, r.OutputLines, r.NodesWithOutput, r.ExitCode, r.MaxRSSMiB, r.GroupRSSMiB, r.CPUS, r.Requests, r.RequestsPerNode, r.Status429, r.APFRejected)
	if s.ours && r.NodesWithOutput != s.nodes {
		b.Errorf("nodeexec: %d of %d nodes' output present; stderr:\n%s", r.NodesWithOutput, s.nodes, r.Stderr)
	}
	if s.ours {
		// Nothing left behind (resident agents stay).
		if !waitFor(2*time.Minute, func() bool {
			l, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: nodeexec.LabelManagedBy + "=" + nodeexec.ManagedByValue + "," + resident.LabelComponent + "!=" + resident.ComponentAgent})
			return err == nil && len(l.Items) == 0
		}) {
			b.Errorf("nodeexec's run pods are still there 2 minutes after the run")
		}
	}
	return r
}

// measureProcess runs cmd, timestamping its stdout lines, and fills r's
// times, output counts, exit code and rusage.
func measureProcess(b *testing.B, cmd *exec.Cmd, r *scaleRun) {
	b.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	var stderr tailBuffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	stopSampling := sampleRSS(cmd.Process.Pid, r)
	nodes := map[string]bool{}
	var first, last time.Duration
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		node, ok := outputLineNode(line)
		if !ok {
			continue
		}
		now := time.Since(start)
		if first == 0 {
			first = now
		}
		last = now
		r.OutputLines++
		if node != "" {
			nodes[node] = true
		}
	}
	err = cmd.Wait()
	wall := time.Since(start)
	// The peer's kubectls may outlive sh when it is killed: the group goes.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	stopSampling()
	r.WallS, r.FirstOutputS, r.LastOutputS = round3(wall), round3(first), round3(last)
	r.NodesWithOutput = len(nodes)
	r.ExitCode = cmd.ProcessState.ExitCode()
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		b.Fatalf("%s: %v", r.Command, err)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.CPUS = round(time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds())
	}
	r.Stderr = stderr.String()
}

// outputLineNode recognises a line of a node's output: nodeexec's "[node]
// ready" or its ndjson record {"node":...,"stdout":"ready\n"}, or the
// peer's bare "ready" (node "").
func outputLineNode(line []byte) (node string, ok bool) {
	switch {
	case bytes.Equal(bytes.TrimSpace(line), []byte("ready")):
		return "", true
	case bytes.HasPrefix(line, []byte("[")) && bytes.HasSuffix(line, []byte("] ready")):
		return string(line[1 : len(line)-len("] ready")]), true
	case bytes.HasPrefix(line, []byte("{")):
		var rec struct {
			Node   string `json:"node"`
			Stdout string `json:"stdout"`
		}
		if json.Unmarshal(line, &rec) == nil && rec.Node != "" && strings.Contains(rec.Stdout, "ready") {
			return rec.Node, true
		}
	}
	return "", false
}

// sampleRSS samples the memory of the process group pid leads (every
// process of it: the peer's sh, xargs and kubectls) every 100 ms until
// stopped. It keeps MaxRSSMiB, the largest VmHWM of one process (a
// process's own peak: wait4's ru_maxrss cannot be used, it counts the test
// binary's memory at the fork), GroupRSSMiB, the largest sum of the
// group's VmRSS at one moment, and the anonymous and file-backed parts of
// the leader's RSS at its largest.
func sampleRSS(pid int, r *scaleRun) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		var lead float64
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			var group float64
			for _, p := range processGroup(pid) {
				raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
				if err != nil {
					continue
				}
				group += statusKiB(raw, "VmRSS:")
				if hwm := round(statusKiB(raw, "VmHWM:") / 1024); hwm > r.MaxRSSMiB {
					r.MaxRSSMiB = hwm
				}
				if p != pid {
					continue
				}
				anon, file := statusKiB(raw, "RssAnon:"), statusKiB(raw, "RssFile:")+statusKiB(raw, "RssShmem:")
				if anon+file > lead {
					lead = anon + file
					r.PeakRSSAnonMiB, r.PeakRSSFileMiB = round(anon/1024), round(file/1024)
				}
			}
			if g := round(group / 1024); g > r.GroupRSSMiB {
				r.GroupRSSMiB = g
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); <-finished }
}

// processGroup lists the live processes of process group pgid (/proc/N/stat's
// fifth field).
func processGroup(pgid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces, so after its ')'
		i := bytes.LastIndexByte(raw, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(raw[i+1:]))
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) {
			pids = append(pids, p)
		}
	}
	return pids
}

func statusKiB(status []byte, key string) float64 {
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, key) {
			f := strings.Fields(l[len(key):])
			if len(f) > 0 {
				v, _ := strconv.ParseFloat(f[0], 64)
				return v
			}
		}
	}
	return 0
}

// tailBuffer keeps the last 4 KiB written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 4096 {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-4096:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// userAudit is what the audit log says of one run's user.
type userAudit struct {
	requests  int
	byCall    map[string]int
	status429 int
	// phases: the median seconds, over the run's pods, of each step of a
	// pod's life as the API server saw it (phaseMedians).
	phases map[string]float64
}

// auditUserRequests counts every request of user in kube-apiserver's audit
// log (the current file and its backup), reading again until the count
// holds for a second (the log is written asynchronously; at most 30 s).
func auditUserRequests(b *testing.B, user string) userAudit {
	b.Helper()
	needle := []byte(`"username":"` + user + `"`)
	count := func() userAudit {
		files, _ := filepath.Glob(filepath.Join(filepath.Dir(env.cluster.AuditLog()), "audit*.log"))
		c := userAudit{byCall: map[string]int{}}
		pods := map[string]*podSteps{}
		for _, f := range files {
			fh, err := os.Open(f)
			if err != nil {
				continue
			}
			sc := bufio.NewScanner(fh)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				if !bytes.Contains(sc.Bytes(), needle) {
					continue
				}
				var e struct {
					Verb      string `json:"verb"`
					ObjectRef struct {
						Resource, Subresource, Name string
					} `json:"objectRef"`
					ResponseStatus struct {
						Code int `json:"code"`
					} `json:"responseStatus"`
					RequestURI string    `json:"requestURI"`
					Received   time.Time `json:"requestReceivedTimestamp"`
					Done       time.Time `json:"stageTimestamp"`
				}
				if json.Unmarshal(sc.Bytes(), &e) != nil {
					continue
				}
				res := e.ObjectRef.Resource
				if e.ObjectRef.Subresource != "" {
					res += "/" + e.ObjectRef.Subresource
				}
				if res == "" {
					res = "(no resource) " + strings.SplitN(e.RequestURI, "?", 2)[0]
					if strings.HasPrefix(e.RequestURI, "/api") && strings.Count(e.RequestURI, "/") <= 3 {
						res = "(discovery)"
					}
				}
				c.byCall[e.Verb+" "+res]++
				c.requests++
				if e.ResponseStatus.Code == 429 {
					c.status429++
				}
				if e.ObjectRef.Resource == "pods" && e.ObjectRef.Name != "" {
					ps := pods[e.ObjectRef.Name]
					if ps == nil {
						ps = &podSteps{}
						pods[e.ObjectRef.Name] = ps
					}
					ps.add(e.Verb, e.ObjectRef.Subresource, e.Received, e.Done)
				}
			}
			fh.Close()
		}
		c.phases = phaseMedians(pods)
		return c
	}
	prev := -1
	deadline := time.Now().Add(30 * time.Second)
	for {
		c := count()
		if c.requests == prev || time.Now().After(deadline) {
			return c
		}
		prev = c.requests
		time.Sleep(time.Second)
	}
}

// podSteps are the times the API server saw one pod's steps: its create
// (received), the first exec, attach or port-forward into it (received, and
// the end of its stream), its delete (received).
type podSteps struct {
	created, streamStart, streamEnd, deleted time.Time
}

func (p *podSteps) add(verb, sub string, received, done time.Time) {
	switch {
	case verb == "create" && sub == "":
		p.created = received
	case sub == "exec" || sub == "attach" || sub == "portforward":
		if p.streamStart.IsZero() || received.Before(p.streamStart) {
			p.streamStart, p.streamEnd = received, done
		}
	case verb == "delete" && sub == "":
		p.deleted = received
	}
}

// phaseMedians: over the pods with each pair of steps, the median seconds
// from the create to the first stream (the pod starting, and the client
// seeing it Running), of the stream (the command, and the stream's set-up
// through the API server and the node), and from the stream's end to the
// delete. A run on agents (no create) has only the stream.
func phaseMedians(pods map[string]*podSteps) map[string]float64 {
	spans := map[string][]float64{}
	for _, p := range pods {
		if !p.created.IsZero() && !p.streamStart.IsZero() {
			spans["create_to_stream_s"] = append(spans["create_to_stream_s"], p.streamStart.Sub(p.created).Seconds())
		}
		if !p.streamStart.IsZero() && !p.streamEnd.IsZero() {
			spans["stream_s"] = append(spans["stream_s"], p.streamEnd.Sub(p.streamStart).Seconds())
		}
		if !p.streamEnd.IsZero() && !p.deleted.IsZero() {
			spans["stream_end_to_delete_s"] = append(spans["stream_end_to_delete_s"], p.deleted.Sub(p.streamEnd).Seconds())
		}
	}
	out := map[string]float64{}
	for k, v := range spans {
		sort.Float64s(v)
		out[k] = round3Sec(v[len(v)/2])
	}
	return out
}

// apfRejected sums apiserver_flowcontrol_rejected_requests_total.
func apfRejected(ctx context.Context, b *testing.B) int {
	b.Helper()
	raw, err := env.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		b.Fatalf("reading apiserver metrics: %v", err)
	}
	total := 0.0
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "apiserver_flowcontrol_rejected_requests_total{") {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(line[strings.LastIndexByte(line, '}')+1:]), 64); err == nil {
			total += v
		}
	}
	return int(total)
}

// deleteDebuggerPods deletes the node-debugger pods kubectl debug leaves
// behind in "default" and waits (2 minutes at most) until they are gone.
func deleteDebuggerPods(ctx context.Context, b *testing.B, cs kubernetes.Interface) {
	b.Helper()
	pods := cs.CoreV1().Pods("default")
	debuggers := func() ([]string, error) {
		list, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		var names []string
		for _, p := range list.Items {
			if strings.HasPrefix(p.Name, "node-debugger-") {
				names = append(names, p.Name)
			}
		}
		return names, nil
	}
	names, err := debuggers()
	if err != nil {
		b.Errorf("listing kubectl's debug pods: %v", err)
		return
	}
	_ = forEachNode(ctx, names, 16, func(ctx context.Context, _ int, name string) error {
		_ = pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		return nil
	})
	if !waitFor(2*time.Minute, func() bool {
		left, err := debuggers()
		return err == nil && len(left) == 0
	}) {
		b.Errorf("kubectl's debug pods still there 2 minutes after their deletion")
	}
}

// scaleGrowth is, per tool, path, output and concurrency, each measure at
// the largest fleet over the smallest, beside the fleet's own growth: a
// linear cost grows like the fleet (wall time: like nodes/concurrency).
func scaleGrowth(runs []scaleRun) []map[string]any {
	groups := map[string][]scaleRun{}
	var keys []string
	for _, r := range runs {
		k := fmt.Sprintf("%s %s -o %s C=%d qps=%d", r.Tool, r.Path, r.Output, r.Concurrency, r.QPS)
		if groups[k] == nil {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], r)
	}
	sort.Strings(keys)
	var out []map[string]any
	for _, k := range keys {
		g := groups[k]
		if len(g) < 2 {
			continue
		}
		sort.Slice(g, func(i, j int) bool { return g[i].Nodes < g[j].Nodes })
		lo, hi := g[0], g[len(g)-1]
		ratio := func(a, b float64) float64 {
			if a <= 0 {
				return -1
			}
			return round(b / a)
		}
		perNode := map[string]float64{}
		for _, r := range g {
			perNode[strconv.Itoa(r.Nodes)] = round3Sec(r.WallS / float64(r.Nodes) * float64(r.Concurrency))
		}
		out = append(out, map[string]any{
			"run": k, "from_nodes": lo.Nodes, "to_nodes": hi.Nodes,
			"nodes_growth":            ratio(float64(lo.Nodes), float64(hi.Nodes)),
			"wall_growth":             ratio(lo.WallS, hi.WallS),
			"last_output_growth":      ratio(lo.LastOutputS, hi.LastOutputS),
			"first_output_growth":     ratio(lo.FirstOutputS, hi.FirstOutputS),
			"rss_growth":              ratio(lo.MaxRSSMiB, hi.MaxRSSMiB),
			"cpu_growth":              ratio(lo.CPUS, hi.CPUS),
			"requests_growth":         ratio(float64(lo.Requests), float64(hi.Requests)),
			"wall_s_per_node_times_c": perNode,
		})
	}
	return out
}

// scaleTargets says, per fleet size, whether issue 28's targets are met.
func scaleTargets(runs []scaleRun) []map[string]any {
	var out []map[string]any
	find := func(tool, path, output string, n, c int) *scaleRun {
		for i := range runs {
			r := &runs[i]
			if r.Tool == tool && r.Path == path && r.Output == output && r.Nodes == n && r.Concurrency == c {
				return r
			}
		}
		return nil
	}
	for _, r := range runs {
		if r.Tool != "nodeexec" {
			continue
		}
		t := map[string]any{"run": fmt.Sprintf("%s -o %s, %d nodes, C=%d", r.Path, r.Output, r.Nodes, r.Concurrency)}
		if r.NodesWithOutput != r.Nodes {
			// killed, or failed: its figures are of part of the fleet
			t["incomplete"] = fmt.Sprintf("%d of %d nodes' output", r.NodesWithOutput, r.Nodes)
			if r.Nodes >= 5000 && r.Path == "pods" {
				t["rss_mib_so_far"] = r.MaxRSSMiB
			}
			out = append(out, t)
			continue
		}
		limit := 3.0
		if r.Path == "resident" {
			limit = 2
		}
		t["requests_per_node"] = map[string]any{"measured": r.RequestsPerNode, "target": limit, "met": r.RequestsPerNode <= limit}
		if p := find("kubectl_xargs", r.Path, "text", r.Nodes, r.Concurrency); p != nil && r.Output == "text" {
			ratio := round(r.WallS / p.WallS)
			t["wall_vs_peer"] = map[string]any{"nodeexec_s": r.WallS, "peer_s": p.WallS, "ratio": ratio, "target": 0.3, "met": ratio <= 0.3}
		}
		if r.Nodes >= 5000 && r.Path == "pods" {
			limit := 150.0
			if r.Output == "ndjson" {
				limit = 64
			}
			t["rss_mib"] = map[string]any{"measured": r.MaxRSSMiB, "target": limit, "met": r.MaxRSSMiB <= limit}
		}
		out = append(out, t)
	}
	return out
}

// scaleTable is the runs as a Markdown table (for README and docs).
func scaleTable(runs []scaleRun) string {
	var sb strings.Builder
	sb.WriteString("| SIMULATED nodes | path | C | tool | wall s | first / last output s | RSS MiB (one process / all) | CPU s | API req/node | 429s |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range runs {
		tool := "nodeexec"
		if r.Output != "text" {
			tool += " -o " + r.Output
		}
		if r.Tool != "nodeexec" {
			tool = "xargs kubectl debug"
			if r.Path == "resident" {
				tool = "xargs kubectl exec"
			}
		}
		fmt.Fprintf(&sb, "| %d | %s | %d | %s | %.1f | %.2f / %.1f | %.0f / %.0f | %.1f | %.2f | %d |\n",
			r.Nodes, r.Path, r.Concurrency, tool, r.WallS, r.FirstOutputS, r.LastOutputS, r.MaxRSSMiB, r.GroupRSSMiB, r.CPUS, r.RequestsPerNode, r.Status429)
	}
	return sb.String()
}

// intList parses a comma-separated list of positive integers from the
// environment variable name (def when unset).
func intList(b *testing.B, name, def string) []int {
	b.Helper()
	var out []int
	for _, f := range strings.Split(envOr(name, def), ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v <= 0 {
			b.Fatalf("%s=%q: give positive integers, comma-separated (e.g. %s)", name, os.Getenv(name), def)
		}
		out = append(out, v)
	}
	return out
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func slicesContain(xs []string, x string) bool {
	for _, v := range xs {
		if strings.TrimSpace(v) == x {
			return true
		}
	}
	return false
}

func round3(d time.Duration) float64 { return float64(d.Milliseconds()) / 1000 }

func round3Sec(s float64) float64 { return float64(int64(s*1000+0.5)) / 1000 }

// scaleKwokOptions are kwok's options for the benchmark's nodes: exec and
// port-forward answered.
func scaleKwokOptions() testcluster.KwokOptions {
	// Heartbeat: without node Leases the node lifecycle controller marks
	// each simulated node NotReady for a moment about once a minute, and a
	// run would skip a node caught in that moment. PodStartDelay: a pod is
	// Running 0.5-1 s after its creation (kwok's stock delays, 2-10 s, would
	// make every run measure them), as on a node that has the image.
	return testcluster.KwokOptions{Exec: true, AgentBinary: env.cli, Heartbeat: true, PodStartDelay: scalePodStartDelay}
}
