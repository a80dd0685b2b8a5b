//go:build e2e

// End-to-end tests of the simulated nodes (kwok). Need root; start the test cluster
// or reuse the running one (and leave it running), leave no simulated node, pod or
// kwok process behind:
//
//	go test -tags e2e -count=1 -run Kwok -v ./internal/testcluster/
//
// TestKwokScale measures node creation and the raw pod rate at scale; it runs only
// when NODEEXEC_KWOK_SCALE lists node counts:
//
//	NODEEXEC_KWOK_SCALE=1000,5000 go test -tags e2e -count=1 -run KwokScale -timeout 60m -v ./internal/testcluster/
package testcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

func kwokCluster(t testing.TB, ctx context.Context) (*Cluster, kubernetes.Interface) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	c, err := Start(ctx, Options{Nodes: 2, Log: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 200, 200
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, cs
}

// kwokDown deletes the simulated nodes and stops kwok; as t.Cleanup it runs even
// when the test failed.
func kwokDown(t testing.TB, c *Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	k, err := c.AttachKwok()
	if err != nil {
		t.Error(err)
		return
	}
	if err := k.DeleteNodes(ctx); err != nil {
		t.Error(err)
	}
	if err := k.Stop(ctx); err != nil {
		t.Error(err)
	}
}

func kwokNamespace(t testing.TB, ctx context.Context, cs kubernetes.Interface) string {
	t.Helper()
	ns, err := CreateNamespace(ctx, cs, "kwok-e2e-", nil)
	if ns != "" {
		t.Cleanup(func() {
			_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// kwokE2EPodStart is TestKwok's KwokOptions.PodStartDelay.
const kwokE2EPodStart = 100 * time.Millisecond

func TestKwok(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c, cs := kwokCluster(t, ctx)
	t.Cleanup(func() { kwokDown(t, c) })
	ns := kwokNamespace(t, ctx, cs)

	// PodStartDelay: pods Running within 0.2-0.4 s rather than kwok's 2-10 s
	opts := KwokOptions{FailNodes: []string{"kwok-node-2"}, PodStartDelay: kwokE2EPodStart}
	t0 := time.Now()
	k, err := c.StartKwok(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("StartKwok took %s", time.Since(t0).Round(time.Millisecond))
	pid := k.PID()
	if pid == 0 {
		t.Fatal("kwok is not running")
	}
	if got := k.Options(); got.Version != DefaultKwokVersion || got.PodCompleteAfter != time.Second || got.Heartbeat {
		t.Errorf("Options() = %+v", got)
	}

	t0 = time.Now()
	names, err := k.CreateNodes(ctx, 50, map[string]string{"nodeexec.io/e2e": "kwok"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("CreateNodes(50) took %s", time.Since(t0).Round(time.Millisecond))
	if len(names) != 50 || names[0] != "kwok-node-1" || names[49] != "kwok-node-50" {
		t.Fatalf("names %v", names)
	}
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: KwokNodeSelector})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 50 {
		t.Fatalf("%d nodes with %s, want 50", len(list.Items), KwokNodeSelector)
	}
	for _, n := range list.Items {
		if !nodeIsReady(&n) || n.Labels["nodeexec.io/e2e"] != "kwok" || n.Labels["kubernetes.io/hostname"] != n.Name ||
			len(n.Spec.Taints) == 0 || n.Status.Allocatable.Pods().Value() != 110 {
			t.Errorf("node %s: ready %v labels %v taints %v allocatable %v", n.Name, nodeIsReady(&n), n.Labels, n.Spec.Taints, n.Status.Allocatable)
		}
	}
	// idempotent: the existing nodes are kept
	if again, err := k.CreateNodes(ctx, 50, nil); err != nil || len(again) != 50 {
		t.Fatalf("CreateNodes again: %v %v", again, err)
	}

	t.Run("pod-succeeds", func(t *testing.T) {
		p, phases := runKwokPod(t, ctx, cs, ns, kwokE2EPod("kwok-node-1", true))
		if !isSubsequence([]corev1.PodPhase{corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded}, phases) {
			t.Errorf("phases %v, want Pending, Running, Succeeded", phases)
		}
		requireTerminated(t, p, corev1.PodSucceeded, 0, "Completed")
		deletePodAndWait(t, ctx, cs, p)
	})
	t.Run("pod-fails-on-fail-node", func(t *testing.T) {
		p, phases := runKwokPod(t, ctx, cs, ns, kwokE2EPod("kwok-node-2", true))
		if !isSubsequence([]corev1.PodPhase{corev1.PodPending, corev1.PodRunning, corev1.PodFailed}, phases) {
			t.Errorf("phases %v, want Pending, Running, Failed", phases)
		}
		requireTerminated(t, p, corev1.PodFailed, 1, "Error")
		deletePodAndWait(t, ctx, cs, p)
	})
	t.Run("other-pods-run-until-deleted", func(t *testing.T) {
		// without the nodeexec label the stock stages apply: Running until deleted,
		// then kwok's pod-delete stage removes the pod
		p, err := cs.CoreV1().Pods(ns).Create(ctx, kwokE2EPod("kwok-node-3", false), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p = waitPodPhase(t, ctx, cs, p, corev1.PodRunning, time.Minute)
		time.Sleep(3 * time.Second)
		if got, err := cs.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{}); err != nil || got.Status.Phase != corev1.PodRunning {
			t.Fatalf("unlabelled pod after 3 s: %v %v", got.Status.Phase, err)
		}
		deletePodAndWait(t, ctx, cs, p)
	})

	t.Run("raw-pod-rate", func(t *testing.T) {
		// one pod per node; the one on kwok-node-2 fails, which counts as ended
		created, completed, err := k.RawPodRate(ctx, ns, names, 32)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("RawPodRate(50 nodes): created in %s, all ended after %s", created.Round(time.Millisecond), completed.Round(time.Millisecond))
		if created <= 0 || completed < created {
			t.Errorf("created %s, completed %s", created, completed)
		}
		left, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(left.Items) != 0 {
			t.Errorf("pods left after RawPodRate: %d %v", len(left.Items), err)
		}
	})

	t.Run("start-again", func(t *testing.T) {
		old := mustRecord(t, c)
		k2, err := c.StartKwok(ctx, KwokOptions{FailNodes: []string{"kwok-node-2", "kwok-node-2"}, PodCompleteAfter: time.Second, PodStartDelay: kwokE2EPodStart})
		if err != nil {
			t.Fatal(err)
		}
		if k2.PID() != pid {
			t.Errorf("same options: kwok pid %d, want the running %d", k2.PID(), pid)
		}
		// other options: only kwok restarts; the nodes stay
		k3, err := c.StartKwok(ctx, KwokOptions{FailNodes: []string{"kwok-node-2"}, Heartbeat: true, PodCompleteAfter: 10 * time.Minute, PodStartDelay: kwokE2EPodStart})
		if err != nil {
			t.Fatal(err)
		}
		if old.alive() {
			t.Errorf("the kwok started first (pid %d) still runs", old.PID)
		}
		if k3.PID() == 0 || k3.PID() == pid {
			t.Errorf("other options: kwok pid %d (was %d)", k3.PID(), pid)
		}
		pid = k3.PID()
		// heartbeat: kwok holds a lease per node
		err = poll(ctx, time.Minute, 500*time.Millisecond, "node lease of kwok-node-50", func(ctx context.Context) (bool, error) {
			_, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "kwok-node-50", metav1.GetOptions{})
			return err == nil, err
		})
		if err != nil {
			t.Error(err)
		}
		// a Running nodeexec pod (PodCompleteAfter 10m) is deleted by kwok's
		// pod-delete stage: our stages do not hold on to it
		p, err := cs.CoreV1().Pods(ns).Create(ctx, kwokE2EPod("kwok-node-4", true), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p = waitPodPhase(t, ctx, cs, p, corev1.PodRunning, time.Minute)
		deletePodAndWait(t, ctx, cs, p)
	})

	t.Run("down", func(t *testing.T) {
		rec := mustRecord(t, c)
		t0 := time.Now()
		if err := k.DeleteNodes(ctx); err != nil {
			t.Fatal(err)
		}
		if err := k.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("DeleteNodes + Stop took %s", time.Since(t0).Round(time.Millisecond))
		if rec.alive() || k.PID() != 0 {
			t.Errorf("kwok (pid %d) still runs", rec.PID)
		}
		if _, err := os.Stat(c.r.l.pidFile(procKwok)); !os.IsNotExist(err) {
			t.Errorf("kwok pid file: %v", err)
		}
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: KwokNodeSelector})
		if err != nil || len(nodes.Items) != 0 {
			t.Errorf("simulated nodes left: %d %v", len(nodes.Items), err)
		}
		pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Spec.NodeName, KwokNodePrefix) || p.Namespace == ns {
				t.Errorf("pod left: %s/%s on %s", p.Namespace, p.Name, p.Spec.NodeName)
			}
		}
	})
}

// mustRecord is the recorded kwok process.
func mustRecord(t *testing.T, c *Cluster) procRecord {
	t.Helper()
	rec, err := c.r.l.readProc(procKwok)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func kwokE2EPod(node string, nodeexec bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "kwok-e2e-"},
		Spec: corev1.PodSpec{
			NodeName:      node,
			RestartPolicy: corev1.RestartPolicyNever,
			Tolerations:   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name: "c", Image: BusyboxImage, Command: []string{"sh", "-c", "true"},
			}},
		},
	}
	if nodeexec {
		p.Labels = map[string]string{KwokPodLabel: KwokPodLabelValue}
	}
	return p
}

