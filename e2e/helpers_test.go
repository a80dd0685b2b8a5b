//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
)

// backend returns a debugpod backend on the suite's cluster.
func backend(t *testing.T, mutate func(*debugpod.Options)) *debugpod.Backend {
	t.Helper()
	o := debugpod.Options{PodOptions: debugpod.PodOptions{Client: env.client, Config: env.config, Image: env.image}}
	if mutate != nil {
		mutate(&o)
	}
	b, err := debugpod.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func runner(t *testing.T, b nodeexec.Backend) *nodeexec.Runner {
	t.Helper()
	r, err := nodeexec.NewRunner(nodeexec.RunnerOptions{Client: env.client, Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// syncBuffer is a bytes.Buffer safe for a writer and a concurrent reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// waitFor polls cond every 50 ms until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cond()
}

// runPods lists the pods of one backend's run.
func runPods(ctx context.Context, t *testing.T, ns, runID string) []string {
	t.Helper()
	list, err := env.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: nodeexec.LabelRunID + "=" + runID})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	return names
}

// assertRunPodsGone fails unless the run's pods are gone within 15 s.
func assertRunPodsGone(ctx context.Context, t *testing.T, ns, runID string) {
	t.Helper()
	var left []string
	if !waitFor(15*time.Second, func() bool { left = runPods(ctx, t, ns, runID); return len(left) == 0 }) {
		t.Errorf("pods of run %s still present: %v", runID, left)
	}
}

// managedPodCount counts pods labelled managed-by=nodeexec in every namespace.
func managedPodCount(ctx context.Context, t *testing.T) int {
	t.Helper()
	list, err := env.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: nodeexec.LabelManagedBy + "=" + nodeexec.ManagedByValue})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

// cli runs the nodeexec binary with the suite's kubeconfig and image.
func cli(ctx context.Context, stdin string, args ...string) (stdout, stderr string, code int) {
	return cliAs(ctx, env.kubeconfig, stdin, args...)
}

// cliAs runs the nodeexec binary with kubeconfig and the suite's image.
func cliAs(ctx context.Context, kubeconfig, stdin string, args ...string) (stdout, stderr string, code int) {
	cmd := exec.CommandContext(ctx, env.cli, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Env = append(cmd.Environ(), "NODEEXEC_IMAGE="+env.image)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err := cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
		e.WriteString(err.Error())
	}
	return o.String(), e.String(), code
}

// restoreCluster undoes every fault (testcluster's Restore) and then waits
// until each real node's kubelet sees new pods again (kubeletsWatching).
func restoreCluster(ctx context.Context, t *testing.T) {
	t.Helper()
	if err := env.cluster.Restore(ctx); err != nil {
		t.Errorf("Restore: %v", err)
		return
	}
	kubeletsWatching(ctx, t, env.nodes...)
}

// sleepingPod is a pod in "default" bound to node (no scheduler) that
// sleeps an hour in the test image, with labels, stopped at once when
// deleted.
func sleepingPod(name, node string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To(int64(0)),
			AutomountServiceAccountToken:  ptr.To(false),
			Containers: []corev1.Container{{
				Name: "sleep", Image: env.image, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"sleep", "3600"},
			}},
		},
	}
}

// kubeletsWatching waits, at most 2 minutes, until each node's kubelet runs a
// new pod bound to it, then deletes the pods. A Ready node is not enough after
// API server restarts: the kubelet's heartbeats are plain requests, but it
// learns of pods (and of an ephemeral container added to one) through a watch
// that client-go's reflector re-opens with a growing backoff (0.8 s doubling to
// 30 s, jittered up to twice that), so after a few restarts in a row a pod
// change can wait a minute to reach the node. Tests that inject faults call it
// before the next case so that this wait is not charged to what they measure.
// A kubelet that has not written a probe's status within kubeletSeesPodWithin
// is restarted (StopKubelet, StartKubelet: its pods keep running), which
// re-opens its watch at once: 5-10 s instead of up to a minute of backoff.
func kubeletsWatching(ctx context.Context, t *testing.T, nodes ...string) {
	t.Helper()
	start := time.Now()
	pods := env.client.CoreV1().Pods("default")
	var names, probed []string
	for _, node := range nodes {
		pod := sleepingPod(uniqueName("kubelet-probe-"), node, map[string]string{"nodeexec-e2e": "kubelet-probe"})
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Errorf("kubelet probe on %s: %v", node, err)
			continue
		}
		names, probed = append(names, pod.Name), append(probed, node)
	}
	defer func() {
		for _, name := range names {
			_ = pods.Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
		}
	}()
	for i, name := range names {
		var phase corev1.PodPhase
		seen := false // the kubelet has written the pod's status
		poll := func() bool {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err == nil {
				phase = p.Status.Phase
				seen = len(p.Status.Conditions) > 0
			}
			return phase == corev1.PodRunning
		}
		if !waitFor(kubeletSeesPodWithin, poll) && !seen && env.cluster != nil {
			// The kubelet has not even seen the pod: its pod watch waits out
			// the reflector's backoff. A restarted kubelet opens it at once
			// (its pods keep running), instead of up to a minute later.
			t.Logf("kubelet of %s has not seen a new pod in %s: restarting it (its pod watch is in backoff)", probed[i], kubeletSeesPodWithin)
			if err := env.cluster.StopKubelet(ctx, probed[i]); err != nil {
				t.Errorf("restarting the kubelet of %s: %v", probed[i], err)
			}
			if err := env.cluster.StartKubelet(ctx, probed[i]); err != nil {
				t.Errorf("restarting the kubelet of %s: %v", probed[i], err)
			}
		}
		if !waitFor(2*time.Minute, poll) {
			t.Errorf("kubelet probe %s not running after 2m (phase %q): the kubelet does not see new pods", name, phase)
		}
	}
	t.Logf("kubelets see new pods %.1fs after the check began", time.Since(start).Seconds())
}

