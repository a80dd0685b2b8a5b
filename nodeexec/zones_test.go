package nodeexec_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// zonedNodes returns ready nodes named "<prefix>-<i>" in zone (no label
// for nodeexec.NoZone).
func zonedNodes(prefix, zone string, n int) []*corev1.Node {
	var out []*corev1.Node
	for i := range n {
		var l map[string]string
		if zone != nodeexec.NoZone {
			l = map[string]string{nodeexec.ZoneLabel: zone}
		}
		out = append(out, node(fmt.Sprintf("%s-%03d", prefix, i), true, l))
	}
	return out
}

// zoneTracker counts the nodes of each zone in the backend at once.
type zoneTracker struct {
	mu             sync.Mutex
	zone           map[string]string // node -> zone
	now, peak      map[string]int
	total, peakAll int
}

func newZoneTracker(nodes []*corev1.Node) *zoneTracker {
	t := &zoneTracker{zone: map[string]string{}, now: map[string]int{}, peak: map[string]int{}}
	for _, n := range nodes {
		t.zone[n.Name] = nodeexec.ZoneOf(n)
	}
	return t
}

func (t *zoneTracker) enter(node string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	z := t.zone[node]
	t.now[z]++
	t.total++
	t.peak[z] = max(t.peak[z], t.now[z])
	t.peakAll = max(t.peakAll, t.total)
}

func (t *zoneTracker) leave(node string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.now[t.zone[node]]--
	t.total--
}

func TestRunMaxPerZone(t *testing.T) {
	var nodes []*corev1.Node
	nodes = append(nodes, zonedNodes("a", "zone-a", 12)...)
	nodes = append(nodes, zonedNodes("b", "zone-b", 12)...)
	nodes = append(nodes, zonedNodes("c", "zone-c", 1)...)
	nodes = append(nodes, zonedNodes("x", nodeexec.NoZone, 6)...) // no label: one group of their own
	tr := newZoneTracker(nodes)
	be := &fakeBackend{fn: func(ctx context.Context, req nodeexec.Request) (nodeexec.Result, error) {
		tr.enter(req.Node)
		defer tr.leave(req.Node)
		time.Sleep(2 * time.Millisecond)
		return nodeexec.Result{}, nil
	}}
	r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(), Backend: be, MaxConcurrency: 10, MaxPerZone: 2})
	results, err := r.RunNodes(t.Context(), nodes, nodeexec.Request{Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	for i, res := range results {
		if res.Err != nil || res.Node != nodes[i].Name {
			t.Errorf("result %d: node %q err %v, want %q and no error", i, res.Node, res.Err, nodes[i].Name)
		}
	}
	if n := len(be.called()); n != len(nodes) {
		t.Errorf("backend ran %d times, want %d", n, len(nodes))
	}
	for z, want := range map[string]int{"zone-a": 2, "zone-b": 2, "zone-c": 1, nodeexec.NoZone: 2} {
		if got := tr.peak[z]; got != want {
			t.Errorf("zone %q: at most %d nodes at once, want %d", z, got, want)
		}
	}
	if tr.peakAll > 7 {
		t.Errorf("%d nodes at once, more than the 4 zones' limits allow (7)", tr.peakAll)
	}
}

// TestRunMaxPerZoneFullZoneDoesNotBlockOthers: while zone-a is full, the
// nodes of zone-b, later in target order, start.
func TestRunMaxPerZoneFullZoneDoesNotBlockOthers(t *testing.T) {
	nodes := append(zonedNodes("a", "zone-a", 5), zonedNodes("b", "zone-b", 3)...)
	release := make(chan struct{})
	bStarted := make(chan string, 3)
	be := &fakeBackend{fn: func(ctx context.Context, req nodeexec.Request) (nodeexec.Result, error) {
		if req.Node[0] == 'b' {
			bStarted <- req.Node
			return nodeexec.Result{}, nil
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nodeexec.Result{}, nil
	}}
	r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(), Backend: be, MaxConcurrency: 4, MaxPerZone: 1})
	done := make(chan error, 1)
	go func() {
		_, err := r.RunNodes(t.Context(), nodes, nodeexec.Request{Command: []string{"true"}})
		done <- err
	}()
	for range 3 {
		select {
		case <-bStarted:
		case <-time.After(waitLimit):
			t.Fatal("zone-b's nodes did not start while zone-a's first node held zone-a's one slot")
		}
	}
	// The order of the backend's calls is the goroutines' (a-000's may come
	// after b's): compare the set.
	got := be.called()
	for deadline := time.Now().Add(waitLimit); len(got) < 4 && time.Now().Before(deadline); got = be.called() {
		time.Sleep(time.Millisecond)
	}
	slices.Sort(got)
	if want := []string{"a-000", "b-000", "b-001", "b-002"}; !slices.Equal(got, want) {
		t.Errorf("started %q, want %q only (zone-a full)", got, want)
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitLimit):
		t.Fatal("run did not end")
	}
	if n := len(be.called()); n != len(nodes) {
		t.Errorf("backend ran %d times, want %d", n, len(nodes))
	}
}