// runKwokPod creates p and returns it once it has ended, with the phases a watch saw.
func runKwokPod(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string, p *corev1.Pod) (*corev1.Pod, []corev1.PodPhase) {
	t.Helper()
	// watch from the resourceVersion of a list from the watch cache (as an informer
	// does): on this cluster a watch without one is served as a watch-list (API
	// server 1.37 default), and that fails with "Too large resource version" when the
	// pod watch cache lags etcd on an etcd without progress notifications (before 3.5)
	l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	t0 := time.Now()
	p, err = cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var phases []corev1.PodPhase
	timeout := time.After(time.Minute)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed; phases so far %v", phases)
			}
			got, ok := ev.Object.(*corev1.Pod)
			if !ok {
				t.Fatalf("watch event %s %+v", ev.Type, ev.Object)
			}
			if got.Name != p.Name || ev.Type == watch.Deleted {
				continue
			}
			if len(phases) == 0 || phases[len(phases)-1] != got.Status.Phase {
				phases = append(phases, got.Status.Phase)
				t.Logf("pod %s on %s: %s after %s", got.Name, got.Spec.NodeName, got.Status.Phase, time.Since(t0).Round(time.Millisecond))
			}
			if got.Status.Phase == corev1.PodSucceeded || got.Status.Phase == corev1.PodFailed {
				return got, phases
			}
		case <-timeout:
			t.Fatalf("pod %s did not end within a minute; phases %v", p.Name, phases)
		}
	}
}

