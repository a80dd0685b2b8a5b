package nodeexec_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// waitLimit bounds every wait in these tests so that a bug fails the test
// instead of hanging it.
const waitLimit = 5 * time.Second

func node(name string, ready bool, labels map[string]string) *corev1.Node {
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionFalse
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
			{Type: corev1.NodeReady, Status: status},
		}},
	}
}

func readyNodes(names ...string) []runtime.Object {
	var objs []runtime.Object
	for _, n := range names {
		objs = append(objs, node(n, true, nil))
	}
	return objs
}

func nodeNames(nodes []*corev1.Node) []string {
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	return names
}

// fakeBackend runs fn for every request and records the nodes it was called for.
type fakeBackend struct {
	fn func(ctx context.Context, req nodeexec.Request) (nodeexec.Result, error)

	mu    sync.Mutex
	calls []string
}

func (b *fakeBackend) Name() string { return "fake" }

func (b *fakeBackend) Run(ctx context.Context, req nodeexec.Request) (nodeexec.Result, error) {
	b.mu.Lock()
	b.calls = append(b.calls, req.Node)
	b.mu.Unlock()
	if b.fn == nil {
		return nodeexec.Result{ExitCode: 0}, nil
	}
	return b.fn(ctx, req)
}

func (b *fakeBackend) called() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.calls)
}

// preflightBackend is a fakeBackend with a Preflight.
type preflightBackend struct {
	fakeBackend
	err error

	pmu        sync.Mutex
	preflights []string
}

func (b *preflightBackend) Preflight(ctx context.Context, node string) error {
	b.pmu.Lock()
	defer b.pmu.Unlock()
	b.preflights = append(b.preflights, node)
	return b.err
}

func newRunner(t *testing.T, o nodeexec.RunnerOptions) *nodeexec.Runner {
	t.Helper()
	r, err := nodeexec.NewRunner(o)
	if err != nil {
		t.Fatalf("NewRunner: %v", err)
	}
	return r
}

func TestNewRunner(t *testing.T) {
	cs := fake.NewClientset()
	be := &fakeBackend{}
	tests := []struct {
		name    string
		o       nodeexec.RunnerOptions
		wantErr []string
	}{
		{name: "minimal", o: nodeexec.RunnerOptions{Client: cs, Backend: be}},
		{name: "all options", o: nodeexec.RunnerOptions{Client: cs, Backend: be, MaxConcurrency: 5, NoPrefix: true, IncludeNotReady: true, Clock: clocktesting.NewFakeClock(time.Now())}},
		{name: "no client", o: nodeexec.RunnerOptions{Backend: be}, wantErr: []string{"Client"}},
		{name: "no backend", o: nodeexec.RunnerOptions{Client: cs}, wantErr: []string{"Backend"}},
		{name: "negative concurrency", o: nodeexec.RunnerOptions{Client: cs, Backend: be, MaxConcurrency: -1}, wantErr: []string{"MaxConcurrency", "-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := nodeexec.NewRunner(tt.o)
			checkErr(t, err, tt.wantErr)
			if err == nil && r == nil {
				t.Error("NewRunner returned a nil Runner and no error")
			}
			if err != nil && r != nil {
				t.Error("NewRunner returned a Runner and an error")
			}
		})
	}
}

