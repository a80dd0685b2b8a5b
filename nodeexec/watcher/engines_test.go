package watcher

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/internal/rollout"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// The watcher's rollout engine next to the Runner's (nodeexec.RunnerOptions;
// the Runner's side is pinned in nodeexec's TestRunnerEngineDifferences).
// Each case states a difference the package doc and rollout.go document;
// the shared arithmetic (internal/rollout) is checked last.
func TestWatcherEngineDifferences(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	fresh := func() cluster { return newCluster(names...) }

	t.Run("canary: the watcher defaults to 1, the Runner to 0", func(t *testing.T) {
		var o nodeexec.RunnerOptions
		d := decide(t, script(nil), fresh(), t0)
		if len(d.Canaries) != defaultCanary || defaultCanary != 1 || o.Canary != 0 {
			t.Errorf("canaries %v (DefaultCanary %d), Runner's zero Canary %d: want 1 and 0", d.Canaries, defaultCanary, o.Canary)
		}
	})
	t.Run("error budget: the watcher's unset is 0 (the first failure halts), the Runner's unset is no limit", func(t *testing.T) {
		ns := script(func(s *v1alpha1.NodeScriptSpec) { s.Rollout.Canary = ptr.To(int32(0)) })
		c := fresh()
		c.set(ns, v1alpha1.PhaseFailed, "a")
		if d := decide(t, ns, c, t0); d.Stage != v1alpha1.StageHalted {
			t.Errorf("one failure, maxFailures unset: stage %s, want %s", d.Stage, v1alpha1.StageHalted)
		}
		if (nodeexec.RunnerOptions{}).MaxErrors != nil {
			t.Error("the Runner's MaxErrors defaults to nil, no limit")
		}
	})
	t.Run("concurrency: the watcher starts 1 node at a time by default, the Runner DefaultMaxConcurrency", func(t *testing.T) {
		ns := script(func(s *v1alpha1.NodeScriptSpec) { s.Rollout.Canary = ptr.To(int32(0)) })
		if d := decide(t, ns, fresh(), t0); len(d.Start) != 1 || nodeexec.DefaultMaxConcurrency != 20 {
			t.Errorf("starts %v, want 1; the Runner's default %d, want 20", d.Start, nodeexec.DefaultMaxConcurrency)
		}
	})
	t.Run("order: the watcher's is a hash of node, NodeScript and spec, the Runner's the targets' own", func(t *testing.T) {
		d := decide(t, script(nil), fresh(), t0)
		if slices.Equal(d.Order, names) {
			t.Errorf("order %v is the nodes' own: want the hashed order", d.Order)
		}
		ns2 := script(func(s *v1alpha1.NodeScriptSpec) { s.Script = "echo other" })
		if d2 := decide(t, ns2, fresh(), t0); slices.Equal(d.Order, d2.Order) {
			t.Errorf("another spec, the same order %v: want another", d.Order)
		}
	})
	t.Run("retries: the watcher retries 3 times from 10s, the Runner 0 times from 1s", func(t *testing.T) {
		if defaultRetryLimit != 3 || v1alpha1.DefaultInitialBackoff != 10*time.Second || (nodeexec.RunnerOptions{}).Retries != 0 || nodeexec.DefaultRetryBackoff != time.Second {
			t.Errorf("watcher %d from %s, Runner %d from %s", defaultRetryLimit, v1alpha1.DefaultInitialBackoff, (nodeexec.RunnerOptions{}).Retries, nodeexec.DefaultRetryBackoff)
		}
		if v1alpha1.DefaultMaxBackoff != nodeexec.MaxRetryBackoff {
			t.Errorf("the longest pause: watcher %s, Runner %s; both 5m", v1alpha1.DefaultMaxBackoff, nodeexec.MaxRetryBackoff)
		}
	})
	t.Run("canaries: the watcher's skip nodes that need nothing (NotNeeded), the Runner's are the first targets", func(t *testing.T) {
		ns := script(nil)
		c := fresh()
		first := decide(t, ns, c, t0).Order[0]
		c.set(ns, v1alpha1.PhaseNotNeeded, first)
		if d := decide(t, ns, c, t0); slices.Contains(d.Canaries, first) {
			t.Errorf("canaries %v include %s, which needs nothing", d.Canaries, first)
		}
	})
	t.Run("shared: batch sizes are rollout.BatchSize of all selected nodes, as the Runner's of its targets", func(t *testing.T) {
		ns := script(func(s *v1alpha1.NodeScriptSpec) {
			s.Rollout.Canary = ptr.To(int32(0))
			s.Rollout.Batches = []intstr.IntOrString{intstr.FromString("25%")}
			s.Rollout.MaxConcurrency = ptr.To(intstr.FromString("100%"))
		})
		want := rollout.BatchSize(intstr.FromString("25%"), len(names))
		if d := decide(t, ns, fresh(), t0); len(d.Start) != want || want != 2 {
			t.Errorf("first batch %v, want %d nodes (25%% of %d, rounded up)", d.Start, want, len(names))
		}
	})
}
