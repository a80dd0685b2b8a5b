package resident

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/remotecommand"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nodeexec/spool"
)

// countingTransport counts the requests that reach the API server, by
// method, resource and (for lists) whether they carry a field selector.
type countingTransport struct {
	rt http.RoundTripper
	mu *sync.Mutex
	n  map[string]int
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	key := r.Method + " "
	switch {
	case strings.Contains(r.URL.Path, "/daemonsets/"):
		key += "daemonset"
	case strings.HasSuffix(r.URL.Path, "/pods") && r.URL.Query().Get("fieldSelector") != "":
		key += "pods (one node)"
	case strings.HasSuffix(r.URL.Path, "/pods"):
		key += "pods"
	default:
		key += r.URL.Path
	}
	c.mu.Lock()
	c.n[key]++
	c.mu.Unlock()
	return c.rt.RoundTrip(r)
}

// agentAPI is an API server that knows the agent DaemonSet and one ready
// agent pod ("agent-NODE") on each of nodes: it serves the DaemonSet's get
// and the pod lists (label selector ignored, a spec.nodeName field
// selector honoured, limit and continue as offsets). It returns a client of
// it, with every request counted in the returned map.
func agentAPI(t *testing.T, nodes []string) (kubernetes.Interface, func() map[string]int) {
	t.Helper()
	ds := agentDS()
	ds.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"}
	pods := make([]corev1.Pod, 0, len(nodes))
	for _, n := range nodes {
		p := agentPod("agent-"+n, n, true)
		p.Annotations = map[string]string{agent.AnnotationServe: "7710"}
		pods = append(pods, *p)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		q := r.URL.Query()
		switch r.URL.Path {
		case "/apis/apps/v1/namespaces/" + DefaultNamespace + "/daemonsets/" + DaemonSetName:
			_ = json.NewEncoder(w).Encode(ds)
		case "/api/v1/namespaces/" + DefaultNamespace + "/pods":
			sel := pods
			if fs := q.Get("fieldSelector"); fs != "" {
				node := strings.TrimPrefix(fs, "spec.nodeName=")
				sel = nil
				for _, p := range pods {
					if p.Spec.NodeName == node {
						sel = append(sel, p)
					}
				}
			}
			from, _ := strconv.Atoi(q.Get("continue"))
			list := corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}}
			to := len(sel)
			if limit, _ := strconv.Atoi(q.Get("limit")); limit > 0 && from+limit < len(sel) {
				to = from + limit
				list.Continue = strconv.Itoa(to)
			}
			list.Items = sel[from:to]
			_ = json.NewEncoder(w).Encode(list)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	var mu sync.Mutex
	counts := map[string]int{}
	cfg := &rest.Config{Host: srv.URL, QPS: -1, WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
		return countingTransport{rt: rt, mu: &mu, n: counts}
	}}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs, func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]int{}
		for k, v := range counts {
			out[k] = v
			delete(counts, k)
		}
		return out
	}
}