func TestResolve(t *testing.T) {
	cluster := []runtime.Object{
		node("n3", true, map[string]string{"role": "worker", "zone": "b"}),
		node("n1", true, map[string]string{"role": "worker", "zone": "a"}),
		node("cp", true, map[string]string{"role": "control-plane", "zone": "a"}),
		node("n2", false, map[string]string{"role": "worker", "gpu": "true", "zone": "b"}),
	}
	tests := []struct {
		name    string
		objs    []runtime.Object
		targets nodeexec.Targets
		want    []string
		// wantSelector is the LabelSelector sent to the API server.
		wantSelector string
		wantIs       error
		wantErr      []string
	}{
		{name: "names in the order given", objs: cluster, targets: nodeexec.Targets{Nodes: []string{"n3", "cp", "n1"}}, want: []string{"n3", "cp", "n1"}},
		{name: "duplicate names once", objs: cluster, targets: nodeexec.Targets{Nodes: []string{"n1", "n3", "n1"}}, want: []string{"n1", "n3"}},
		{name: "not-ready node is resolved", objs: cluster, targets: nodeexec.Targets{Nodes: []string{"n2"}}, want: []string{"n2"}},
		{
			name: "missing names all listed in order", objs: cluster,
			targets: nodeexec.Targets{Nodes: []string{"zz", "n1", "aa"}},
			wantIs:  nodeexec.ErrNodeNotFound, wantErr: []string{`["zz" "aa"]`},
		},
		{name: "selector", objs: cluster, targets: nodeexec.Targets{Selector: "role=worker"}, want: []string{"n1", "n2", "n3"}, wantSelector: "role=worker"},
		{name: "set-based selector", objs: cluster, targets: nodeexec.Targets{Selector: "role=worker,!gpu"}, want: []string{"n1", "n3"}, wantSelector: "!gpu,role=worker"},
		{name: "selector in", objs: cluster, targets: nodeexec.Targets{Selector: "zone in (a)"}, want: []string{"cp", "n1"}, wantSelector: "zone in (a)"},
		{
			name: "selector matching nothing", objs: cluster, targets: nodeexec.Targets{Selector: "role=db"},
			wantSelector: "role=db", wantIs: nodeexec.ErrNoNodes, wantErr: []string{`"role=db"`},
		},
		{name: "all, sorted", objs: cluster, targets: nodeexec.Targets{All: true}, want: []string{"cp", "n1", "n2", "n3"}},
		{name: "all of an empty cluster", targets: nodeexec.Targets{All: true}, wantIs: nodeexec.ErrNoNodes, wantErr: []string{"no node"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := fake.NewClientset(tt.objs...)
			r := newRunner(t, nodeexec.RunnerOptions{Client: cs, Backend: &fakeBackend{}})
			nodes, err := r.Resolve(t.Context(), tt.targets)
			if tt.wantIs != nil {
				if !errors.Is(err, tt.wantIs) {
					t.Fatalf("Resolve error = %v, want one wrapping %v", err, tt.wantIs)
				}
				checkErr(t, err, tt.wantErr)
			} else if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if diff := cmp.Diff(tt.want, nodeNames(nodes)); diff != "" {
				t.Errorf("nodes mismatch (-want +got):\n%s", diff)
			}
			var lists []metav1.ListOptions
			for _, a := range cs.Actions() {
				if la, ok := a.(k8stesting.ListActionImpl); ok && a.GetResource().Resource == "nodes" {
					lists = append(lists, la.GetListOptions())
				}
			}
			want := []metav1.ListOptions{{LabelSelector: tt.wantSelector, Limit: 500}}
			if diff := cmp.Diff(want, lists); diff != "" {
				t.Errorf("node LIST options mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResolveInvalidTargetsMakesNoCall(t *testing.T) {
	cs := fake.NewClientset(readyNodes("a")...)
	r := newRunner(t, nodeexec.RunnerOptions{Client: cs, Backend: &fakeBackend{}})
	if _, err := r.Resolve(t.Context(), nodeexec.Targets{Nodes: []string{"a"}, All: true}); err == nil {
		t.Fatal("Resolve with two kinds of target succeeded")
	}
	if n := len(cs.Actions()); n != 0 {
		t.Errorf("Resolve with invalid targets made %d API calls, want 0", n)
	}
}

func TestResolveListError(t *testing.T) {
	cs := fake.NewClientset()
	boom := errors.New("connection refused")
	cs.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, boom
	})
	r := newRunner(t, nodeexec.RunnerOptions{Client: cs, Backend: &fakeBackend{}})
	_, err := r.Resolve(t.Context(), nodeexec.Targets{All: true})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "listing nodes") {
		t.Errorf("Resolve error = %v, want one wrapping %v and saying it was listing nodes", err, boom)
	}
}

// paginate serves the node LIST in pages of the given names, following
// Continue tokens, and records the options of every LIST.
func paginate(cs *fake.Clientset, pages ...[]string) *[]metav1.ListOptions {
	var (
		mu   sync.Mutex
		seen []metav1.ListOptions
	)
	cs.PrependReactor("list", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		opts := a.(k8stesting.ListActionImpl).GetListOptions()
		mu.Lock()
		seen = append(seen, opts)
		mu.Unlock()
		page := 0
		if opts.Continue != "" {
			if _, err := fmt.Sscanf(opts.Continue, "page-%d", &page); err != nil {
				return true, nil, fmt.Errorf("bad continue token %q", opts.Continue)
			}
		}
		list := &corev1.NodeList{}
		for _, n := range pages[page] {
			list.Items = append(list.Items, *node(n, true, nil))
		}
		if page+1 < len(pages) {
			list.Continue = fmt.Sprintf("page-%d", page+1)
		}
		return true, list, nil
	})
	return &seen
}

func TestResolvePagination(t *testing.T) {
	pages := [][]string{{"d", "a"}, {"c"}, {"e", "b"}}
	wantOpts := []metav1.ListOptions{
		{Limit: 500},
		{Limit: 500, Continue: "page-1"},
		{Limit: 500, Continue: "page-2"},
	}
	tests := []struct {
		name    string
		targets nodeexec.Targets
		want    []string
		wantIs  error
	}{
		{name: "all, sorted across pages", targets: nodeexec.Targets{All: true}, want: []string{"a", "b", "c", "d", "e"}},
		{name: "names on different pages", targets: nodeexec.Targets{Nodes: []string{"e", "a"}}, want: []string{"e", "a"}},
		{name: "name missing from every page", targets: nodeexec.Targets{Nodes: []string{"b", "x"}}, wantIs: nodeexec.ErrNodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := fake.NewClientset()
			seen := paginate(cs, pages...)
			r := newRunner(t, nodeexec.RunnerOptions{Client: cs, Backend: &fakeBackend{}})
			nodes, err := r.Resolve(t.Context(), tt.targets)
			if !errors.Is(err, tt.wantIs) {
				t.Fatalf("Resolve error = %v, want %v", err, tt.wantIs)
			}
			if diff := cmp.Diff(tt.want, nodeNames(nodes)); diff != "" {
				t.Errorf("nodes mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantOpts, *seen); diff != "" {
				t.Errorf("LIST options mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRunNotReady(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	objs := []runtime.Object{
		node("a", true, nil),
		node("b", false, nil),
		// No Ready condition at all counts as not Ready.
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "c"}},
	}
	tests := []struct {
		name            string
		includeNotReady bool
		wantCalls       []string
		wantNotReady    []string
	}{
		{name: "skipped", wantCalls: []string{"a"}, wantNotReady: []string{"b", "c"}},
		{name: "included", includeNotReady: true, wantCalls: []string{"a", "b", "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := &fakeBackend{}
			r := newRunner(t, nodeexec.RunnerOptions{
				Client: fake.NewClientset(objs...), Backend: be, MaxConcurrency: 1,
				IncludeNotReady: tt.includeNotReady, Clock: clk,
			})
			results, err := r.Run(t.Context(), nodeexec.Targets{All: true}, nodeexec.Request{Command: []string{"true"}})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if diff := cmp.Diff(tt.wantCalls, be.called()); diff != "" {
				t.Errorf("backend calls mismatch (-want +got):\n%s", diff)
			}
			var notReady []string
			for _, res := range results {
				if res.Err == nil {
					continue
				}
				if !errors.Is(res.Err, nodeexec.ErrNodeNotReady) {
					t.Errorf("node %s: error %v, want ErrNodeNotReady", res.Node, res.Err)
				}
				if !strings.Contains(res.Err.Error(), fmt.Sprintf("%q", res.Node)) {
					t.Errorf("node %s: error %q does not name the node", res.Node, res.Err)
				}
				want := nodeexec.Result{Node: res.Node, ExitCode: -1, Started: clk.Now(), Finished: clk.Now(), Backend: "fake"}
				if diff := cmp.Diff(want, res.Result); diff != "" {
					t.Errorf("node %s: result mismatch (-want +got):\n%s", res.Node, diff)
				}
				notReady = append(notReady, res.Node)
			}
			if diff := cmp.Diff(tt.wantNotReady, notReady); diff != "" {
				t.Errorf("not-ready nodes mismatch (-want +got):\n%s", diff)
			}
			var failed []string
			for _, f := range nodeexec.Failed(results) {
				failed = append(failed, f.Node)
			}
			if diff := cmp.Diff(tt.wantNotReady, failed); diff != "" {
				t.Errorf("Failed() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRunResults(t *testing.T) {
	exitErr := &nodeexec.ExitError{Node: "b", Code: 3}
	be := &fakeBackend{fn: func(_ context.Context, req nodeexec.Request) (nodeexec.Result, error) {
		switch req.Node {
		case "b":
			// The backend leaves Node empty; the Runner fills it in.
			return nodeexec.Result{ExitCode: 3}, exitErr
		case "c":
			return nodeexec.Result{Node: "wrong", ExitCode: 0, Backend: "custom", Pod: "p-c"}, nil
		}
		return nodeexec.Result{ExitCode: 0}, nil
	}}
	r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(readyNodes("a", "b", "c")...), Backend: be})
	results, err := r.Run(t.Context(), nodeexec.Targets{Nodes: []string{"c", "a", "b"}}, nodeexec.Request{Command: []string{"true"}})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := []nodeexec.NodeResult{
		{Result: nodeexec.Result{Node: "c", Backend: "custom", Pod: "p-c"}},
		{Result: nodeexec.Result{Node: "a", Backend: "fake"}},
		{Result: nodeexec.Result{Node: "b", ExitCode: 3, Backend: "fake"}, Err: exitErr},
	}
	// Output summaries and attempts have their own tests (rollout_test.go).
	if diff := cmp.Diff(want, results, cmp.Comparer(func(a, b error) bool { return a == b }), cmpopts.IgnoreFields(nodeexec.NodeResult{}, "Stdout", "Stderr", "Attempts")); diff != "" {
		t.Errorf("results mismatch (-want +got):\n%s", diff)
	}
	calls := be.called()
	slices.Sort(calls)
	if diff := cmp.Diff([]string{"a", "b", "c"}, calls); diff != "" {
		t.Errorf("backend calls mismatch (-want +got):\n%s", diff)
	}
}

func TestRunRejectsBadInputBeforeListing(t *testing.T) {
	tests := []struct {
		name    string
		targets nodeexec.Targets
		req     nodeexec.Request
		wantErr string
	}{
		{name: "bad targets", targets: nodeexec.Targets{}, req: nodeexec.Request{Command: []string{"true"}}, wantErr: "exactly one"},
		{name: "bad request", targets: nodeexec.Targets{All: true}, req: nodeexec.Request{}, wantErr: "no command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := fake.NewClientset(readyNodes("a")...)
			be := &preflightBackend{}
			r := newRunner(t, nodeexec.RunnerOptions{Client: cs, Backend: be})
			results, err := r.Run(t.Context(), tt.targets, tt.req)
			checkErr(t, err, []string{tt.wantErr})
			if results != nil {
				t.Errorf("results = %v, want nil", results)
			}
			if n := len(cs.Actions()); n != 0 {
				t.Errorf("%d API calls, want 0", n)
			}
			if len(be.called()) != 0 || len(be.preflights) != 0 {
				t.Errorf("backend used: runs %v, preflights %v", be.called(), be.preflights)
			}
		})
	}
}

func TestRunMaxConcurrency(t *testing.T) {
	tests := []struct {
		name  string
		limit int
		nodes int
		want  int // the most nodes that run at once
	}{
		{name: "limit 3 of 10", limit: 3, nodes: 10, want: 3},
		{name: "limit 1", limit: 1, nodes: 4, want: 1},
		{name: "limit above node count", limit: 10, nodes: 4, want: 4},
		{name: "default", limit: 0, nodes: nodeexec.DefaultMaxConcurrency + 5, want: nodeexec.DefaultMaxConcurrency},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var names []string
			for i := range tt.nodes {
				names = append(names, fmt.Sprintf("node-%03d", i))
			}
			var inFlight, maxInFlight atomic.Int32
			entered := make(chan string, tt.nodes)
			release := make(chan struct{})
			be := &fakeBackend{fn: func(ctx context.Context, req nodeexec.Request) (nodeexec.Result, error) {
				n := inFlight.Add(1)
				for {
					m := maxInFlight.Load()
					if n <= m || maxInFlight.CompareAndSwap(m, n) {
						break
					}
				}
				entered <- req.Node
				select {
				case <-release:
				case <-ctx.Done():
				}
				inFlight.Add(-1)
				return nodeexec.Result{ExitCode: 0}, nil
			}}
			r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(readyNodes(names...)...), Backend: be, MaxConcurrency: tt.limit})

			type outcome struct {
				results []nodeexec.NodeResult
				err     error
			}
			done := make(chan outcome, 1)
			go func() {
				res, err := r.Run(t.Context(), nodeexec.Targets{All: true}, nodeexec.Request{Command: []string{"true"}})
				done <- outcome{res, err}
			}()
			recv := func() {
				t.Helper()
				select {
				case <-entered:
				case <-time.After(waitLimit):
					t.Fatalf("timed out waiting for a node to start (%d in flight)", inFlight.Load())
				}
			}
			// Fill every slot, then let one node finish at a time: each
			// finished node must make room for exactly one more.
			for range tt.want {
				recv()
			}
			for range tt.nodes - tt.want {
				release <- struct{}{}
				recv()
			}
			for range tt.want {
				release <- struct{}{}
			}
			var out outcome
			select {
			case out = <-done:
			case <-time.After(waitLimit):
				t.Fatal("Run did not return")
			}
			if out.err != nil {
				t.Fatalf("Run: %v", out.err)
			}
			if got := int(maxInFlight.Load()); got != tt.want {
				t.Errorf("at most %d nodes ran at once, want %d", got, tt.want)
			}
			var got []string
			for _, res := range out.results {
				if res.Err != nil {
					t.Errorf("node %s: %v", res.Node, res.Err)
				}
				got = append(got, res.Node)
			}
			if diff := cmp.Diff(names, got); diff != "" {
				t.Errorf("result nodes mismatch (-want +got):\n%s", diff)
			}
			if n := len(be.called()); n != tt.nodes {
				t.Errorf("backend ran %d times, want %d", n, tt.nodes)
			}
		})
	}
}

func TestRunStdin(t *testing.T) {
	const input = "line one\nline two\nno newline"

	t.Run("every node gets the same input", func(t *testing.T) {
		var mu sync.Mutex
		got := map[string]string{}
		be := &fakeBackend{fn: func(_ context.Context, req nodeexec.Request) (nodeexec.Result, error) {
			// Read in small pieces, to catch readers shared between nodes.
			var b bytes.Buffer
			buf := make([]byte, 3)
			for {
				n, err := req.Stdin.Read(buf)
				b.Write(buf[:n])
				if err == io.EOF {
					break
				}
				if err != nil {
					return nodeexec.Result{}, err
				}
			}
			mu.Lock()
			got[req.Node] = b.String()
			mu.Unlock()
			return nodeexec.Result{}, nil
		}}
		r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(readyNodes("a", "b", "c")...), Backend: be})
		results, err := r.Run(t.Context(), nodeexec.Targets{All: true}, nodeexec.Request{Command: []string{"cat"}, Stdin: strings.NewReader(input)})
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		for _, res := range results {
			if res.Err != nil {
				t.Errorf("node %s: %v", res.Node, res.Err)
			}
		}
		want := map[string]string{"a": input, "b": input, "c": input}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("stdin per node mismatch (-want +got):\n%s", diff)
		}
	})

	t.Run("one node reads the caller's reader directly", func(t *testing.T) {
		in := strings.NewReader(input)
		var seen io.Reader
		be := &fakeBackend{fn: func(_ context.Context, req nodeexec.Request) (nodeexec.Result, error) {
			seen = req.Stdin
			return nodeexec.Result{}, nil
		}}
		r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(readyNodes("a", "b")...), Backend: be})
		if _, err := r.Run(t.Context(), nodeexec.Targets{Nodes: []string{"b"}}, nodeexec.Request{Command: []string{"cat"}, Stdin: in}); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if seen != in {
			t.Errorf("single-node run got Stdin %T %p, want the caller's reader %p (not buffered)", seen, seen, in)
		}
	})

	t.Run("no stdin stays nil", func(t *testing.T) {
		var mu sync.Mutex
		var nonNil []string
		be := &fakeBackend{fn: func(_ context.Context, req nodeexec.Request) (nodeexec.Result, error) {
			if req.Stdin != nil {
				mu.Lock()
				nonNil = append(nonNil, req.Node)
				mu.Unlock()
			}
			return nodeexec.Result{}, nil
		}}
		r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(readyNodes("a", "b")...), Backend: be})
		if _, err := r.Run(t.Context(), nodeexec.Targets{All: true}, nodeexec.Request{Command: []string{"true"}}); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if len(nonNil) > 0 {
			t.Errorf("nodes %v got a non-nil Stdin though the request had none", nonNil)
		}
	})

	t.Run("read error", func(t *testing.T) {
		boom := errors.New("boom")
		be := &fakeBackend{}
		r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(readyNodes("a", "b")...), Backend: be})
		_, err := r.Run(t.Context(), nodeexec.Targets{All: true}, nodeexec.Request{Command: []string{"cat"}, Stdin: errReader{boom}})
		if !errors.Is(err, boom) {
			t.Errorf("Run error = %v, want one wrapping %v", err, boom)
		}
		if len(be.called()) != 0 {
			t.Errorf("backend ran on %v despite the error", be.called())
		}
	})
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// writeRecorder records every Write call separately.
type writeRecorder struct {
	mu    sync.Mutex
	calls []string
}

