package podexec_test

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	// The Tracker builds its informers from a bare cache.ListWatch, so the
	// reflector cannot learn that the fake clientset does not support
	// WatchList (client-go's generated informers wrap theirs with
	// cache.ToListWatcherWithWatchListSemantics). With the WatchListClient
	// feature on (the default since client-go 1.35) the fake never sends the
	// initial-events bookmark and the Tracker never sees a pod. Read once, on
	// first use, so it must be set before any test runs.
	if err := os.Setenv("KUBE_FEATURE_WatchListClient", "false"); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}