func total(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

// nodeCommander runs the agent's nsenter on the request's node.
type nodeCommander struct{}

func (nodeCommander) AgentCommand(_ context.Context, req nodeexec.Request) (string, []string, error) {
	return req.Node, []string{agent.Path, "agent", "nsenter", "--", "id"}, nil
}

// okStreamer is an exec into an agent that prints "out" and exits 0 (with
// the spool's end mark), safe for concurrent use; it records the pods.
type okStreamer struct {
	mu   sync.Mutex
	pods map[string]int
	fail map[string]error // by pod: the exec fails so, running nothing
}

func (s *okStreamer) Exec(_ context.Context, _, pod string, opts *corev1.PodExecOptions, streams remotecommand.StreamOptions) error {
	s.mu.Lock()
	if s.pods == nil {
		s.pods = map[string]int{}
	}
	s.pods[pod]++
	err := s.fail[pod]
	s.mu.Unlock()
	if err != nil {
		return err
	}
	_, _ = streams.Stdout.Write([]byte("out\n"))
	for _, a := range opts.Command {
		if a == "--spool" {
			_, _ = streams.Stderr.Write(spool.End{Stdout: 4}.Trailer())
			break
		}
	}
	return nil
}

// TestFanOutListsAgentsOnce: a Runner's fan-out over the resident backend
// looks the agents up with the same API requests at 10 or 1,200 nodes (the
// first node by itself, then one paged list of every agent), where looking
// each node up by itself (FindAgent, what every run did before) costs two
// requests per node. Counted at the HTTP transport.
func TestFanOutListsAgentsOnce(t *testing.T) {
	for _, n := range []int{10, 1200} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			names := make([]string, n)
			nodes := make([]*corev1.Node, n)
			for i := range names {
				names[i] = fmt.Sprintf("node-%04d", i)
				nodes[i] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: names[i]},
					Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
			}
			cs, counts := agentAPI(t, names)

			for _, node := range names {
				if _, ok, err := FindAgent(t.Context(), cs, "", node); err != nil || !ok {
					t.Fatalf("FindAgent %s: %v %v", node, ok, err)
				}
			}
			perNode := counts()

			exec := &okStreamer{}
			inner := &fakeInner{name: "nsenter"}
			b, err := Wrap(inner, WrapOptions{Client: cs, Streamer: exec, Commander: nodeCommander{}})
			if err != nil {
				t.Fatal(err)
			}
			r, err := nodeexec.NewRunner(nodeexec.RunnerOptions{Client: cs, Backend: b, MaxConcurrency: 50})
			if err != nil {
				t.Fatal(err)
			}
			results, err := r.RunNodes(t.Context(), nodes, nodeexec.Request{Command: []string{"id"}, Timeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			fanOut := counts()
			for _, res := range results {
				if res.Err != nil || res.Pod != "agent-"+res.Node {
					t.Fatalf("node %s: pod %q err %v", res.Node, res.Pod, res.Err)
				}
			}
			if inner.ran || len(exec.pods) != n {
				t.Errorf("the wrapped backend ran (%v), or not every agent did: %d of %d", inner.ran, len(exec.pods), n)
			}
			pages := (n + ListPageSize - 1) / ListPageSize
			want := map[string]int{"GET daemonset": 2, "GET pods (one node)": 1, "GET pods": pages}
			t.Logf("%d nodes: looked up one by one: %d requests %v; the fan-out: %d requests %v", n, total(perNode), perNode, total(fanOut), fanOut)
			if fmt.Sprint(fanOut) != fmt.Sprint(want) {
				t.Errorf("the fan-out's requests: %v, want %v (the preflight node's lookup, then one list)", fanOut, want)
			}
			if total(perNode) != 2*n {
				t.Errorf("FindAgent per node: %d requests, want %d", total(perNode), 2*n)
			}
		})
	}
}

// A single-node run (its preflight, then the run) looks its node up by
// itself: no list of every agent.
func TestSingleNodeLooksUpItsNodeOnly(t *testing.T) {
	cs, counts := agentAPI(t, []string{"node-1", "node-2"})
	b, err := Wrap(&fakeInner{name: "nsenter"}, WrapOptions{Client: cs, Streamer: &okStreamer{}, Commander: nodeCommander{}})
	if err != nil {
		t.Fatal(err)
	}
	if !b.SkipPreflight(t.Context(), "node-1") {
		t.Fatal("SkipPreflight: no agent on node-1")
	}
	if res, err := b.Run(t.Context(), nodeexec.Request{Node: "node-1", Command: []string{"id"}, Timeout: 10 * time.Second}); err != nil || res.Pod != "agent-node-1" {
		t.Fatalf("run: %+v %v", res, err)
	}
	// A second run on the same node looks it up by itself again.
	if res, err := b.Run(t.Context(), nodeexec.Request{Node: "node-1", Command: []string{"id"}, Timeout: 10 * time.Second}); err != nil || res.Pod != "agent-node-1" {
		t.Fatalf("second run: %+v %v", res, err)
	}
	if got, want := fmt.Sprint(counts()), fmt.Sprint(map[string]int{"GET daemonset": 2, "GET pods (one node)": 2}); got != want {
		t.Errorf("requests %s, want %s", got, want)
	}
}