func (w *writeRecorder) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, string(p))
	return len(p), nil
}

func (w *writeRecorder) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.calls, "")
}

// linesByPrefix checks that every write holds whole lines that each start
// with "[node] ", and returns the lines of each node (prefix removed) in order.
func linesByPrefix(t *testing.T, w *writeRecorder) map[string][]string {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string][]string{}
	for _, call := range w.calls {
		if !strings.HasSuffix(call, "\n") {
			t.Errorf("write %q does not end a line", call)
			continue
		}
		for _, line := range strings.SplitAfter(strings.TrimSuffix(call, "\n"), "\n") {
			line = strings.TrimSuffix(line, "\n")
			name, text, ok := strings.Cut(line, "] ")
			if !ok {
				// A partial last line is marked "[node]+ " (ContinuedPrefix).
				name, text, ok = strings.Cut(line, "]+ ")
			}
			if !ok || !strings.HasPrefix(name, "[") {
				t.Errorf("line %q has no [node] prefix", line)
				continue
			}
			out[name[1:]] = append(out[name[1:]], text)
		}
	}
	return out
}

func TestRunOutputPrefix(t *testing.T) {
	names := []string{"a", "b", "c", "d"}
	const rounds = 3
	// Every node writes the start of a line, waits until all nodes have,
	// then ends it: without line buffering the lines would interleave.
	var barriers [rounds]sync.WaitGroup
	for i := range barriers {
		barriers[i].Add(len(names))
	}
	be := &fakeBackend{fn: func(_ context.Context, req nodeexec.Request) (nodeexec.Result, error) {
		for i := range rounds {
			fmt.Fprintf(req.Stdout, "%s says", req.Node)
			barriers[i].Done()
			barriers[i].Wait()
			fmt.Fprintf(req.Stdout, " %d\n", i)
		}
		fmt.Fprintf(req.Stderr, "warning from %s\nerr tail", req.Node)
		fmt.Fprint(req.Stdout, "out tail")
		return nodeexec.Result{}, nil
	}}
	r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(readyNodes(names...)...), Backend: be, MaxConcurrency: len(names)})
	stdout, stderr := &writeRecorder{}, &writeRecorder{}
	done := make(chan error, 1)
	go func() {
		_, err := r.Run(t.Context(), nodeexec.Targets{All: true}, nodeexec.Request{Command: []string{"x"}, Stdout: stdout, Stderr: stderr})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("Run did not return")
	}

	wantOut, wantErr := map[string][]string{}, map[string][]string{}
	for _, n := range names {
		wantOut[n] = []string{n + " says 0", n + " says 1", n + " says 2", "out tail"}
		wantErr[n] = []string{"warning from " + n, "err tail"}
	}
	if diff := cmp.Diff(wantOut, linesByPrefix(t, stdout)); diff != "" {
		t.Errorf("stdout lines mismatch (-want +got):\n%s\nraw: %q", diff, stdout.String())
	}
	if diff := cmp.Diff(wantErr, linesByPrefix(t, stderr)); diff != "" {
		t.Errorf("stderr lines mismatch (-want +got):\n%s\nraw: %q", diff, stderr.String())
	}
}

