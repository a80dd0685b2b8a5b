package watcher

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func script(mutate func(*v1alpha1.NodeScriptSpec)) *v1alpha1.NodeScript {
	ns := &v1alpha1.NodeScript{
		ObjectMeta: metav1.ObjectMeta{Name: "fix", UID: "uid-fix"},
		Spec: v1alpha1.NodeScriptSpec{
			NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}},
			Script:       "true",
		},
	}
	if mutate != nil {
		mutate(&ns.Spec)
	}
	return ns
}

// cluster is a set of nodes whose states tests change as the watcher would.
type cluster map[string]*rolloutNode

func newCluster(names ...string) cluster {
	c := cluster{}
	for _, n := range names {
		c[n] = &rolloutNode{Name: n, UID: "uid-" + n, Labels: map[string]string{"pool": "a"}, Ready: true, State: nodeState{Phase: v1alpha1.PhasePending}}
	}
	return c
}

func (c cluster) nodes() []rolloutNode {
	var out []rolloutNode
	for _, n := range c {
		out = append(out, *n)
	}
	slices.SortFunc(out, func(a, b rolloutNode) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (c cluster) set(ns *v1alpha1.NodeScript, phase string, names ...string) {
	for _, n := range names {
		c[n].State = nodeState{Hash: v1alpha1.SpecHash(&ns.Spec), Phase: phase, Since: t0, Attempts: 1}
	}
}

func decide(t *testing.T, ns *v1alpha1.NodeScript, c cluster, now time.Time) decision {
	t.Helper()
	d, err := computeDecision(ns, c.nodes(), now)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestCanaryThenRest(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) { s.Rollout.MaxConcurrency = ptr.To(intstr.FromInt32(2)) })
	c := newCluster("a", "b", "c", "d")
	d := decide(t, ns, c, t0)
	if d.Stage != v1alpha1.StageCanary || len(d.Start) != 1 || d.Counts.Nodes != 4 {
		t.Fatalf("first decision %+v: want the stage Canary starting one canary of 4 nodes", d)
	}
	canary := d.Start[0]
	c.set(ns, v1alpha1.PhaseRunning, canary)
	if d := decide(t, ns, c, t0); d.Stage != v1alpha1.StageCanary || len(d.Start) != 0 || d.Counts.Running != 1 {
		t.Errorf("while the canary runs: %+v, want nothing started", d)
	}
	c.set(ns, v1alpha1.PhaseSucceeded, canary)
	d = decide(t, ns, c, t0)
	if d.Stage != v1alpha1.StageRolling || len(d.Start) != 2 || slices.Contains(d.Start, canary) {
		t.Errorf("after the canary: %+v, want 2 others started (max concurrency 2)", d)
	}
	c.set(ns, v1alpha1.PhaseRunning, d.Start...)
	if d := decide(t, ns, c, t0); len(d.Start) != 0 {
		t.Errorf("concurrency exceeded: 2 running, max 2, yet starting %v", d.Start)
	}
}

func TestCanaryFailureHalts(t *testing.T) {
	ns := script(nil)
	c := newCluster("a", "b", "c")
	canary := decide(t, ns, c, t0).Start[0]
	c.set(ns, v1alpha1.PhaseFailed, canary)
	d := decide(t, ns, c, t0)
	if d.Stage != v1alpha1.StageHalted || d.HaltReason != "canary "+canary+" failed" || len(d.Start) != 0 {
		t.Errorf("%+v, want Halted by the canary and nothing started", d)
	}
}

func TestCompleteWithFailuresWithinBudget(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.Rollout.Canary = ptr.To(int32(0))
		s.Rollout.MaxFailures = &intstr.IntOrString{Type: intstr.Int, IntVal: 1}
	})
	c := newCluster("a", "b", "c")
	c.set(ns, v1alpha1.PhaseSucceeded, "a", "b")
	c.set(ns, v1alpha1.PhaseFailed, "c")
	if d := decide(t, ns, c, t0); d.Stage != v1alpha1.StageComplete || d.Counts.Failed != 1 || len(d.Start) != 0 {
		t.Fatalf("every node finished, one failure within a budget of 1: %+v", d)
	}
	c.set(ns, v1alpha1.PhaseRunning, "b")
	if d := decide(t, ns, c, t0); d.Stage == v1alpha1.StageComplete {
		t.Fatalf("a node still running, yet %s", d.Stage)
	}
}