// The list answers lookups for AgentListMaxAge; the next lookup lists
// again. A listed agent pod that is gone when its run reaches it is looked
// up again: the node's new agent runs the command; with none, the wrapped
// backend does.
func TestAgentListAgeAndGonePods(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	old := agentPod("a-old", "node-1", true)
	client := fake.NewClientset(agentDS(), agentPod("a-0", "node-0", true), old, agentPod("a-2", "node-2", true))
	gone := fmt.Errorf("port-forward to %s/a-old: %w: pods %q not found", DefaultNamespace, podexec.ErrNotStarted, "a-old")
	exec := &okStreamer{fail: map[string]error{"a-old": gone}}
	inner := &fakeInner{name: "nsenter"}
	b, err := Wrap(inner, WrapOptions{Client: client, Streamer: exec, Commander: nodeCommander{}, Clock: clk, AgentListMaxAge: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	run := func(node string) nodeexec.Result {
		t.Helper()
		res, err := b.Run(t.Context(), nodeexec.Request{Node: node, Command: []string{"id"}, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatalf("run on %s: %v", node, err)
		}
		return res
	}
	lists := func() (n int) {
		for _, a := range client.Actions() {
			if a.GetVerb() == "list" && a.(k8stesting.ListAction).GetListRestrictions().Fields.Empty() {
				n++
			}
		}
		return n
	}
	run("node-0") // by itself
	run("node-2") // lists
	if lists() != 1 {
		t.Fatalf("lists after two nodes: %d, want 1", lists())
	}
	// The agent of node-1 is replaced after the list.
	if err := client.CoreV1().Pods(DefaultNamespace).Delete(t.Context(), "a-old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods(DefaultNamespace).Create(t.Context(), agentPod("a-new", "node-1", true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if res := run("node-1"); res.Pod != "a-new" || inner.ran {
		t.Errorf("node-1 after its agent was replaced: pod %q, wrapped backend ran %v; want a-new", res.Pod, inner.ran)
	}
	if exec.pods["a-old"] != 1 || lists() != 1 {
		t.Errorf("a-old tried %d times (want 1), lists %d (want 1)", exec.pods["a-old"], lists())
	}
	// Within AgentListMaxAge the list (corrected) answers; after it, a new list.
	run("node-1")
	clk.Step(time.Minute)
	run("node-2")
	if lists() != 2 {
		t.Errorf("lists after AgentListMaxAge: %d, want 2", lists())
	}
	// A listed agent that is gone with no successor: the wrapped backend.
	exec.mu.Lock()
	exec.fail["a-2"] = fmt.Errorf("%w: pods %q not found", podexec.ErrNotStarted, "a-2")
	exec.mu.Unlock()
	if err := client.CoreV1().Pods(DefaultNamespace).Delete(t.Context(), "a-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if res := run("node-2"); !inner.ran || res.Backend != "nsenter" || res.Pod != "" {
		t.Errorf("node-2 without an agent: %+v, wrapped backend ran %v", res, inner.ran)
	}
	if _, err := Wrap(inner, WrapOptions{Client: client, Streamer: exec, Commander: nodeCommander{}, AgentListMaxAge: -time.Second}); err == nil || !strings.Contains(err.Error(), "AgentListMaxAge") {
		t.Errorf("a negative AgentListMaxAge: %v", err)
	}
}

// ReadyNodes of the run's backend (the CLI's agent image check, before the
// run) is the run's one lookup: the fan-out that follows, preflight
// included, reads the same list; a single node's lookup is its run's too.
func TestReadyNodesIsTheRunsLookup(t *testing.T) {
	const n = 1200
	names := make([]string, n)
	nodes := make([]*corev1.Node, n)
	for i := range names {
		names[i] = fmt.Sprintf("node-%04d", i)
		nodes[i] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: names[i]},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	}
	cs, counts := agentAPI(t, names[:n-1]) // the last node has no agent
	b, err := Wrap(&fakeInner{name: "nsenter"}, WrapOptions{Client: cs, Streamer: &okStreamer{}, Commander: nodeCommander{}})
	if err != nil {
		t.Fatal(err)
	}
	ready, err := b.ReadyNodes(t.Context(), append(names, "node-gone"))
	if err != nil || len(ready) != n-1 || ready[names[n-1]] || ready["node-gone"] {
		t.Fatalf("ReadyNodes: %d nodes, %v", len(ready), err)
	}
	r, err := nodeexec.NewRunner(nodeexec.RunnerOptions{Client: cs, Backend: b, MaxConcurrency: 50,
		Preflight: func(ctx context.Context, node string) error { b.SkipPreflight(ctx, node); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.RunNodes(t.Context(), nodes[:n-1], nodeexec.Request{Command: []string{"id"}, Timeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	pages := (n - 1 + ListPageSize - 1) / ListPageSize
	if got, want := fmt.Sprint(counts()), fmt.Sprint(map[string]int{"GET daemonset": 1, "GET pods": pages}); got != want {
		t.Errorf("ReadyNodes and the fan-out: requests %s, want %s (one list in all)", got, want)
	}

	// One node: its lookup by itself, which its preflight and run reuse.
	b, err = Wrap(&fakeInner{name: "nsenter"}, WrapOptions{Client: cs, Streamer: &okStreamer{}, Commander: nodeCommander{}})
	if err != nil {
		t.Fatal(err)
	}
	if ready, err := b.ReadyNodes(t.Context(), []string{"node-0001"}); err != nil || !ready["node-0001"] {
		t.Fatalf("ReadyNodes of one node: %v %v", ready, err)
	}
	if !b.SkipPreflight(t.Context(), "node-0001") {
		t.Fatal("SkipPreflight: no agent")
	}
	if res, err := b.Run(t.Context(), nodeexec.Request{Node: "node-0001", Command: []string{"id"}, Timeout: 10 * time.Second}); err != nil || res.Pod != "agent-node-0001" {
		t.Fatalf("run: %+v %v", res, err)
	}
	if got, want := fmt.Sprint(counts()), fmt.Sprint(map[string]int{"GET daemonset": 1, "GET pods (one node)": 1}); got != want {
		t.Errorf("one node: requests %s, want %s", got, want)
	}
}