// kubeletSeesPodWithin is how long a kubelet whose pod watch is open takes,
// at most, to write the status of a new pod bound to its node (about 0.5 s
// on the test cluster; 5 s on a loaded machine).
const kubeletSeesPodWithin = 8 * time.Second

// unreachableKubeconfig writes into dir a kubeconfig for an API server that
// does not answer (a local port just closed), and returns its path and the
// server's HOST:PORT.
func unreachableKubeconfig(t *testing.T, dir string) (path, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = ln.Addr().String()
	ln.Close()
	return writeKubeconfig(t, dir, "unreachable", "https://"+addr, "x"), addr
}

// refused runs the CLI with args and checks what every refused input must
// give: exit status 2, exactly one error message, first on stderr and
// containing each of want, nothing on stdout, within 30 s. It returns
// stdout and stderr for further checks.
func refused(ctx context.Context, t *testing.T, args []string, want ...string) (stdout, stderr string) {
	t.Helper()
	start := time.Now()
	stdout, stderr, code := cli(ctx, "", args...)
	if code != 2 {
		t.Errorf("exit %d, want 2; stderr:\n%s", code, stderr)
	}
	if n := strings.Count(stderr, "error: "); n != 1 || !strings.HasPrefix(stderr, "error: ") {
		t.Errorf("stderr has %d error messages, want exactly one, first:\n%s", n, stderr)
	}
	for _, w := range want {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, stderr)
		}
	}
	if stdout != "" {
		t.Errorf("stdout %q, want nothing", stdout)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("took %s: bad input must fail fast", took)
	}
	return stdout, stderr
}

// cordonLog records, from a watch of one node (started by watchCordon),
// when the node was first seen cordoned: a cordon that lasts a moment
// between two polls is seen too.
type cordonLog struct {
	mu    sync.Mutex
	first time.Time
}

// watchCordon watches node until the test ends; the node must not be
// cordoned when it starts.
func watchCordon(t *testing.T, node string) *cordonLog {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	n, err := env.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if n.Spec.Unschedulable {
		cancel()
		t.Fatalf("node %s is cordoned before the test", node)
	}
	l := &cordonLog{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		rv := n.ResourceVersion
		for ctx.Err() == nil {
			w, err := env.client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + node, ResourceVersion: rv})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				p, ok := ev.Object.(*corev1.Node)
				if !ok || ev.Type == watch.Error {
					continue
				}
				rv = p.ResourceVersion
				if p.Spec.Unschedulable {
					l.mu.Lock()
					if l.first.IsZero() {
						l.first = time.Now()
					}
					l.mu.Unlock()
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return l
}

// firstCordon is when the node was first seen cordoned (zero: never).
func (l *cordonLog) firstCordon() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first
}

// cordoned reports whether the node was ever seen cordoned.
func (l *cordonLog) cordoned() bool { return !l.firstCordon().IsZero() }

// deleteCRD deletes the CustomResourceDefinition name and waits (up to 60 s)
// until the API server no longer has it: a CRD that is still terminating is
// still in discovery, and a watcher the next test starts would watch a
// resource that then vanishes under its informer.
func deleteCRD(t testing.TB, dyn dynamic.Interface, name string) {
	t.Helper()
	ctx := context.Background()
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	if err := crds.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting CRD %s: %v", name, err)
		return
	}
	if !waitFor(60*time.Second, func() bool {
		_, err := crds.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}) {
		t.Errorf("CRD %s still there 60s after its deletion", name)
	}
}