func TestErrorBudget(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.Rollout.MaxFailures = ptr.To(intstr.FromInt32(1))
		s.Rollout.MaxConcurrency = ptr.To(intstr.FromString("100%"))
	})
	c := newCluster("a", "b", "c", "d", "e")
	canary := decide(t, ns, c, t0).Start[0]
	c.set(ns, v1alpha1.PhaseSucceeded, canary)
	rest := decide(t, ns, c, t0).Start
	if len(rest) != 4 {
		t.Fatalf("started %v, want the 4 others", rest)
	}
	c.set(ns, v1alpha1.PhaseFailed, rest[0])
	c.set(ns, v1alpha1.PhaseRunning, rest[1:]...)
	if d := decide(t, ns, c, t0); d.Stage == v1alpha1.StageHalted {
		t.Errorf("1 failure within a budget of 1 halted: %+v", d)
	}
	c.set(ns, v1alpha1.PhaseRolledBack, rest[1])
	d := decide(t, ns, c, t0)
	if d.Stage != v1alpha1.StageHalted || !strings.Contains(d.HaltReason, "2 nodes failed, more than the error budget of 1") {
		t.Errorf("%+v, want Halted by the budget", d)
	}
}

func TestManualPromotion(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) { s.Rollout.Promotion = v1alpha1.PromotionManual })
	c := newCluster("a", "b", "c")
	canary := decide(t, ns, c, t0).Start[0]
	c.set(ns, v1alpha1.PhaseSucceeded, canary)
	if d := decide(t, ns, c, t0); d.Stage != v1alpha1.StageAwaitingPromotion || len(d.Start) != 0 {
		t.Errorf("%+v, want AwaitingPromotion", d)
	}
	// Promote a label first, then all.
	var other string
	for _, n := range []string{"a", "b", "c"} {
		if n != canary {
			other = n
			break
		}
	}
	c[other].Labels["zone"] = "z1"
	ns.Spec.Rollout.PromoteTo = "zone=z1"
	if d := decide(t, ns, c, t0); d.Stage != v1alpha1.StageRolling || !cmp.Equal(d.Start, []string{other}) {
		t.Errorf("promoted zone=z1: start %v, want [%s]", d.Start, other)
	}
	ns.Spec.Rollout.PromoteTo = "all"
	ns.Spec.Rollout.MaxConcurrency = ptr.To(intstr.FromInt32(5))
	if d := decide(t, ns, c, t0); len(d.Start) != 2 {
		t.Errorf("promoted all: start %v, want the 2 non-canaries", d.Start)
	}
}

func TestBatchesWaitForTheBatchBefore(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.Rollout.Batches = []intstr.IntOrString{intstr.FromInt32(1), intstr.FromInt32(2)}
		s.Rollout.MaxConcurrency = ptr.To(intstr.FromInt32(10))
	})
	c := newCluster("a", "b", "c", "d", "e", "f")
	canary := decide(t, ns, c, t0).Start[0]
	c.set(ns, v1alpha1.PhaseSucceeded, canary)
	first := decide(t, ns, c, t0).Start
	if len(first) != 1 {
		t.Fatalf("first batch %v, want 1 node", first)
	}
	c.set(ns, v1alpha1.PhaseRunning, first...)
	if d := decide(t, ns, c, t0); len(d.Start) != 0 {
		t.Errorf("second batch started %v before the first finished", d.Start)
	}
	c.set(ns, v1alpha1.PhaseSucceeded, first...)
	if d := decide(t, ns, c, t0); len(d.Start) != 2 {
		t.Errorf("second batch %v, want 2 nodes", d.Start)
	}
}

func TestChangedSpecRunsAgain(t *testing.T) {
	ns := script(nil)
	c := newCluster("a", "b")
	c.set(ns, v1alpha1.PhaseSucceeded, "a", "b")
	if d := decide(t, ns, c, t0); d.Stage != v1alpha1.StageComplete || len(d.Start) != 0 {
		t.Fatalf("%+v, want Complete", d)
	}
	ns.Spec.Rollout.Canary = ptr.To[int32](0) // the pace: same hash, nothing runs
	if d := decide(t, ns, c, t0); d.Stage != v1alpha1.StageComplete {
		t.Errorf("changing the pace reran: %+v", d)
	}
	ns.Spec.Script = "echo v2"
	if d := decide(t, ns, c, t0); d.Stage == v1alpha1.StageComplete || d.Counts.Pending != 2 || len(d.Start) != 1 {
		t.Errorf("a new script: %+v, want both nodes pending again, one started", d)
	}
}

func TestInfrastructureRetries(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) { s.Retry.Limit = ptr.To[int32](2) })
	c := newCluster("a")
	hash := v1alpha1.SpecHash(&ns.Spec)
	later := t0.Add(time.Minute)
	c["a"].State = nodeState{Hash: hash, Phase: v1alpha1.PhaseFailed, Infrastructure: true, Attempts: 1, NextRetry: &later}
	if d := decide(t, ns, c, t0); len(d.Start) != 0 || d.Stage == v1alpha1.StageHalted {
		t.Errorf("before the backoff: %+v, want a wait, not a halt", d)
	}
	if d := decide(t, ns, c, later); !cmp.Equal(d.Start, []string{"a"}) {
		t.Errorf("after the backoff: start %v, want [a]", d.Start)
	}
	c["a"].State.Attempts = 3 // retries used up: a failure for good
	if d := decide(t, ns, c, later); d.Stage != v1alpha1.StageHalted {
		t.Errorf("retries used up: %+v, want Halted", d)
	}
}

