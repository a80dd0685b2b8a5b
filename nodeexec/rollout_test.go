package nodeexec_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodeexec/nodeexec/nodeexec"
)

func failOn(names ...string) func(context.Context, nodeexec.Request) (nodeexec.Result, error) {
	return func(_ context.Context, req nodeexec.Request) (nodeexec.Result, error) {
		for _, n := range names {
			if req.Node == n {
				return nodeexec.Result{ExitCode: 1}, &nodeexec.ExitError{Node: n, Code: 1}
			}
		}
		return nodeexec.Result{}, nil
	}
}

func TestRunCanary(t *testing.T) {
	nodes := readyNodes("a", "b", "c", "d")
	t.Run("a failing canary stops the run", func(t *testing.T) {
		be := &fakeBackend{fn: failOn("a")}
		r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(nodes...), Backend: be, Canary: 1})
		results, err := r.Run(t.Context(), nodeexec.Targets{All: true}, nodeexec.Request{Command: []string{"x"}})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"a"}, be.called()); diff != "" {
			t.Errorf("ran on (-want +got):\n%s", diff)
		}
		for _, res := range results[1:] {
			if !errors.Is(res.Err, nodeexec.ErrSkipped) || !strings.Contains(res.Err.Error(), `canary failed on ["a"]`) || res.Attempts != 0 {
				t.Errorf("node %s: err %v attempts %d, want ErrSkipped naming the canary", res.Node, res.Err, res.Attempts)
			}
		}
	})
	t.Run("a good canary lets the rest run", func(t *testing.T) {
		be := &fakeBackend{fn: failOn("c")}
		r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(nodes...), Backend: be, Canary: 2})
		results, err := r.Run(t.Context(), nodeexec.Targets{All: true}, nodeexec.Request{Command: []string{"x"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(be.called()) != 4 || len(nodeexec.Failed(results)) != 1 {
			t.Errorf("ran %v, failed %d; want all 4 run and only c failed", be.called(), len(nodeexec.Failed(results)))
		}
	})
}

