//go:build e2e

package testcluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBuildContainerd2 builds containerd Containerd2Version and its runc into
// the cache (<cache>/containerd/v<version>/bin) as `testcluster up
// --containerd-version` does, or finds them cached, and runs each binary's
// version command. It starts nothing: run it before bringing a cluster up on
// containerd 2 to take the cold build (minutes) out of the bring-up. Not in
// `make test` (a cold build takes 5 minutes or more): it runs only with
// NODEEXEC_TC_CONTAINERD2_BUILD=1.
func TestBuildContainerd2(t *testing.T) {
	if os.Getenv("NODEEXEC_TC_CONTAINERD2_BUILD") != "1" {
		t.Skip("set NODEEXEC_TC_CONTAINERD2_BUILD=1 to build containerd 2 and runc into the cache")
	}
	o, err := Options{Log: testWriter{t}, ContainerdVersion: Containerd2Version}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	r := newRunner(o)
	if err := checkContainerdServed(t.Context(), r.l, o.ContainerdVersion); err != nil {
		t.Fatal(err)
	}
	if err := r.ensurePackages(t.Context()); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := r.buildContainerd2(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING containerd v%s and runc in %s: %s", o.ContainerdVersion, r.l.containerdBinDir(), time.Since(t0).Round(100*time.Millisecond))
	for _, c := range [][]string{{"containerd", "--version"}, {"ctr", "--version"}, {"containerd-shim-runc-v2", "-v"}, {"runc", "--version"}} {
		out, err := exec.Command(filepath.Join(r.l.containerdBinDir(), c[0]), c[1:]...).CombinedOutput()
		t.Logf("%s: %s", c[0], strings.TrimSpace(string(out)))
		if err != nil {
			t.Errorf("%s: %v", c[0], err)
		}
	}
	if out, _ := exec.Command(filepath.Join(r.l.containerdBinDir(), "containerd"), "--version").Output(); !strings.Contains(string(out), "v"+o.ContainerdVersion) {
		t.Errorf("containerd --version = %q, want v%s", out, o.ContainerdVersion)
	}
}

// TestContainerdVersionNotServed: Start with a 2.x.y the module proxy does
// not serve is refused naming the flag and the served 2.x releases, before
// the cache lock is taken or anything is built or started (a running
// cluster is left alone).
func TestContainerdVersionNotServed(t *testing.T) {
	dir := t.TempDir()
	_, err := Start(t.Context(), Options{ContainerdVersion: "2.99.0", CacheDir: dir + "/c", StateDir: dir + "/s", RunDir: dir + "/r", Log: testWriter{t}})
	if err == nil {
		t.Fatal("containerd 2.99.0 accepted")
	}
	for _, want := range []string{"--containerd-version", "2.99.0", Containerd2Version, "not served"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) > 0 {
		t.Errorf("refused Start created %v", ents)
	}
}