func TestRunNoPrefix(t *testing.T) {
	t.Run("one node passes through", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		be := &fakeBackend{fn: func(_ context.Context, req nodeexec.Request) (nodeexec.Result, error) {
			// Unbuffered: a partial line reaches the caller's writer at once.
			fmt.Fprint(req.Stdout, "part")
			if stdout.String() != "part" {
				t.Errorf("stdout holds %q right after the write, want \"part\" (no buffering)", stdout.String())
			}
			fmt.Fprint(req.Stdout, "ial")
			fmt.Fprint(req.Stderr, "e1\ne2")
			return nodeexec.Result{}, nil
		}}
		r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(readyNodes("a", "b")...), Backend: be, NoPrefix: true})
		if _, err := r.Run(t.Context(), nodeexec.Targets{Nodes: []string{"a"}}, nodeexec.Request{Command: []string{"x"}, Stdout: &stdout, Stderr: &stderr}); err != nil {
			t.Fatalf("Run: %v", err)
		}
		// Unbuffered: no newline is added to a partial line.
		if stdout.String() != "partial" || stderr.String() != "e1\ne2" {
			t.Errorf("stdout %q, stderr %q; want %q, %q", stdout.String(), stderr.String(), "partial", "e1\ne2")
		}
	})

	t.Run("one node with prefix", func(t *testing.T) {
		var stdout bytes.Buffer
		be := &fakeBackend{fn: func(_ context.Context, req nodeexec.Request) (nodeexec.Result, error) {
			fmt.Fprint(req.Stdout, "x\ny")
			return nodeexec.Result{}, nil
		}}
		r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(readyNodes("a")...), Backend: be})
		if _, err := r.Run(t.Context(), nodeexec.Targets{Nodes: []string{"a"}}, nodeexec.Request{Command: []string{"x"}, Stdout: &stdout}); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if got, want := stdout.String(), "[a] x\n[a]+ y\n"; got != want { // "+": the last line had no newline
			t.Errorf("stdout %q, want %q", got, want)
		}
	})

	t.Run("several nodes keep whole lines", func(t *testing.T) {
		stdout := &writeRecorder{}
		var barrier sync.WaitGroup
		barrier.Add(2)
		be := &fakeBackend{fn: func(_ context.Context, req nodeexec.Request) (nodeexec.Result, error) {
			fmt.Fprintf(req.Stdout, "from ")
			barrier.Done()
			barrier.Wait()
			fmt.Fprintf(req.Stdout, "%s\nlast", req.Node)
			return nodeexec.Result{}, nil
		}}
		r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(readyNodes("a", "b")...), Backend: be, NoPrefix: true})
		done := make(chan error, 1)
		go func() {
			_, err := r.Run(t.Context(), nodeexec.Targets{All: true}, nodeexec.Request{Command: []string{"x"}, Stdout: stdout})
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
		case <-time.After(waitLimit):
			t.Fatal("Run did not return")
		}
		var lines []string
		for _, c := range stdout.calls {
			if !strings.HasSuffix(c, "\n") {
				t.Errorf("write %q does not end a line", c)
			}
			lines = append(lines, strings.Split(strings.TrimSuffix(c, "\n"), "\n")...)
		}
		slices.Sort(lines)
		if diff := cmp.Diff([]string{"from a", "from b", "last", "last"}, lines); diff != "" {
			t.Errorf("lines mismatch (-want +got):\n%s", diff)
		}
	})

	t.Run("nil writers", func(t *testing.T) {
		be := &fakeBackend{fn: func(_ context.Context, req nodeexec.Request) (nodeexec.Result, error) {
			fmt.Fprint(req.Stdout, "x\ny")
			fmt.Fprint(req.Stderr, "z\n")
			return nodeexec.Result{}, nil
		}}
		for _, noPrefix := range []bool{false, true} {
			r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(readyNodes("a")...), Backend: be, NoPrefix: noPrefix})
			if _, err := r.Run(t.Context(), nodeexec.Targets{All: true}, nodeexec.Request{Command: []string{"x"}}); err != nil {
				t.Fatalf("NoPrefix %v: Run: %v", noPrefix, err)
			}
		}
	})
}

