//go:build e2e

// End-to-end tests of the fault injection. Need root; start the test cluster or
// reuse the running one, and leave it healthy (Restore in t.Cleanup):
//
//	go test -tags e2e -count=1 -run Fault -v ./internal/testcluster/
package testcluster

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// faultCluster returns the running cluster (started if needed), a client with
// short timeouts, and registers Restore and a namespace's removal as cleanups.
func faultCluster(t *testing.T) (*Cluster, kubernetes.Interface, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, cs := kwokCluster(t, ctx)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := c.Restore(ctx); err != nil {
			t.Errorf("Restore: %v", err)
		}
	})
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 3 * time.Second
	short, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := CreateNamespace(ctx, cs, "fault-e2e-", nil)
	if ns != "" {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			zero := int64(0)
			_ = cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
			_ = cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return c, short, ns
}

func nodeObject(t *testing.T, ctx context.Context, cs kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	var n *corev1.Node
	err := poll(ctx, 30*time.Second, 200*time.Millisecond, "node "+name, func(ctx context.Context) (bool, error) {
		var err error
		n, err = cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return err == nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitNodeCondition waits until node's Ready condition is (ready) or is not (!ready) True.
func waitNodeCondition(t *testing.T, ctx context.Context, cs kubernetes.Interface, name string, ready bool, timeout time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	err := poll(ctx, timeout, 200*time.Millisecond, "node "+name+" Ready change", func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return readyTrue(n) == ready, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return time.Since(t0)
}

// sleeper starts a pod that sleeps on node and waits until it runs.
func sleeper(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, node string, policy corev1.RestartPolicy) *corev1.Pod {
	t.Helper()
	zero := int64(0)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "sleeper-"},
		Spec: corev1.PodSpec{
			NodeName: node, RestartPolicy: policy, TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{Name: "c", Image: ToolsImage, Command: []string{"sleep", "3600"}, ImagePullPolicy: corev1.PullIfNotPresent}},
		},
	}
	p, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return waitPod(t, ctx, cs, p, "Running", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	})
}

func waitPod(t *testing.T, ctx context.Context, cs kubernetes.Interface, p *corev1.Pod, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var got *corev1.Pod
	err := poll(ctx, time.Minute, 200*time.Millisecond, "pod "+p.Name+" "+what, func(ctx context.Context) (bool, error) {
		var err error
		got, err = cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		return err == nil && cond(got), err
	})
	if err != nil {
		t.Fatalf("%v (last: %+v)", err, got)
	}
	return got
}

func containerID(p *corev1.Pod) string {
	if len(p.Status.ContainerStatuses) == 0 {
		return ""
	}
	return p.Status.ContainerStatuses[0].ContainerID
}

func TestFaultAPIServer(t *testing.T) {
	c, cs, _ := faultCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	list := func() error {
		_, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{Limit: 1})
		return err
	}
	before, err := c.r.l.readProc(procAPIServer)
	if err != nil {
		t.Fatal(err)
	}

	if err := c.StopAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if err := list(); err == nil {
		t.Fatal("the API answered after StopAPIServer")
	}
	t0 := time.Now()
	if err := c.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("API server started and ready in %s", time.Since(t0).Round(time.Millisecond))
	if err := list(); err != nil {
		t.Fatalf("after StartAPIServer: %v", err)
	}
	after, err := c.r.l.readProc(procAPIServer)
	if err != nil || after == before || !after.alive() {
		t.Fatalf("API server record before %v, after %v (%v): want a new live process", before, after, err)
	}

	// RestartAPIServer: unreachable during the down time, back afterwards
	done := make(chan error, 1)
	go func() { done <- c.RestartAPIServer(ctx, 2*time.Second) }()
	// One request at a time, never retried: client-go retries a GET that
	// ends in EOF (what the forwarder gives while the API server is down)
	// until it succeeds, which would hide the down time.
	probe := func() error {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		defer pcancel()
		return cs.CoreV1().RESTClient().Get().AbsPath("/readyz").MaxRetries(0).Do(pctx).Error()
	}
	sawDown := false
	for finished := false; !finished; {
		if probe() != nil {
			sawDown = true
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			finished = true
		case <-time.After(50 * time.Millisecond):
		}
	}
	if !sawDown {
		t.Error("the API never failed during RestartAPIServer")
	}
	if err := list(); err != nil {
		t.Fatalf("after RestartAPIServer: %v", err)
	}

	// Freeze: requests time out (the socket accepts, nothing answers); Thaw: back
	if err := c.FreezeAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	err = list()
	t.Logf("request to the frozen API server: %v after %s", err, time.Since(t0).Round(time.Millisecond))
	if err == nil {
		t.Error("the frozen API server answered")
	}
	if err := c.ThawAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if err := list(); err != nil {
		t.Fatalf("after ThawAPIServer: %v", err)
	}
	// The frozen API server's nsenter wrapper stopped with it (util-linux
	// propagates a child's stop); after the thaw it must run again, so that a
	// later kill leaves neither a stopped wrapper nor a zombie behind.
	frozen, err := c.r.l.readProc(procAPIServer)
	if err != nil {
		t.Fatal(err)
	}
	_, wrapper, _, _ := readStat(frozen.PID)
	if state, _, _, err := readStat(wrapper); err == nil && state == 'T' {
		t.Errorf("the API server's wrapper (pid %d) is still stopped after ThawAPIServer", wrapper)
	}
	if err := c.RestartAPIServer(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if !waitGone(wrapper, 5*time.Second) {
		t.Errorf("the killed API server's wrapper (pid %d) is still there", wrapper)
	}
	if _, err := c.RebootNode(ctx, "nodeexec-tc-77"); !errors.Is(err, ErrNoSuchNode) {
		t.Errorf("RebootNode of an unknown node: %v, want ErrNoSuchNode", err)
	}
}

