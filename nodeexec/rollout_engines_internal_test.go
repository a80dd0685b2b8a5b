package nodeexec

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeexec/nodeexec/internal/rollout"
)

// The Runner's rollout engine next to the watcher's (a NodeScript's
// spec.rollout; the watcher's side is pinned in its
// TestWatcherEngineDifferences). Each case states a difference rollout.go
// documents; the shared arithmetic (internal/rollout) is checked last.
func TestRunnerEngineDifferences(t *testing.T) {
	var o RunnerOptions
	t.Run("canary: the Runner defaults to 0 (no canary stage), the watcher to 1", func(t *testing.T) {
		if got := plan(5, o.Canary, o.Batches); len(got) != 1 || len(got[0]) != 5 {
			t.Errorf("plan of 5 nodes, zero options: %v, want one stage of all", got)
		}
	})
	t.Run("error budget: the Runner's unset is no limit, the watcher's 0", func(t *testing.T) {
		if got := errorBudget(o.MaxErrors, 5); got != -1 {
			t.Errorf("errorBudget(nil) = %d, want -1 (no limit)", got)
		}
	})
	t.Run("retries: the Runner retries 0 times from 1s with up to 50% jitter, the watcher 3 times from 10s with 10%", func(t *testing.T) {
		if o.Retries != 0 || DefaultRetryBackoff != time.Second {
			t.Errorf("Retries %d, DefaultRetryBackoff %s", o.Retries, DefaultRetryBackoff)
		}
		for range 20 {
			if d := backoff(time.Second, 1); d < time.Second || d > 1500*time.Millisecond {
				t.Fatalf("first pause %s, want 1s to 1.5s", d)
			}
		}
	})
	t.Run("order: the Runner runs the targets in their own order, canaries first", func(t *testing.T) {
		got := plan(4, 1, nil)
		if len(got) != 2 || got[0][0] != 0 || got[1][0] != 1 {
			t.Errorf("plan(4, canary 1) = %v, want [[0] [1 2 3]]", got)
		}
	})
	t.Run("shared: batch sizes are rollout.BatchSize of the targets, the error budget rollout.Tolerated", func(t *testing.T) {
		b := []intstr.IntOrString{intstr.FromInt32(1), intstr.FromString("25%")}
		got := plan(10, 1, b)
		want := []int{1, 1, rollout.BatchSize(b[1], 10), rollout.BatchSize(b[1], 10), 10 - 2 - 2*3}
		if len(got) != len(want) {
			t.Fatalf("plan(10, 1, [1 25%%]) = %v, want stage sizes %v", got, want)
		}
		for i := range want {
			if len(got[i]) != want[i] {
				t.Errorf("stage %d: %d nodes, want %d", i, len(got[i]), want[i])
			}
		}
		m := intstr.FromString("25%")
		if errorBudget(&m, 10) != rollout.Tolerated(m, 10) || rollout.Tolerated(m, 10) != 2 {
			t.Errorf("errorBudget(25%% of 10) = %d, want 2", errorBudget(&m, 10))
		}
	})
}