func TestNewRunnerMaxPerZone(t *testing.T) {
	cs, be := fake.NewClientset(), &fakeBackend{}
	for _, n := range []int{-1, -100} {
		_, err := nodeexec.NewRunner(nodeexec.RunnerOptions{Client: cs, Backend: be, MaxPerZone: n})
		checkErr(t, err, []string{"MaxPerZone", fmt.Sprint(n), "0 for no zone limit"})
	}
	if _, err := nodeexec.NewRunner(nodeexec.RunnerOptions{Client: cs, Backend: be, MaxPerZone: 0}); err != nil {
		t.Errorf("MaxPerZone 0 (no limit): %v", err)
	}
}

func TestCountZones(t *testing.T) {
	nodes := append(zonedNodes("a", "zone-a", 2), zonedNodes("x", nodeexec.NoZone, 3)...)
	nodes = append(nodes, node("empty", true, map[string]string{nodeexec.ZoneLabel: ""}))
	got := nodeexec.CountZones(nodes)
	if got["zone-a"] != 2 || got[nodeexec.NoZone] != 4 || len(got) != 2 {
		t.Errorf("CountZones = %v, want zone-a:2 and 4 without a zone (label missing or empty)", got)
	}
}

// TestRunCancelAtScale is Ctrl-C on a 5,000-node run: the run returns at
// once (the running nodes' backends end on the context; their cleanup, here
// "deleting the pod", done before they return), no node starts after the
// cancellation, and every node has a result: run and cancelled, or skipped.
func TestRunCancelAtScale(t *testing.T) {
	for _, perZone := range []int{0, 5} {
		t.Run(fmt.Sprintf("MaxPerZone=%d", perZone), func(t *testing.T) {
			var nodes []*corev1.Node
			for z := range 3 {
				nodes = append(nodes, zonedNodes(fmt.Sprintf("z%d", z), fmt.Sprintf("zone-%d", z), 1667)...)
			}
			const conc = 200
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var created, deleted, afterCancel atomic.Int32
			var cancelled atomic.Bool
			be := &fakeBackend{fn: func(ctx context.Context, req nodeexec.Request) (nodeexec.Result, error) {
				if cancelled.Load() {
					afterCancel.Add(1)
				}
				created.Add(1)
				<-ctx.Done()
				deleted.Add(1) // the pod backends delete with a context of their own
				return nodeexec.Result{ExitCode: -1}, ctx.Err()
			}}
			r := newRunner(t, nodeexec.RunnerOptions{Client: fake.NewClientset(), Backend: be, MaxConcurrency: conc, MaxPerZone: perZone})
			want := conc
			if perZone > 0 {
				want = 3 * perZone
			}
			go func() {
				for created.Load() < int32(want) {
					time.Sleep(time.Millisecond)
				}
				cancelled.Store(true)
				cancel()
			}()
			start := time.Now()
			results, err := r.RunNodes(ctx, nodes, nodeexec.Request{Command: []string{"true"}})
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > waitLimit {
				t.Errorf("Run returned %s after the start, want at once after the cancellation", d)
			}
			if c, d := created.Load(), deleted.Load(); c != int32(want) || d != c {
				t.Errorf("%d nodes started, %d cleaned up; want %d and all", c, d, want)
			}
			if n := afterCancel.Load(); n != 0 {
				t.Errorf("%d nodes started after the cancellation", n)
			}
			var ran, skipped int
			for i, res := range results {
				switch {
				case res.Node != nodes[i].Name:
					t.Fatalf("result %d is node %q, want %q", i, res.Node, nodes[i].Name)
				case errors.Is(res.Err, nodeexec.ErrSkipped):
					skipped++
				case errors.Is(res.Err, context.Canceled):
					ran++
				default:
					t.Fatalf("node %s: %v, want cancelled or skipped", res.Node, res.Err)
				}
			}
			if ran != want || skipped != len(nodes)-want {
				t.Errorf("%d ran and %d skipped, want %d and %d", ran, skipped, want, len(nodes)-want)
			}
		})
	}
}