// observerBackend is a preflightBackend that is a nodeexec.NodeObserver,
// recording what it was shown and what had happened by then.
type observerBackend struct {
	preflightBackend
	observed                     []string
	preflightsBefore, runsBefore int
}

func (b *observerBackend) ObserveNodes(nodes []*corev1.Node) {
	b.observed = append(b.observed, nodeNames(nodes)...)
	b.preflightsBefore, b.runsBefore = len(b.preflights), len(b.called())
}

// TestRunObserveNodes: a NodeObserver backend is shown the resolved nodes
// once, before the preflight and before any run.
func TestRunObserveNodes(t *testing.T) {
	be := &observerBackend{}
	r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(readyNodes("c", "a", "b")...), Backend: be})
	if _, err := r.Run(t.Context(), nodeexec.Targets{Nodes: []string{"b", "c"}}, nodeexec.Request{Command: []string{"true"}}); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if diff := cmp.Diff([]string{"b", "c"}, be.observed); diff != "" {
		t.Errorf("observed (-want +got):\n%s", diff)
	}
	if be.preflightsBefore != 0 || be.runsBefore != 0 || len(be.preflights) != 1 || len(be.called()) != 2 {
		t.Errorf("shown after %d preflights and %d runs (want 0 and 0); %d preflights, %d runs in all", be.preflightsBefore, be.runsBefore, len(be.preflights), len(be.called()))
	}
}