func TestSelectionReadinessAndJoiningNodes(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.ExcludeNodes = []string{"x"}
		s.Rollout.Canary = ptr.To[int32](0)
		s.Rollout.MaxConcurrency = ptr.To(intstr.FromInt32(10))
	})
	c := newCluster("a", "x", "nr")
	c["other"] = &rolloutNode{Name: "other", UID: "uid-other", Labels: map[string]string{"pool": "b"}, Ready: true}
	c["nr"].Ready = false
	d := decide(t, ns, c, t0)
	if d.Counts.Nodes != 2 || !cmp.Equal(d.Start, []string{"a"}) {
		t.Errorf("%+v: want 2 selected (a, nr), only the Ready one started", d)
	}
	c.set(ns, v1alpha1.PhaseSucceeded, "a")
	delete(c, "nr")
	if d := decide(t, ns, c, t0); d.Stage != v1alpha1.StageComplete {
		t.Errorf("%+v, want Complete", d)
	}
	c["new"] = &rolloutNode{Name: "new", UID: "uid-new", Labels: map[string]string{"pool": "a"}, Ready: true, State: nodeState{Phase: v1alpha1.PhasePending}}
	if d := decide(t, ns, c, t0); d.Stage != v1alpha1.StageRolling || !cmp.Equal(d.Start, []string{"new"}) {
		t.Errorf("a node that joins: %+v, want it started", d)
	}
}

func TestSoakAndVerify(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.Rollout.SoakTime = &metav1.Duration{Duration: time.Minute}
		s.VerifyScript = "test -f /etc/fixed"
	})
	c := newCluster("a", "b")
	canary := decide(t, ns, c, t0).Start[0]
	c.set(ns, v1alpha1.PhaseSucceeded, canary)
	if d := decide(t, ns, c, t0.Add(30*time.Second)); d.Stage != v1alpha1.StageSoaking || len(d.Verify) != 0 {
		t.Errorf("during the soak: %+v", d)
	}
	if d := decide(t, ns, c, t0.Add(2*time.Minute)); d.Stage != v1alpha1.StageSoaking || !cmp.Equal(d.Verify, []string{canary}) {
		t.Errorf("soaked, not verified: %+v, want Verify [%s]", d, canary)
	}
	c[canary].State.Verified = true
	if d := decide(t, ns, c, t0.Add(2*time.Minute)); d.Stage != v1alpha1.StageRolling || len(d.Start) != 1 {
		t.Errorf("verified: %+v, want Rolling", d)
	}
}

func TestDeterministic(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) { s.Rollout.Canary = ptr.To[int32](3) })
	c := newCluster("a", "b", "c", "d", "e", "f", "g")
	want := decide(t, ns, c, t0)
	nodes := c.nodes()
	for range 20 {
		rand.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
		got, err := computeDecision(ns, nodes, t0)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("order of the input changed the decision (-want +got):\n%s", diff)
		}
	}
}

// TestOrderKey pins the rollout order: ascending hex of
// sha256(nodeUID "/" nodeScriptUID "/" specHash). A watcher upgraded in
// the middle of a rollout must keep the order (and so the canaries and
// batches) the earlier one chose.
func TestOrderKey(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.Rollout.Canary = ptr.To[int32](40)
		s.Rollout.MaxConcurrency = ptr.To(intstr.FromString("100%"))
	})
	var names []string
	for i := range 40 {
		names = append(names, fmt.Sprintf("node-%02d", i))
	}
	c := newCluster(names...)
	hash := v1alpha1.SpecHash(&ns.Spec)
	want := slices.Clone(names)
	key := func(n string) string {
		sum := sha256.Sum256([]byte(c[n].UID + "/" + string(ns.UID) + "/" + hash))
		return hex.EncodeToString(sum[:])
	}
	slices.SortFunc(want, func(a, b string) int { return strings.Compare(key(a), key(b)) })
	if d := decide(t, ns, c, t0); !cmp.Equal(d.Start, want) {
		t.Errorf("Start = %v, want the order of the keys %v", d.Start, want)
	}
}

func TestInvalidSpec(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) { s.Rollout.MaxConcurrency = ptr.To(intstr.FromString("150%")) })
	if _, err := computeDecision(ns, nil, t0); err == nil || !strings.Contains(err.Error(), "spec.rollout.maxConcurrency") {
		t.Errorf("err = %v, want the field named", err)
	}
}

