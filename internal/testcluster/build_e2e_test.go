//go:build e2e

package testcluster

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBuildKubernetesFresh runs the Kubernetes build path from an empty scratch
// module into an empty output directory (sharing the cache's GOCACHE, so with a warm
// cache only module resolution and linking remain: about a minute on 2 cores).
// It proves the path a new machine takes, which the cached binaries otherwise hide.
// It touches no cluster, so it runs in parallel (after the sequential tests,
// next to TestE2E: Go runs a package's parallel tests side by side once the
// sequential ones are done): its CPU time overlaps TestE2E's waiting for pods.
func TestBuildKubernetesFresh(t *testing.T) {
	t.Parallel()
	o, err := Options{Log: testWriter{t}}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	r := newRunner(o)
	dir := t.TempDir()
	b := k8sBuild{Version: o.KubernetesVersion, SrcDir: filepath.Join(dir, "src"), BinDir: filepath.Join(dir, "bin"), GoCache: r.l.gocache}
	t0 := time.Now()
	if err := b.run(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING fresh build into %s: %s", b.BinDir, time.Since(t0).Round(100*time.Millisecond))
	for _, c := range kubeBinaries() {
		out, err := exec.Command(filepath.Join(b.BinDir, c), "--version").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "v"+o.KubernetesVersion) {
			t.Errorf("%s --version: %s %v", c, out, err)
		}
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