func TestRunPreflight(t *testing.T) {
	t.Run("called once with the first node", func(t *testing.T) {
		be := &preflightBackend{}
		r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(readyNodes("c", "a", "b")...), Backend: be})
		results, err := r.Run(t.Context(), nodeexec.Targets{All: true}, nodeexec.Request{Command: []string{"true"}})
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if diff := cmp.Diff([]string{"a"}, be.preflights); diff != "" {
			t.Errorf("preflights mismatch (-want +got):\n%s", diff)
		}
		if len(results) != 3 || len(be.called()) != 3 {
			t.Errorf("%d results, %d runs; want 3, 3", len(results), len(be.called()))
		}
	})

	t.Run("skipped for a single node: its create is the admission check", func(t *testing.T) {
		be := &preflightBackend{}
		r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(readyNodes("a", "b")...), Backend: be})
		if _, err := r.Run(t.Context(), nodeexec.Targets{Nodes: []string{"b"}}, nodeexec.Request{Command: []string{"true"}}); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if len(be.preflights) != 0 || len(be.called()) != 1 {
			t.Errorf("preflights %v, runs %v; want none and one", be.preflights, be.called())
		}
	})

	t.Run("first of the names given", func(t *testing.T) {
		be := &preflightBackend{}
		r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(readyNodes("c", "a", "b")...), Backend: be})
		if _, err := r.Run(t.Context(), nodeexec.Targets{Nodes: []string{"b", "a"}}, nodeexec.Request{Command: []string{"true"}}); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if diff := cmp.Diff([]string{"b"}, be.preflights); diff != "" {
			t.Errorf("preflights mismatch (-want +got):\n%s", diff)
		}
	})

	t.Run("error aborts before any run", func(t *testing.T) {
		refused := fmt.Errorf("%w: namespace enforces baseline", nodeexec.ErrForbidden)
		be := &preflightBackend{err: refused}
		r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(readyNodes("a", "b")...), Backend: be})
		results, err := r.Run(t.Context(), nodeexec.Targets{All: true}, nodeexec.Request{Command: []string{"true"}})
		if !errors.Is(err, nodeexec.ErrForbidden) {
			t.Errorf("Run error = %v, want the preflight's", err)
		}
		if results != nil {
			t.Errorf("results = %v, want nil", results)
		}
		if len(be.called()) != 0 {
			t.Errorf("backend ran on %v after a failed preflight", be.called())
		}
		if diff := cmp.Diff([]string{"a"}, be.preflights); diff != "" {
			t.Errorf("preflights mismatch (-want +got):\n%s", diff)
		}
	})

	t.Run("not called when resolving fails", func(t *testing.T) {
		be := &preflightBackend{}
		r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(readyNodes("a")...), Backend: be})
		_, err := r.Run(t.Context(), nodeexec.Targets{Nodes: []string{"x"}}, nodeexec.Request{Command: []string{"true"}})
		if !errors.Is(err, nodeexec.ErrNodeNotFound) {
			t.Errorf("Run error = %v, want ErrNodeNotFound", err)
		}
		if len(be.preflights) != 0 {
			t.Errorf("preflight called with %v", be.preflights)
		}
	})
}