func TestStateCodec(t *testing.T) {
	code := 3
	s := nodeState{Hash: "abc", Phase: v1alpha1.PhaseFailed, ExitCode: &code, Attempts: 2, Since: t0, CordonedByUs: true}
	got, err := decodeState(map[string]string{stateAnnotation("fix"): s.Encode()}, "fix")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if got, _ := decodeState(nil, "fix"); got.Phase != v1alpha1.PhasePending {
		t.Errorf("no annotation: %+v, want Pending", got)
	}
	if _, err := decodeState(map[string]string{stateAnnotation("fix"): `{"phase":"Weird"}`}, "fix"); err == nil {
		t.Error("an unknown phase must be an error")
	}
	if stateAnnotation("fix") != "fix.nodescript.nodeexec.io/state" {
		t.Errorf("key %q", stateAnnotation("fix"))
	}
}

// A paused NodeScript, or one outside its maintenance window, starts
// nothing (verify runs included); runs in progress still count; a
// finished rollout is not held.
func TestDecideHolds(t *testing.T) {
	window := &v1alpha1.MaintenanceWindow{Start: "22:00", End: "04:00"} // UTC; t0 is 12:00
	for _, c := range []struct {
		name      string
		mutate    func(*v1alpha1.NodeScriptSpec)
		running   []string
		succeeded []string
		wantHold  string
		wantStart int
		wantNext  time.Time
	}{
		{"not held", nil, nil, nil, "", 1, time.Time{}},
		{"paused", func(s *v1alpha1.NodeScriptSpec) { s.Paused = true }, []string{"a"}, nil, v1alpha1.HoldPaused, 0, time.Time{}},
		{"outside the window", func(s *v1alpha1.NodeScriptSpec) { s.Window = window }, nil, nil, v1alpha1.HoldOutsideWindow, 0, time.Date(2026, 11, 21, 22, 0, 0, 0, time.UTC)},
		{"inside the window", func(s *v1alpha1.NodeScriptSpec) { s.Window = &v1alpha1.MaintenanceWindow{Start: "11:00", End: "13:00"} }, nil, nil, "", 1, time.Time{}},
		{"complete, paused", func(s *v1alpha1.NodeScriptSpec) { s.Paused = true }, nil, []string{"a", "b", "c"}, "", 0, time.Time{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := script(c.mutate)
			cl := newCluster("a", "b", "c")
			cl.set(ns, v1alpha1.PhaseRunning, c.running...)
			cl.set(ns, v1alpha1.PhaseSucceeded, c.succeeded...)
			d := decide(t, ns, cl, t0)
			if d.Hold != c.wantHold || len(d.Start) != c.wantStart || len(d.Verify) != 0 || !d.NextWindow.Equal(c.wantNext) {
				t.Errorf("decision %+v; want hold %q, %d started, next window %s", d, c.wantHold, c.wantStart, c.wantNext)
			}
			if d.Counts.Running != len(c.running) {
				t.Errorf("running %d, want %d", d.Counts.Running, len(c.running))
			}
		})
	}
	// Changing the pause or the window is not a new spec: nothing reruns.
	if v1alpha1.SpecHash(&script(func(s *v1alpha1.NodeScriptSpec) { s.Paused, s.Window = true, window }).Spec) != v1alpha1.SpecHash(&script(nil).Spec) {
		t.Error("paused or window changes the spec hash")
	}
}

// BenchmarkDecide is one decision on 5,000 selected nodes in a rollout
// (half succeeded, 100 running, the rest pending), which a reconcile takes
// on every pass: go test -run '^$' -bench Decide ./nodeexec/watcher/
func BenchmarkDecide(b *testing.B) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.Rollout.Canary = ptr.To[int32](0)
		s.Rollout.MaxConcurrency = ptr.To(intstr.FromString("2%"))
	})
	hash := v1alpha1.SpecHash(&ns.Spec)
	nodes := make([]rolloutNode, 5000)
	for i := range nodes {
		name := fmt.Sprintf("node-%04d", i)
		nodes[i] = rolloutNode{Name: name, UID: "uid-" + name, Labels: map[string]string{"pool": "a"}, Ready: true, State: nodeState{Phase: v1alpha1.PhasePending}}
		switch {
		case i%2 == 0:
			nodes[i].State = nodeState{Hash: hash, Phase: v1alpha1.PhaseSucceeded, Since: t0, Attempts: 1}
		case i%25 == 1:
			nodes[i].State = nodeState{Hash: hash, Phase: v1alpha1.PhaseRunning, Since: t0, Attempts: 1}
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := computeDecision(ns, nodes, t0); err != nil {
			b.Fatal(err)
		}
	}
}