func waitPodPhase(t *testing.T, ctx context.Context, cs kubernetes.Interface, p *corev1.Pod, phase corev1.PodPhase, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var got *corev1.Pod
	err := poll(ctx, timeout, 200*time.Millisecond, "pod "+p.Name+" "+string(phase), func(ctx context.Context) (bool, error) {
		var err error
		got, err = cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == phase, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func deletePodAndWait(t *testing.T, ctx context.Context, cs kubernetes.Interface, p *corev1.Pod) {
	t.Helper()
	t0 := time.Now()
	grace := int64(2)
	if err := cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	err := poll(ctx, time.Minute, 100*time.Millisecond, "pod "+p.Name+" gone", func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pod %s (%s) deleted and gone after %s", p.Name, p.Status.Phase, time.Since(t0).Round(time.Millisecond))
}

func requireTerminated(t *testing.T, p *corev1.Pod, phase corev1.PodPhase, exit int32, reason string) {
	t.Helper()
	if p.Status.Phase != phase || len(p.Status.ContainerStatuses) != 1 {
		t.Fatalf("pod %s: phase %s, container statuses %+v", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
	}
	term := p.Status.ContainerStatuses[0].State.Terminated
	if term == nil || term.ExitCode != exit || term.Reason != reason {
		t.Errorf("pod %s: container state %+v, want terminated with exit code %d, reason %s", p.Name, p.Status.ContainerStatuses[0].State, exit, reason)
	}
}

func isSubsequence[T comparable](want, got []T) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// BenchmarkKwokScale (make bench-kwok) creates NODEEXEC_KWOK_SCALE (default
// "1000,5000") simulated nodes in
// turn (heartbeat off unless NODEEXEC_KWOK_HEARTBEAT=1), reports the time until all
// are Ready, RSS and CPU of kwok and the control plane, the load, the steady-state
// cost over NODEEXEC_KWOK_IDLE (default 2m), and at the largest count the raw pod
// rate (one pod per node, 32 workers); then deletes the nodes and stops kwok.
func BenchmarkKwokScale(b *testing.B) {
	var t testing.TB = b
	spec := os.Getenv("NODEEXEC_KWOK_SCALE")
	if spec == "" {
		spec = "1000,5000"
	}
	var counts []int
	for _, s := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			t.Fatalf("NODEEXEC_KWOK_SCALE=%q", spec)
		}
		counts = append(counts, n)
	}
	idle := 2 * time.Minute
	if s := os.Getenv("NODEEXEC_KWOK_IDLE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		idle = d
	}
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Minute)
	defer cancel()
	c, cs := kwokCluster(t, ctx)
	t.Cleanup(func() { kwokDown(t, c) })
	ns := kwokNamespace(t, ctx, cs)
	k, err := c.StartKwok(ctx, KwokOptions{Heartbeat: os.Getenv("NODEEXEC_KWOK_HEARTBEAT") == "1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kwok options %+v", k.Options())
	report := func(what string) {
		var parts []string
		for _, name := range []string{procKwok, procAPIServer, procEtcd, procCM, procScheduler} {
			rec, err := c.r.l.readProc(name)
			if err != nil {
				continue
			}
			rss, cpu := procUsage(rec.PID)
			parts = append(parts, fmt.Sprintf("%s rss=%dMiB cpu=%.1fs", name, rss>>10, cpu.Seconds()))
		}
		load, _ := os.ReadFile("/proc/loadavg")
		t.Logf("MEASURE %s: %s; loadavg %s", what, strings.Join(parts, ", "), strings.TrimSpace(string(load)))
	}
	report("before")
	slices.Sort(counts)
	for i, n := range counts {
		t0 := time.Now()
		names, err := k.CreateNodes(ctx, n, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("MEASURE %d simulated nodes all Ready %s after the first create", n, time.Since(t0).Round(100*time.Millisecond))
		report(fmt.Sprintf("%d nodes Ready", n))
		cpu0 := controlPlaneCPU(c)
		time.Sleep(idle)
		cpu1 := controlPlaneCPU(c)
		var parts []string
		for _, name := range []string{procKwok, procAPIServer, procEtcd, procCM} {
			parts = append(parts, fmt.Sprintf("%s %.0f%%", name, 100*(cpu1[name]-cpu0[name]).Seconds()/idle.Seconds()))
		}
		t.Logf("MEASURE %d nodes idle for %s: CPU (of one core) %s", n, idle, strings.Join(parts, ", "))
		report(fmt.Sprintf("%d nodes after %s idle", n, idle))
		if i == len(counts)-1 {
			created, completed, err := k.RawPodRate(ctx, ns, names, 32)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("MEASURE raw pod rate at %d nodes: created in %s, all Succeeded after %s: %.1f pods/s (creates %.1f/s)",
				n, created.Round(time.Millisecond), completed.Round(time.Millisecond),
				float64(n)/completed.Seconds(), float64(n)/created.Seconds())
			report(fmt.Sprintf("%d nodes after the raw pod rate", n))
		}
	}
	t0 := time.Now()
	if err := k.DeleteNodes(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("MEASURE deleting %d simulated nodes took %s", counts[len(counts)-1], time.Since(t0).Round(100*time.Millisecond))
}

// procUsage returns a process's RSS (KiB) and CPU time (user+system).
func procUsage(pid int) (rssKiB int64, cpu time.Duration) {
	if b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
				rssKiB, _ = strconv.ParseInt(f[1], 10, 64)
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat")); err == nil {
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i > 0 {
			f := strings.Fields(s[i+2:])
			if len(f) > 12 {
				u, _ := strconv.ParseInt(f[11], 10, 64)
				st, _ := strconv.ParseInt(f[12], 10, 64)
				cpu = time.Duration(u+st) * time.Second / 100 // USER_HZ
			}
		}
	}
	return rssKiB, cpu
}

func controlPlaneCPU(c *Cluster) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, name := range []string{procKwok, procAPIServer, procEtcd, procCM} {
		if rec, err := c.r.l.readProc(name); err == nil {
			_, out[name] = procUsage(rec.PID)
		}
	}
	return out
}
