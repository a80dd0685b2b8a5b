//go:build e2e

package e2e

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/nsenterpod"
	"github.com/nodeexec/nodeexec/nodeexec/resident"
	"github.com/nodeexec/nodeexec/nodeexec/runtimeexec"
)

// podCreations watches pods labelled with runID in every namespace and
// returns a function that stops the watch and lists the pods it saw created.
func podCreations(ctx context.Context, t *testing.T, runID string) func() []string {
	t.Helper()
	w, err := env.client.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{LabelSelector: nodeexec.LabelRunID + "=" + runID})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen []string
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Added {
				mu.Lock()
				seen = append(seen, p.Namespace+"/"+p.Name)
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		time.Sleep(500 * time.Millisecond) // let a late event arrive
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}

// managedLeft lists what is labelled managed-by=nodeexec and
// component=agent, plus the namespace ns if it still exists.
func managedLeft(ctx context.Context, t *testing.T, ns string) []string {
	t.Helper()
	sel := metav1.ListOptions{LabelSelector: resident.Selector()}
	var left []string
	dss, err := env.client.AppsV1().DaemonSets(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dss.Items {
		left = append(left, "daemonset "+d.Name)
	}
	pods, err := env.client.CoreV1().Pods(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		left = append(left, "pod "+p.Name)
	}
	if _, err := env.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil {
		left = append(left, "namespace "+ns)
	} else if !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return left
}

// TestResidentAgents: `agent install` puts an agent on every node; runs with
// resident agents (nsenter and runtime backends, library and CLI) create no
// pod and give the same results; `agent uninstall` leaves nothing labelled
// managed-by=nodeexec. It uses its own namespace, so that other tests'
// resident agents (in nodeexec-system) are not disturbed.
func TestResidentAgents(t *testing.T) {
	ctx := t.Context()
	ns := "nodeexec-e2e-res-" + randomSuffix()
	node := env.nodes[len(env.nodes)-1]
	target := rtTargetPod(ctx, t, node, "echo in-container > /tmp/resident-marker; exec sleep 3600", true)

	// Before the install, --use-resident falls back to creating a pod.
	rt := runtimeBackend(t, target, func(o *runtimeexec.Options) { o.NoProcFallback = true })
	wrapped, err := resident.Wrap(rt, resident.WrapOptions{Client: env.client, Config: env.config, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	res, err := wrapped.Run(ctx, nodeexec.Request{Command: []string{"cat", "/tmp/resident-marker"}, Stdout: &out})
	if err != nil || strings.TrimSpace(out.String()) != "in-container" || res.Namespace != "default" {
		t.Fatalf("without resident agents: %v, %q, %+v", err, out.String(), res)
	}
	assertRunPodsGone(ctx, t, "default", rt.RunID())

	t.Cleanup(func() {
		_, _, _ = cli(context.WithoutCancel(ctx), "", "agent", "uninstall", "--namespace", ns)
	})
	start := time.Now()
	if _, stderr, code := cli(ctx, "", "agent", "install", "--namespace", ns, "--agent-image", agentImage(), "--timeout", "2m"); code != 0 {
		t.Fatalf("agent install: exit %d\n%s", code, stderr)
	}
	t.Logf("agent install took %s", time.Since(start).Round(time.Millisecond))
	nsObj, err := env.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil || nsObj.Labels[resident.LabelPodSecurity] != "privileged" || nsObj.Labels[nodeexec.LabelManagedBy] != nodeexec.ManagedByValue {
		t.Errorf("namespace %s: %v %v", ns, err, nsObj.Labels)
	}
	for _, n := range env.nodes {
		if _, ok, err := resident.Find(ctx, env.client, ns, n); !ok || err != nil {
			t.Errorf("no resident agent on %s after install: %v", n, err)
		}
	}
	agentPod, _, _ := resident.Find(ctx, env.client, ns, node)

	// Library, runtime backend: into the container, through the resident agent, no pod.
	created := podCreations(ctx, t, rt.RunID())
	out = syncBuffer{}
	res, err = wrapped.Run(ctx, nodeexec.Request{Command: []string{"sh", "-c", "cat /tmp/resident-marker; hostname; exit 3"}, Stdout: &out})
	if nodeexec.ExitCode(err) != 3 || out.String() != "in-container\n"+target.Name+"\n" || res.Pod != agentPod || res.Namespace != ns || res.Backend != runtimeexec.Name {
		t.Errorf("runtime via resident: err %v, output %q, result %+v", err, out.String(), res)
	}
	if pods := created(); len(pods) != 0 {
		t.Errorf("runtime via resident created pods: %v", pods)
	}

	// Library, nsenter backend: the node's view, no pod.
	ne := nsenterBackend(t, nil)
	nw, err := resident.Wrap(ne, resident.WrapOptions{Client: env.client, Config: env.config, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	created = podCreations(ctx, t, ne.RunID())
	out = syncBuffer{}
	res, err = nw.Run(ctx, nodeexec.Request{Node: node, Command: []string{"sh", "-c", "cat /etc/hostname; tr '\\0' ' ' </proc/1/cmdline"}, Stdout: &out})
	if err != nil || res.Pod != agentPod || res.Backend != nsenterpod.Name || strings.Contains(out.String(), "nodeexec-agent") || strings.Contains(out.String(), "hold") {
		t.Errorf("nsenter via resident: err %v, output %q, result %+v", err, out.String(), res)
	}
	if pods := created(); len(pods) != 0 {
		t.Errorf("nsenter via resident created pods: %v", pods)
	}

	// CLI, runtime backend with --use-resident: the log says the resident agent ran it.
	stdout, stderr, code := cli(ctx, "", "-v", "1", "run", "--backend", "runtime", "--use-resident", "--resident-namespace", ns,
		"--pod", "default/"+target.Name, "--no-prefix", "--runtime-endpoint", "/run/nodeexec-testcluster/containerd-"+node+".sock", "--", "cat", "/tmp/resident-marker")
	if code != 0 || stdout != "in-container\n" || !strings.Contains(stderr, "using the resident agent") || strings.Contains(stderr, "created pod") {
		t.Errorf("CLI --use-resident: exit %d\nstdout: %q\nstderr: %s", code, stdout, stderr)
	}

	// CLI, ephemeral backend at node level: an ephemeral container joins the
	// node's resident agent (hostPID, hostNetwork), sees the node's files and
	// processes (its own kubelet), and creates no pod.
	host, _ := os.Hostname()
	before := managedPodCount(ctx, t)
	stdout, stderr, code = cli(ctx, "", "run", "--backend", "ephemeral", "--resident-namespace", ns, "--node", node, "--no-prefix", "--",
		"sh", "-c", "cat /proc/1/root/etc/hostname; ps -o comm | grep -c '^kubelet$'; exit 4")
	if code != 4 || stdout != host+"\n1\n" {
		t.Errorf("CLI ephemeral --node via the resident agent: exit %d, stdout %q, want 4 and %q\nstderr: %s", code, stdout, host+"\n1\n", stderr)
	}
	if after := managedPodCount(ctx, t); after != before {
		t.Errorf("ephemeral --node created pods: %d managed pods before, %d after", before, after)
	}

	if _, stderr, code := cli(ctx, "", "agent", "uninstall", "--namespace", ns, "--timeout", "2m"); code != 0 {
		t.Fatalf("agent uninstall: exit %d\n%s", code, stderr)
	}
	if left := managedLeft(ctx, t, ns); len(left) != 0 {
		t.Errorf("left after uninstall: %v", left)
	}
	// A second uninstall finds nothing to do.
	if _, stderr, code := cli(ctx, "", "agent", "uninstall", "--namespace", ns, "--timeout", "30s"); code != 0 {
		t.Errorf("second uninstall: exit %d\n%s", code, stderr)
	}
}