func TestRunBatchesAreSequential(t *testing.T) {
	// Each stage starts only when the previous one has finished: record the
	// order of starts and ends.
	var mu sync.Mutex
	var events []string
	be := &fakeBackend{fn: func(_ context.Context, req nodeexec.Request) (nodeexec.Result, error) {
		mu.Lock()
		events = append(events, "start "+req.Node)
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		events = append(events, "end "+req.Node)
		mu.Unlock()
		return nodeexec.Result{}, nil
	}}
	r := newRunner(t, nodeexec.RunnerOptions{
		Client: fake.NewClientset(readyNodes("a", "b", "c")...), Backend: be,
		Batches: []intstr.IntOrString{intstr.FromInt32(1), intstr.FromInt32(2)},
	})
	if _, err := r.Run(t.Context(), nodeexec.Targets{All: true}, nodeexec.Request{Command: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	if events[0] != "start a" || events[1] != "end a" {
		t.Errorf("the first stage (a) did not finish before the second began: %v", events)
	}
}

func TestRunMaxErrors(t *testing.T) {
	// MaxErrors 1 with concurrency 1: the second failure stops the run; nodes
	// after it are skipped. Never more than budget+concurrency nodes fail.
	names := []string{"a", "b", "c", "d", "e", "f"}
	one := intstr.FromInt32(1)
	be := &fakeBackend{fn: failOn("a", "b", "c", "d", "e", "f")}
	var onResult atomic.Int32
	r := newRunner(t, nodeexec.RunnerOptions{
		Client: fake.NewClientset(readyNodes(names...)...), Backend: be,
		MaxConcurrency: 1, MaxErrors: &one,
		OnResult: func(nodeexec.NodeResult) { onResult.Add(1) },
	})
	results, err := r.Run(t.Context(), nodeexec.Targets{All: true}, nodeexec.Request{Command: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a", "b"}, be.called()); diff != "" {
		t.Errorf("ran on (-want +got):\n%s", diff)
	}
	for _, res := range results[2:] {
		if !errors.Is(res.Err, nodeexec.ErrSkipped) || !strings.Contains(res.Err.Error(), "2 nodes failed, more than the error budget of 1") {
			t.Errorf("node %s: %v", res.Node, res.Err)
		}
	}
	if got := onResult.Load(); got != int32(len(names)) {
		t.Errorf("OnResult called %d times, want once per node (%d)", got, len(names))
	}
}

func TestRunOnStartOnResult(t *testing.T) {
	// OnStart comes before the backend runs and before OnResult, once per
	// node that runs; a skipped node gets only OnResult.
	one := intstr.FromInt32(0)
	var (
		mu     sync.Mutex
		events []string
	)
	add := func(e string) { mu.Lock(); events = append(events, e); mu.Unlock() }
	be := &fakeBackend{fn: func(_ context.Context, req nodeexec.Request) (nodeexec.Result, error) {
		add("run " + req.Node)
		if req.Node == "a" {
			return nodeexec.Result{ExitCode: 1}, &nodeexec.ExitError{Node: "a", Code: 1}
		}
		return nodeexec.Result{}, nil
	}}
	r := newRunner(t, nodeexec.RunnerOptions{
		Client: fake.NewClientset(readyNodes("a", "b")...), Backend: be,
		MaxConcurrency: 1, MaxErrors: &one,
		OnStart:  func(node string) { add("start " + node) },
		OnResult: func(res nodeexec.NodeResult) { add("result " + res.Node) },
	})
	if _, err := r.Run(t.Context(), nodeexec.Targets{All: true}, nodeexec.Request{Command: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"start a", "run a", "result a", "result b"}, events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestRunRetriesInfrastructureFailuresOnly(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	var tries atomic.Int32
	be := &fakeBackend{fn: func(_ context.Context, req nodeexec.Request) (nodeexec.Result, error) {
		n := tries.Add(1)
		switch {
		case req.Node == "a" && n <= 2:
			return nodeexec.Result{ExitCode: -1}, &nodeexec.PodError{Node: "a", Reason: "ErrImagePull"}
		case req.Node == "a":
			fmt.Fprint(req.Stdout, "fixed\n")
			return nodeexec.Result{}, nil
		default:
			return nodeexec.Result{ExitCode: 2}, &nodeexec.ExitError{Node: req.Node, Code: 2}
		}
	}}
	r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(readyNodes("a")...), Backend: be, Retries: 3, RetryBackoff: time.Second, Clock: clk})
	done := make(chan []nodeexec.NodeResult)
	go func() {
		res, _ := r.Run(t.Context(), nodeexec.Targets{All: true}, nodeexec.Request{Command: []string{"x"}})
		done <- res
	}()
	// Advance the fake clock through the backoffs (1s+jitter, 2s+jitter).
	var results []nodeexec.NodeResult
	for results == nil {
		select {
		case results = <-done:
		case <-time.After(time.Millisecond):
			if clk.HasWaiters() {
				clk.Step(3 * time.Second)
			}
		}
	}
	if results[0].Err != nil || results[0].Attempts != 3 || string(results[0].Stdout.Tail) != "fixed\n" {
		t.Errorf("a: err %v attempts %d stdout %q; want success on the 3rd attempt", results[0].Err, results[0].Attempts, results[0].Stdout.Tail)
	}

	// A non-zero exit is the command's answer: never retried.
	tries.Store(100)
	be2 := &fakeBackend{fn: be.fn}
	r2 := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(readyNodes("b")...), Backend: be2, Retries: 3, Clock: clk})
	res2, _ := r2.Run(t.Context(), nodeexec.Targets{All: true}, nodeexec.Request{Command: []string{"x"}})
	if len(be2.called()) != 1 || res2[0].Attempts != 1 {
		t.Errorf("exit 2 was tried %d times, want 1", len(be2.called()))
	}

	// A missing image with pull policy Never stays missing: never retried.
	be3 := &fakeBackend{fn: func(_ context.Context, req nodeexec.Request) (nodeexec.Result, error) {
		return nodeexec.Result{ExitCode: -1}, &nodeexec.PodError{Node: req.Node, Reason: "ErrImageNeverPull", Image: "x:1"}
	}}
	r3 := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(readyNodes("c")...), Backend: be3, Retries: 3, Clock: clk})
	res3, _ := r3.Run(t.Context(), nodeexec.Targets{All: true}, nodeexec.Request{Command: []string{"x"}})
	if len(be3.called()) != 1 || res3[0].Attempts != 1 || !errors.Is(res3[0].Err, nodeexec.ErrImageNeverPull) {
		t.Errorf("ErrImageNeverPull: tried %d times (err %v), want once", len(be3.called()), res3[0].Err)
	}
}