func TestFaultKubelet(t *testing.T) {
	c, cs, ns := faultCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	node := c.Nodes()[len(c.Nodes())-1]
	p := sleeper(t, ctx, cs, ns, node, corev1.RestartPolicyNever)

	if err := c.StopKubelet(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s NotReady %s after the kubelet stopped", node, waitNodeCondition(t, ctx, cs, node, false, 2*time.Minute).Round(time.Millisecond))
	t0 := time.Now()
	if err := c.StartKubelet(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s Ready %s after StartKubelet", node, time.Since(t0).Round(time.Millisecond))
	// the container ran on without its kubelet: same container, still running
	got := waitPod(t, ctx, cs, p, "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	if containerID(got) != containerID(p) || got.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("container %s (restarts %d), want %s unchanged", containerID(got), got.Status.ContainerStatuses[0].RestartCount, containerID(p))
	}
}

func TestFaultContainerd(t *testing.T) {
	c, cs, ns := faultCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	node := c.Nodes()[len(c.Nodes())-1]
	p := sleeper(t, ctx, cs, ns, node, corev1.RestartPolicyNever)

	if err := c.StopContainerd(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s NotReady %s after containerd stopped", node, waitNodeCondition(t, ctx, cs, node, false, 2*time.Minute).Round(time.Millisecond))
	t0 := time.Now()
	if err := c.StartContainerd(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s Ready %s after StartContainerd", node, time.Since(t0).Round(time.Millisecond))
	got := waitPod(t, ctx, cs, p, "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	if containerID(got) != containerID(p) {
		t.Errorf("container %s, want %s unchanged (the shim keeps it running)", containerID(got), containerID(p))
	}
}

func TestFaultReboot(t *testing.T) {
	c, cs, ns := faultCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	nodes := c.Nodes()
	node, other := nodes[len(nodes)-1], nodes[0]
	never := sleeper(t, ctx, cs, ns, node, corev1.RestartPolicyNever)
	always := sleeper(t, ctx, cs, ns, node, corev1.RestartPolicyAlways)
	otherBoot := nodeObject(t, ctx, cs, other).Status.NodeInfo.BootID
	oldBoot := nodeObject(t, ctx, cs, node).Status.NodeInfo.BootID

	t0 := time.Now()
	id, err := c.RebootNode(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s rebooted in %s: boot ID %s -> %s", node, time.Since(t0).Round(time.Millisecond), oldBoot, id)
	n := nodeObject(t, ctx, cs, node)
	if got := n.Status.NodeInfo.BootID; got != id || id == oldBoot || id == "" {
		t.Errorf("bootID %q, RebootNode returned %q, before %q: want a new one", got, id, oldBoot)
	}
	if !readyTrue(n) {
		t.Errorf("%s not Ready after RebootNode", node)
	}
	if got := nodeObject(t, ctx, cs, other).Status.NodeInfo.BootID; got != otherBoot {
		t.Errorf("%s's bootID changed too: %q -> %q", other, otherBoot, got)
	}
	// what ran on the node was killed: the restartPolicy Never pod ended, the
	// Always pod runs a new container
	got := waitPod(t, ctx, cs, never, "ended", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
	})
	t.Logf("restartPolicy Never pod: %s, %+v", got.Status.Phase, got.Status.ContainerStatuses[0].State)
	if got.Status.Phase != corev1.PodFailed {
		t.Errorf("restartPolicy Never pod: %s, want Failed", got.Status.Phase)
	}
	got = waitPod(t, ctx, cs, always, "restarted", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && containerID(p) != "" && containerID(p) != containerID(always) &&
			p.Status.ContainerStatuses[0].State.Running != nil
	})
	t.Logf("restartPolicy Always pod: container %s -> %s", containerID(always), containerID(got))
}

// waitGone reports whether process pid has exited (a zombie counts: its
// parent reaps it) within timeout.
func waitGone(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		state, _, _, err := readStat(pid)
		if err != nil || state == 'X' || state == 'Z' {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
