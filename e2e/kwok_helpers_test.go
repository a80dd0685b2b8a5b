//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/internal/testcluster"
)

// startKwok starts kwok with o on the test cluster and, when tb ends,
// leaves the cluster as it was: the simulated nodes deleted and kwok
// stopped, within cleanupWithin (0: no bound).
func startKwok(ctx context.Context, tb testing.TB, o testcluster.KwokOptions, cleanupWithin time.Duration) *testcluster.Kwok {
	tb.Helper()
	k, err := env.cluster.StartKwok(ctx, o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		cctx := context.WithoutCancel(ctx)
		if cleanupWithin > 0 {
			var cancel context.CancelFunc
			cctx, cancel = context.WithTimeout(cctx, cleanupWithin)
			defer cancel()
		}
		if err := k.DeleteNodes(cctx); err != nil {
			tb.Errorf("deleting the simulated nodes: %v", err)
		}
		if err := k.Stop(cctx); err != nil {
			tb.Errorf("stopping kwok: %v", err)
		}
	})
	return k
}
