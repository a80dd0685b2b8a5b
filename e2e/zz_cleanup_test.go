//go:build e2e

package e2e

import (
	"testing"
	"time"
)

// TestZZNothingLeftBehind runs last (files and tests run in order): after
// every test above, no pod labelled app.kubernetes.io/managed-by=nodeexec
// remains in any namespace.
func TestZZNothingLeftBehind(t *testing.T) {
	if left := waitNoManagedPods(t.Context(), 30*time.Second); len(left) > 0 {
		t.Errorf("pods left behind: %v", left)
	}
}