func TestRunOutputSummaries(t *testing.T) {
	be := &fakeBackend{fn: func(_ context.Context, req nodeexec.Request) (nodeexec.Result, error) {
		fmt.Fprint(req.Stdout, strings.Repeat("x", 10)+"\nsame\n")
		fmt.Fprint(req.Stderr, "warn "+req.Node+"\n")
		return nodeexec.Result{}, nil
	}}
	r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(readyNodes("a", "b")...), Backend: be, TailBytes: 5})
	results, err := r.Run(t.Context(), nodeexec.Targets{All: true}, nodeexec.Request{Command: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	a, b := results[0], results[1]
	if string(a.Stdout.Tail) != "same\n" || a.Stdout.Bytes != 16 || a.Attempts != 1 {
		t.Errorf("a stdout %+v attempts %d", a.Stdout, a.Attempts)
	}
	if a.Stdout.SHA256 != b.Stdout.SHA256 || a.Stderr.SHA256 == b.Stderr.SHA256 {
		t.Errorf("digests: equal stdout must match (%s, %s), different stderr must not", a.Stdout.SHA256, b.Stdout.SHA256)
	}

	// SkipDigest: the same lengths and tails, no digests.
	r = newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(readyNodes("a")...), Backend: be, TailBytes: 5, SkipDigest: true})
	results, err = r.Run(t.Context(), nodeexec.Targets{Nodes: []string{"a"}}, nodeexec.Request{Command: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	want := nodeexec.Output{Tail: []byte("same\n"), Bytes: 16}
	if diff := cmp.Diff(want, results[0].Stdout); diff != "" || results[0].Stderr.SHA256 != "" {
		t.Errorf("SkipDigest: stdout (-want +got):\n%sstderr digest %q, want none", diff, results[0].Stderr.SHA256)
	}
}

// TestRunPreflightHook: RunnerOptions.Preflight replaces the backend's
// Preflight, is called once with the first node whatever the node count, and
// its refusal runs nothing.
func TestRunPreflightHook(t *testing.T) {
	for _, nodes := range [][]string{{"a"}, {"a", "b"}} {
		be := &preflightBackend{}
		var hooked []string
		r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(readyNodes(nodes...)...), Backend: be,
			Preflight: func(_ context.Context, node string) error { hooked = append(hooked, node); return nil }})
		if _, err := r.Run(t.Context(), nodeexec.Targets{All: true}, nodeexec.Request{Command: []string{"x"}}); err != nil {
			t.Fatal(err)
		}
		if len(be.preflights) != 0 || len(hooked) != 1 || hooked[0] != "a" || len(be.called()) != len(nodes) {
			t.Errorf("%d nodes: backend preflights %v, hook %v, runs %v; want none, [a], %d", len(nodes), be.preflights, hooked, be.called(), len(nodes))
		}
	}
	be := &preflightBackend{}
	refused := errors.New("refused by the hook")
	r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(readyNodes("a", "b")...), Backend: be,
		Preflight: func(context.Context, string) error { return refused }})
	if res, err := r.Run(t.Context(), nodeexec.Targets{All: true}, nodeexec.Request{Command: []string{"x"}}); !errors.Is(err, refused) || res != nil || len(be.called()) != 0 {
		t.Errorf("refusing hook: (%v, %v), runs %v; want the refusal and nothing run", res, err, be.called())
	}
}
