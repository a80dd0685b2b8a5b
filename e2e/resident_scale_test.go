//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/nodeexec/nodeexec/internal/testcluster"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/resident"
	"github.com/nodeexec/nodeexec/nodeexec/spool"
)

// residentScaleNodes is how many SIMULATED nodes TestResidentScale adds.
const residentScaleNodes = 200

// TestResidentScale: on the real nodes plus residentScaleNodes SIMULATED
// kwok ones, `nodeexec agent install` puts a ready agent on every node (the
// DaemonSet tolerates the simulated nodes' taint and selects them, as a
// real node, by kubernetes.io/os=linux); a fan-out over the simulated nodes
// through the resident backend looks their agents up with two DaemonSet
// gets and two pod lists in all (the first node by itself, then one list;
// counted at the client's transport against the real API server; the
// commands themselves go to a stand-in exec, as kwok runs none), and every
// node's result names its own agent pod; `nodeexec agent uninstall` leaves
// nothing; the simulated nodes are deleted and kwok stopped.
func TestResidentScale(t *testing.T) {
	if env.cluster == nil {
		t.Skip("needs the local test cluster to run kwok")
	}
	ctx := t.Context()
	k := startKwok(ctx, t, testcluster.KwokOptions{}, 5*time.Minute)
	names, err := k.CreateNodes(ctx, residentScaleNodes, nil)
	if err != nil {
		t.Fatal(err)
	}

	ns := "nodeexec-e2e-rscale-" + randomSuffix()
	t.Cleanup(func() {
		_, _, _ = cli(context.WithoutCancel(ctx), "", "agent", "uninstall", "--namespace", ns, "--timeout", "3m")
	})
	start := time.Now()
	if _, stderr, code := cli(ctx, "", "agent", "install", "--namespace", ns, "--agent-image", agentImage(), "--timeout", "5m"); code != 0 {
		t.Fatalf("agent install on %d SIMULATED nodes and %d real ones: exit %d\n%s", len(names), len(env.nodes), code, stderr)
	}
	t.Logf("agent install on %d SIMULATED + %d real nodes took %s", len(names), len(env.nodes), time.Since(start).Round(time.Millisecond))
	agents, err := resident.ListAgents(ctx, env.client, ns)
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, n := range append(slices.Clone(names), env.nodes...) {
		if _, ok := agents[n]; !ok {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("no ready agent on %d nodes after install: %v", len(missing), missing[:min(len(missing), 10)])
	}

	// A fan-out over the simulated nodes: the lookups' requests counted.
	counts := &agentScaleCounts{n: map[string]int{}}
	cfg := *env.config
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return agentScaleRT{rt, counts} }
	client := kubernetes.NewForConfigOrDie(&cfg)
	exec := &residentScaleExec{pods: map[string]string{}}
	inner := &residentScaleInner{}
	b, err := resident.Wrap(inner, resident.WrapOptions{Client: client, Namespace: ns, Streamer: exec, Commander: residentScaleCommander{}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := nodeexec.NewRunner(nodeexec.RunnerOptions{Client: client, Backend: b, MaxConcurrency: 50, IncludeNotReady: true})
	if err != nil {
		t.Fatal(err)
	}
	nodes := make([]*corev1.Node, len(names))
	for i, n := range names {
		nodes[i] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}
	}
	var out syncBuffer
	results, err := r.RunNodes(ctx, nodes, nodeexec.Request{Command: []string{"hostname"}, Stdout: &out, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range results {
		if res.Err != nil || res.Pod != agents[res.Node].Pod || res.Namespace != ns {
			t.Errorf("node %s: pod %s/%s (want %s), err %v", res.Node, res.Namespace, res.Pod, agents[res.Node].Pod, res.Err)
		}
		if !strings.Contains(out.String(), "["+res.Node+"] "+res.Node+"\n") {
			t.Errorf("node %s: its output is missing", res.Node)
		}
	}
	if inner.runs() != 0 {
		t.Errorf("the wrapped backend ran on %d nodes", inner.runs())
	}
	by, total := counts.snapshot()
	t.Logf("%d SIMULATED nodes through their resident agents: %d API requests for the lookups: %v", len(names), total, by)
	if want := map[string]int{"GET daemonsets": 2, "LIST pods": 2}; fmt.Sprint(by) != fmt.Sprint(want) {
		t.Errorf("the fan-out's API requests: %v, want %v (the first node by itself, then one list of every agent)", by, want)
	}

	if _, stderr, code := cli(ctx, "", "agent", "uninstall", "--namespace", ns, "--timeout", "3m"); code != 0 {
		t.Fatalf("agent uninstall: exit %d\n%s", code, stderr)
	}
	if left := managedLeft(ctx, t, ns); len(left) > 0 {
		t.Errorf("left after agent uninstall: %v", left[:min(len(left), 10)])
	}
}

// residentScaleCommander runs the agent's nsenter on the request's node.
type residentScaleCommander struct{}

func (residentScaleCommander) AgentCommand(_ context.Context, req nodeexec.Request) (string, []string, error) {
	return req.Node, []string{agent.Path, "agent", "nsenter", "--", "hostname"}, nil
}

// residentScaleExec stands in for the exec into an agent pod (the
// simulated nodes run nothing): the command prints the pod's node, as
// hostname would, and ends with the spool's end mark and status 0.
type residentScaleExec struct {
	mu   sync.Mutex
	pods map[string]string
}

func (e *residentScaleExec) Exec(ctx context.Context, namespace, pod string, opts *corev1.PodExecOptions, streams remotecommand.StreamOptions) error {
	p, err := env.client.CoreV1().Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return err
	}
	line := p.Spec.NodeName + "\n"
	_, _ = streams.Stdout.Write([]byte(line))
	if slices.Contains(opts.Command, "--spool") {
		_, _ = streams.Stderr.Write(spool.End{Stdout: int64(len(line))}.Trailer())
	}
	e.mu.Lock()
	e.pods[pod] = p.Spec.NodeName
	e.mu.Unlock()
	return nil
}

// residentScaleInner is the wrapped backend: it counts its runs.
type residentScaleInner struct {
	mu sync.Mutex
	n  int
}

func (i *residentScaleInner) Name() string { return "nsenter" }
func (i *residentScaleInner) Run(_ context.Context, req nodeexec.Request) (nodeexec.Result, error) {
	i.mu.Lock()
	i.n++
	i.mu.Unlock()
	return nodeexec.Result{Node: req.Node, Backend: "nsenter", ExitCode: -1}, fmt.Errorf("node %s: no resident agent was used", req.Node)
}
func (i *residentScaleInner) runs() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.n
}