func TestRunPassesContextAndRequest(t *testing.T) {
	type key struct{}
	ctx := context.WithValue(t.Context(), key{}, "v")
	var got nodeexec.Request
	var gotValue any
	be := &fakeBackend{fn: func(ctx context.Context, req nodeexec.Request) (nodeexec.Result, error) {
		got, gotValue = req, ctx.Value(key{})
		return nodeexec.Result{}, nil
	}}
	r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(readyNodes("a")...), Backend: be})
	req := nodeexec.Request{Node: "ignored", Script: "echo hi", Env: map[string]string{"K": "V"}, Timeout: time.Minute}
	if _, err := r.Run(ctx, nodeexec.Targets{Nodes: []string{"a"}}, req); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if gotValue != "v" {
		t.Errorf("backend context lost the caller's values")
	}
	if got.Node != "a" || got.Script != "echo hi" || got.Env["K"] != "V" || got.Timeout != time.Minute {
		t.Errorf("backend got request %+v", got)
	}
}

func TestIsNodeReady(t *testing.T) {
	if !nodeexec.IsNodeReady(node("a", true, nil)) {
		t.Error("Ready=True node reported not ready")
	}
	if nodeexec.IsNodeReady(node("a", false, nil)) {
		t.Error("Ready=False node reported ready")
	}
	unknown := node("a", true, nil)
	unknown.Status.Conditions[1].Status = corev1.ConditionUnknown
	if nodeexec.IsNodeReady(unknown) {
		t.Error("Ready=Unknown node reported ready")
	}
	if nodeexec.IsNodeReady(&corev1.Node{}) {
		t.Error("node without conditions reported ready")
	}
}

