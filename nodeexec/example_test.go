package nodeexec_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// greeter is a toy Backend: it prints a line per node, and exits 2 on the
// node named "c". Real backends (debugpod, nsenter, ...) create a pod and
// exec into it; any of them fits RunnerOptions.Backend the same way.
type greeter struct{}

func (greeter) Name() string { return "greeter" }

func (greeter) Run(_ context.Context, req nodeexec.Request) (nodeexec.Result, error) {
	fmt.Fprintf(req.Stdout, "hello from %s\n", req.Node)
	res := nodeexec.Result{Node: req.Node, Backend: "greeter"}
	if req.Node == "c" {
		res.ExitCode = 2
		return res, &nodeexec.ExitError{Code: 2}
	}
	return res, nil
}

func readyNode(name string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": "blue"}},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
}

// A Runner fans a Request out over the nodes a selector matches, one node
// at a time here (MaxConcurrency 1, so the output's order is fixed), with
// each output line prefixed by its node. Each node gets its own result and
// exit code; Run's error is only for what stopped the whole run.
func ExampleRunner() {
	client := fake.NewSimpleClientset(readyNode("a"), readyNode("b"), readyNode("c"))
	r, err := nodeexec.NewRunner(nodeexec.RunnerOptions{Client: client, Backend: greeter{}, MaxConcurrency: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	results, err := r.Run(context.TODO(), nodeexec.Targets{Selector: "pool=blue"},
		nodeexec.Request{Command: []string{"echo", "hello"}, Stdout: os.Stdout, Timeout: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, res := range results {
		fmt.Printf("%s: exit %d\n", res.Node, nodeexec.ExitCode(res.Err))
	}
	// Output:
	// [a] hello from a
	// [b] hello from b
	// [c] hello from c
	// a: exit 0
	// b: exit 0
	// c: exit 2
}

// With a canary and an error budget of 0, a failing canary stops the
// rollout: the other nodes are skipped, never started.
func ExampleRunnerOptions_canary() {
	client := fake.NewSimpleClientset(readyNode("c"), readyNode("d"), readyNode("e"))
	budget := intstr.FromInt32(0)
	r, err := nodeexec.NewRunner(nodeexec.RunnerOptions{Client: client, Backend: greeter{}, Canary: 1, MaxErrors: &budget, NoPrefix: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	results, err := r.Run(context.TODO(), nodeexec.Targets{Nodes: []string{"c", "d", "e"}}, nodeexec.Request{Script: "echo hello", Stdout: os.Stdout})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, res := range results {
		fmt.Printf("%s: exit %d, skipped %t\n", res.Node, nodeexec.ExitCode(res.Err), errors.Is(res.Err, nodeexec.ErrSkipped))
	}
	// Output:
	// hello from c
	// c: exit 2, skipped false
	// d: exit 1, skipped true
	// e: exit 1, skipped true
}

// ExitCode maps a run's error to the exit status a CLI reports: the
// command's own status, 124 for a timeout (as timeout(1)), 0 for success.
func ExampleExitCode() {
	fmt.Println(nodeexec.ExitCode(nil))
	fmt.Println(nodeexec.ExitCode(fmt.Errorf("node a: %w", &nodeexec.ExitError{Code: 3})))
	fmt.Println(nodeexec.ExitCode(fmt.Errorf("node a: %w", nodeexec.ErrTimeout)))
	// Output:
	// 0
	// 3
	// 124
}

// Bad input is refused before anything is created, naming what to fix.
func ExampleTargets_Validate() {
	fmt.Println(nodeexec.Targets{Nodes: []string{"a"}, All: true}.Validate())
	fmt.Println(nodeexec.Targets{Selector: "pool in (blue"}.Validate() != nil)
	// Output:
	// choose the target nodes with exactly one of: node names (--node), a label selector (--selector), or all nodes (--all)
	// true
}
