package nodeexec_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// TestRunMemoryPerNodeBounded: what a run keeps per node is the tails
// (TailBytes of stdout and of stderr), not the whole outputs: 2,000 nodes
// writing 256 KiB each (500 MiB in all) leave the results holding about
// 2,000 × 4 KiB.
func TestRunMemoryPerNodeBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 500 MiB through the runner")
	}
	const (
		nodes   = 2000
		perNode = 256 << 10
	)
	chunk := bytes.Repeat([]byte("0123456789abcdef0123456789abcde\n"), 1024) // 32 KiB of lines
	be := &fakeBackend{fn: func(ctx context.Context, req nodeexec.Request) (nodeexec.Result, error) {
		for range perNode / len(chunk) {
			_, _ = req.Stdout.Write(chunk)
		}
		_, _ = req.Stderr.Write([]byte("a line on stderr\n"))
		return nodeexec.Result{}, nil
	}}
	var ns []*corev1.Node
	for i := range nodes {
		ns = append(ns, node(fmt.Sprintf("n-%04d", i), true, nil))
	}
	r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(), Backend: be, MaxConcurrency: 50})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	// Like -o json: the output goes only into the records.
	results, err := r.RunNodes(t.Context(), ns, nodeexec.Request{Command: []string{"cat", "big"}})
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	kept := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	for _, res := range results {
		if res.Err != nil || res.Stdout.Bytes != perNode || len(res.Stdout.Tail) != nodeexec.DefaultTailBytes {
			t.Fatalf("%s: err %v, %d bytes, tail %d; want %d bytes and a %d-byte tail", res.Node, res.Err, res.Stdout.Bytes, len(res.Stdout.Tail), perNode, nodeexec.DefaultTailBytes)
		}
	}
	// The tails are 8 MiB (2,000 × 4 KiB); allow the results, names and
	// digests and some slack, far below the 500 MiB of output.
	if limit := int64(24 << 20); kept > limit {
		t.Errorf("the run keeps %d MiB for %d nodes, want at most %d MiB (tails only)", kept>>20, nodes, limit>>20)
	}
	t.Logf("kept %.1f MiB for %d nodes (%.1f KiB per node)", float64(kept)/(1<<20), nodes, float64(kept)/nodes/1024)
	runtime.KeepAlive(results)
}