// TestRunCancelStartsNoMoreNodes: after the caller cancels (Ctrl-C), the
// nodes waiting for a slot never start: they are reported skipped.
func TestRunCancelStartsNoMoreNodes(t *testing.T) {
	var names []string
	for i := range 6 {
		names = append(names, fmt.Sprintf("node-%d", i))
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	started := make(chan struct{}, len(names))
	be := &fakeBackend{fn: func(ctx context.Context, req nodeexec.Request) (nodeexec.Result, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nodeexec.Result{ExitCode: -1}, ctx.Err()
	}}
	r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(readyNodes(names...)...), Backend: be, MaxConcurrency: 2})
	go func() {
		<-started
		<-started
		cancel()
	}()
	results, err := r.Run(ctx, nodeexec.Targets{All: true}, nodeexec.Request{Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := be.called(); len(got) != 2 {
		t.Errorf("%d nodes started (%q), want the 2 running when cancelled", len(got), got)
	}
	skipped := 0
	for _, res := range results {
		if errors.Is(res.Err, nodeexec.ErrSkipped) {
			skipped++
			if !errors.Is(res.Err, context.Canceled) {
				t.Errorf("%s: %v, want the cancellation as the reason", res.Node, res.Err)
			}
		}
	}
	if skipped != 4 {
		t.Errorf("%d skipped, want 4", skipped)
	}
}

// TestResolveTrimsNodes: the nodes Resolve returns carry no managedFields,
// images, volumes or False conditions (what a run never reads), and keep
// their labels, annotations, taints, allocatable, node info, Ready and the
// conditions that hold.
func TestResolveTrimsNodes(t *testing.T) {
	n := node("n1", false, map[string]string{"zone": "a"})
	n.Annotations = map[string]string{"a": "b"}
	n.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
	n.Finalizers = []string{"x"}
	n.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}
	n.Status.NodeInfo.Architecture = "arm64"
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")}
	n.Status.Images = []corev1.ContainerImage{{Names: []string{"registry.example/big:1"}, SizeBytes: 1 << 30}}
	n.Status.VolumesInUse = []corev1.UniqueVolumeName{"v"}
	n.Status.VolumesAttached = []corev1.AttachedVolume{{Name: "v", DevicePath: "/dev/x"}}
	n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeDiskPressure, Status: corev1.ConditionTrue, Message: "disk full"})
	r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(n), Backend: &fakeBackend{}})
	for _, targets := range []nodeexec.Targets{{All: true}, {Nodes: []string{"n1"}}} {
		nodes, err := r.Resolve(t.Context(), targets)
		if err != nil || len(nodes) != 1 {
			t.Fatalf("Resolve(%+v): %v, %d nodes", targets, err, len(nodes))
		}
		got := nodes[0]
		if got.ManagedFields != nil || got.Finalizers != nil || got.Status.Images != nil || got.Status.VolumesInUse != nil || got.Status.VolumesAttached != nil {
			t.Errorf("node not trimmed: managedFields %v, finalizers %v, images %v, volumes %v %v", got.ManagedFields, got.Finalizers, got.Status.Images, got.Status.VolumesInUse, got.Status.VolumesAttached)
		}
		var conds []string
		for _, c := range got.Status.Conditions {
			conds = append(conds, fmt.Sprintf("%s=%s", c.Type, c.Status))
		}
		if want := []string{"Ready=False", "DiskPressure=True"}; !slices.Equal(conds, want) {
			t.Errorf("conditions %q, want %q (Ready and those that hold; not MemoryPressure=False)", conds, want)
		}
		if got.Labels["zone"] != "a" || got.Annotations["a"] != "b" || len(got.Spec.Taints) != 1 || got.Status.NodeInfo.Architecture != "arm64" || got.Status.Allocatable.Pods().Value() != 110 {
			t.Errorf("node lost what a run reads: %+v", got)
		}
	}
}
