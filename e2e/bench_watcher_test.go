//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// childEnv makes the test binary, re-executed, run one informer setup and
// report its memory instead of running tests (see rssChild).
const childEnv = "NODEEXEC_E2E_RSS_CHILD"

// BenchmarkWatcher measures the watcher against its peers at
// NODEEXEC_BENCH_NODES (default 5,000) SIMULATED kwok nodes, all in one run:
//   - rollout throughput (nodes/s from apply to Complete, maxConcurrency
//     100%) against kwok's raw rate of one pod per node (RawPodRate), and
//     the API writes per node run (the watcher's clientset: pods, nodes,
//     Events; the NodeScript's status, per reconcile, is not counted);
//   - memory: RSS after sync of the watcher (trimmed node cache) against a
//     plain full Node informer, both in this test binary; and of the real
//     `nodeexec watch`;
//   - reaction: node Ready -> run pod created, p50/p99, on 100 joining
//     nodes, against a DaemonSet's node Ready -> pod created, at the same
//     time, seen by one observer.
//
// Results go to NODEEXEC_BENCH_WATCHER_OUT (JSON) and the log.
func BenchmarkWatcher(b *testing.B) {
	n := 5000
	if v := os.Getenv("NODEEXEC_BENCH_NODES"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	ctx := context.Background()
	dyn := watcherSetup(b)
	k, names := simulatedNodes(ctx, b, n, 0)
	b.Cleanup(func() {
		if err := k.DeleteNodes(context.Background()); err != nil {
			b.Errorf("deleting the simulated nodes: %v", err)
		}
	})
	res := map[string]any{"simulated": true, "nodes": n, "kwok_heartbeat": false}
	b.ResetTimer()

	// Raw pod rate: one pod per node, no controller.
	cpu0 := cpuSeconds()
	created, completed, err := k.RawPodRate(ctx, v1alpha1.DefaultNamespace, names, 32)
	if err != nil {
		b.Fatal(err)
	}
	res["cpu_s_raw"] = cpuSince(cpu0)
	raw := float64(n) / completed.Seconds()
	res["raw_pods_per_s"], res["raw_created_s"], res["raw_completed_s"] = round(raw), round(created.Seconds()), round(completed.Seconds())

	// Watcher throughput.
	name := uniqueName("bench-scale-")
	cleanupNodeScript(b, dyn, name)
	writes := startScaleWatcher(b, dyn)
	writes.reset()
	cpu0 = cpuSeconds()
	t0 := time.Now()
	applyNodeScript(ctx, b, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  nodeSelector: {matchLabels: {type: kwok}}
  script: 'true'
  rollout: {canary: 0, maxConcurrency: "100%%", maxFailures: "100%%"}
`, name))
	waitNodeScript(ctx, b, dyn, name, 30*time.Minute, "complete", func(ns *v1alpha1.NodeScript) bool {
		return ns.Status.Stage == v1alpha1.StageComplete
	})
	took := time.Since(t0)
	res["cpu_s_watcher"] = cpuSince(cpu0)
	b.Logf("SIMULATED %d nodes: CPU seconds by process, raw run %v, watcher rollout %v", n, res["cpu_s_raw"], res["cpu_s_watcher"])
	by, all, events := writes.counts()
	res["watcher_writes_per_node"], res["watcher_writes"], res["watcher_event_writes"] = round(float64(all)/float64(n)), by, events
	b.Logf("SIMULATED %d nodes: %d API writes by the watcher's clientset (%.2f per node run, target <= 3; %d Events): %v", n, all, float64(all)/float64(n), events, by)
	thr := float64(n) / took.Seconds()
	res["watcher_nodes_per_s"], res["watcher_rollout_s"], res["throughput_ratio"] = round(thr), round(took.Seconds()), round(thr/raw)
	b.Logf("SIMULATED %d nodes: raw pod rate %.1f/s (created in %s, all ended in %s); watcher rollout %s = %.1f nodes/s; ratio %.2f (issue 11 target >= 0.8)",
		n, raw, created.Round(time.Millisecond), completed.Round(time.Millisecond), took.Round(time.Millisecond), thr, thr/raw)

	// Memory after sync (the NodeScript's annotations are on every node).
	wm, im, cm := childRSS(b, "watcher"), childRSS(b, "informer"), cliWatchRSS(b)
	res["rss_watcher_mib"], res["rss_plain_informer_mib"], res["rss_ratio"] = round(wm.rss), round(im.rss), round(wm.rss/im.rss)
	res["rss_anon_watcher_mib"], res["rss_anon_plain_informer_mib"], res["rss_anon_ratio"] = round(wm.anon), round(im.anon), round(wm.anon/im.anon)
	res["rss_nodeexec_watch_mib"], res["rss_anon_nodeexec_watch_mib"] = round(cm.rss), round(cm.anon)
	b.Logf("SIMULATED %d nodes: RSS after sync: watcher %.1f MiB (anonymous %.1f), plain Node informer %.1f MiB (anonymous %.1f): ratio %.2f (anonymous %.2f), issue 11 target <= 0.5; `nodeexec watch` %.1f MiB (anonymous %.1f), target <= 64",
		n, wm.rss, wm.anon, im.rss, im.anon, wm.rss/im.rss, wm.anon/im.anon, cm.rss, cm.anon)

	// Reaction to joining nodes, against a DaemonSet.
	w, d := reaction(ctx, b, dyn, k, n, 100)
	res["reaction_watcher_ms"], res["reaction_daemonset_ms"] = w, d
	if d["p99"] > 0 {
		res["reaction_p99_ratio"] = round(w["p99"] / d["p99"])
	}
	b.Logf("SIMULATED joining nodes: Ready -> pod created: watcher p50 %.0f ms p99 %.0f ms; DaemonSet p50 %.0f ms p99 %.0f ms (target: watcher p99 <= 1.0x)",
		w["p50"], w["p99"], d["p50"], d["p99"])

	if out := os.Getenv("NODEEXEC_BENCH_WATCHER_OUT"); out != "" {
		j, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(out, append(j, '\n'), 0o644); err != nil {
			b.Error(err)
		}
	}
}

func round(f float64) float64 { return float64(int64(f*100+0.5)) / 100 }

// cpuSeconds returns the CPU time so far (user and system, in seconds, at
// Linux's 100 ticks per second) of this test process, under "self" (the
// raw pod creator or the in-process watcher), and of the cluster's
// processes on this machine by command name (kube-apiserver, etcd, kwok,
// kube-controller[-manager], kube-scheduler, containerd, the kubelets
// summed), from /proc/PID/stat. Processes it cannot read are left out.
func cpuSeconds() map[string]float64 {
	names := []string{"kube-apiserver", "etcd", "kwok", "kube-controller", "kube-scheduler", "kubelet", "containerd"}
	out := map[string]float64{}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime(14) stime(15): comm may hold spaces.
		open, closing := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
		if open < 0 || closing < open {
			continue
		}
		comm, fields := string(stat[open+1:closing]), strings.Fields(string(stat[closing+1:]))
		if len(fields) < 13 {
			continue
		}
		if pid == os.Getpid() {
			comm = "self"
		} else if i := slices.IndexFunc(names, func(n string) bool { return strings.HasPrefix(comm, n) }); i >= 0 {
			comm = names[i] // etcd's command is etcd-vX.Y.Z
		} else {
			continue
		}
		ut, _ := strconv.ParseFloat(fields[11], 64)
		st, _ := strconv.ParseFloat(fields[12], 64)
		out[comm] += (ut + st) / 100
	}
	return out
}

// cpuSince returns the CPU seconds each process of cpuSeconds used since
// before, rounded to 0.1 s; "total" sums them.
func cpuSince(before map[string]float64) map[string]float64 {
	d := map[string]float64{}
	var total float64
	for k, v := range cpuSeconds() {
		d[k] = float64(int64((v-before[k])*10+0.5)) / 10
		total += v - before[k]
	}
	d["total"] = float64(int64(total*10+0.5)) / 10
	return d
}

// childRSS re-executes this test binary in mode ("watcher": watcher.Start
// with its trimmed caches; "informer": a plain full Node informer), waits
// until it has synced and settled, and returns its RSS in MiB.
func childRSS(b *testing.B, mode string) mem {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, "NODEEXEC_E2E_CHILD_KUBECONFIG="+env.kubeconfig)
	return measureRSS(b, cmd, "caches synced")
}

// cliWatchRSS runs the real `nodeexec watch` and returns its RSS in MiB
// once it has synced and reconciled.
func cliWatchRSS(b *testing.B) mem {
	b.Helper()
	cmd := exec.Command(env.cli, "--kubeconfig", env.kubeconfig, "--qps", "500", "--burst", "1000", "watch", "--success-log-lines", "-1")
	return measureRSS(b, cmd, "caches synced")
}

// measureRSS starts cmd, waits for marker on its stderr, lets it settle for
// 10 s (a reconcile of every NodeScript, garbage collections), and reads
// VmRSS from /proc before interrupting it. Neither side forces a GC.
func measureRSS(b *testing.B, cmd *exec.Cmd, marker string) mem {
	b.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()
	found := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		once := sync.Once{}
		for sc.Scan() {
			if strings.Contains(sc.Text(), marker) {
				once.Do(func() { close(found) })
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case <-found:
	case <-time.After(5 * time.Minute):
		b.Fatalf("%s: no %q within 5 minutes", cmd.Path, marker)
	}
	time.Sleep(10 * time.Second)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	var rss, anon float64
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			kb, _ := strconv.ParseFloat(f[1], 64)
			switch f[0] {
			case "VmRSS:":
				rss = kb / 1024
			case "RssAnon:":
				anon = kb / 1024
			}
		}
	}
	if rss == 0 {
		b.Fatal("no VmRSS")
	}
	return mem{rss, anon}
}

// mem is a process's VmRSS and its anonymous part (heap, stacks: without
// the pages of the binary file), in MiB.
type mem struct{ rss, anon float64 }

// rssChild is the re-executed test binary's work (see childRSS).
func rssChild(mode string) int {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("NODEEXEC_E2E_CHILD_KUBECONFIG"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg.QPS, cfg.Burst = 500, 1000
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	switch mode {
	case "informer":
		f := informers.NewSharedInformerFactory(cs, 0)
		inf := f.Core().V1().Nodes().Informer()
		f.Start(ctx.Done())
		cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
		fmt.Fprintln(os.Stderr, "caches synced")
	case "watcher":
		w, err := watcher.New(watcher.Options{Client: cs, Dynamic: dynamic.NewForConfigOrDie(cfg), SuccessLogLines: -1})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		log := funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{})
		go func() { _ = w.Start(logr.NewContext(ctx, log)) }()
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", mode)
		return 2
	}
	sig := make(chan struct{})
	<-sig
	return 0
}

// reaction creates m joining simulated nodes (after the n existing ones)
// that both a NodeScript and a DaemonSet select, and returns, per side,
// p50 and p99 in ms of node Ready -> pod created, as one observer (this
// test's informers) sees them.
func reaction(ctx context.Context, b *testing.B, dyn dynamic.Interface, k interface {
	CreateNodes(context.Context, int, map[string]string) ([]string, error)
}, n, m int) (map[string]float64, map[string]float64) {
	const label = "nodeexec.io/bench-join"
	name := uniqueName("bench-join-")
	cleanupNodeScript(b, dyn, name)
	applyNodeScript(ctx, b, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  nodeSelector: {matchLabels: {%s: "true"}}
  script: 'true'
  rollout: {canary: 0, maxConcurrency: "100%%", maxFailures: "100%%"}
`, name, label))
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-join", Namespace: v1alpha1.DefaultNamespace},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "bench-join"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "bench-join"}},
				Spec: corev1.PodSpec{
					NodeSelector:                 map[string]string{label: "true"},
					Tolerations:                  []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
					Containers:                   []corev1.Container{{Name: "c", Image: env.image, Command: []string{"sleep", "3600"}}},
					AutomountServiceAccountToken: ptr.To(false),
				},
			},
		},
	}
	if _, err := env.client.AppsV1().DaemonSets(ds.Namespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = env.client.AppsV1().DaemonSets(ds.Namespace).Delete(context.Background(), ds.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
	})

	var mu sync.Mutex
	ready, dsPod, runPod := map[string]time.Time{}, map[string]time.Time{}, map[string]time.Time{}
	f := informers.NewSharedInformerFactory(fastClient(b), 0)
	nodes, pods := f.Core().V1().Nodes().Informer(), f.Core().V1().Pods().Informer()
	_, _ = nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { noteReady(&mu, ready, obj.(*corev1.Node), label) },
		UpdateFunc: func(_, obj any) { noteReady(&mu, ready, obj.(*corev1.Node), label) },
	})
	notePod := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case p.Labels["app"] == "bench-join":
			if _, ok := dsPod[p.Spec.NodeName]; !ok {
				dsPod[p.Spec.NodeName] = time.Now()
			}
		case p.Labels[v1alpha1.LabelNodeScript] == name:
			if _, ok := runPod[p.Spec.NodeName]; !ok {
				runPod[p.Spec.NodeName] = time.Now()
			}
		}
	}
	_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: notePod, UpdateFunc: func(_, obj any) { notePod(obj) }})
	stop := make(chan struct{})
	defer close(stop)
	f.Start(stop)
	cache.WaitForCacheSync(stop, nodes.HasSynced, pods.HasSynced)

	joined, err := k.CreateNodes(ctx, n+m, map[string]string{label: "true"})
	if err != nil {
		b.Fatal(err)
	}
	joined = joined[n:]
	if !waitFor(5*time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, j := range joined {
			if _, ok := dsPod[j]; !ok {
				return false
			}
			if _, ok := runPod[j]; !ok {
				return false
			}
		}
		return true
	}) {
		b.Fatalf("not every joining node got both pods within 5 minutes")
	}
	mu.Lock()
	defer mu.Unlock()
	var w, d []float64
	for _, j := range joined {
		w = append(w, float64(runPod[j].Sub(ready[j]).Milliseconds()))
		d = append(d, float64(dsPod[j].Sub(ready[j]).Milliseconds()))
	}
	return percentiles(w), percentiles(d)
}

func noteReady(mu *sync.Mutex, ready map[string]time.Time, n *corev1.Node, label string) {
	if n.Labels[label] != "true" {
		return
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			mu.Lock()
			if _, ok := ready[n.Name]; !ok {
				ready[n.Name] = time.Now()
			}
			mu.Unlock()
		}
	}
}

func percentiles(v []float64) map[string]float64 {
	slices.Sort(v)
	at := func(p float64) float64 {
		if len(v) == 0 {
			return 0
		}
		return v[min(len(v)-1, int(p*float64(len(v))))]
	}
	return map[string]float64{"p50": at(0.50), "p99": at(0.99), "min": at(0), "max": at(1)}
}
