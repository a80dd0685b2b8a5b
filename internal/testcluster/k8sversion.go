package testcluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"
)

// Kubernetes minors the test cluster supports: MinKubernetesMinor and
// MaxKubernetesMinor inclusive (1.34 is proven by the e2e suite, see
// docs/testcluster-kubernetes-versions.md; 1.37 is the default).
const (
	MinKubernetesMinor = 34
	MaxKubernetesMinor = 37
)

// supportedKubernetesRange is "1.34 to 1.37", for error messages.
func supportedKubernetesRange() string {
	return fmt.Sprintf("1.%d to 1.%d", MinKubernetesMinor, MaxKubernetesMinor)
}

// checkKubernetesVersion refuses a version that is not MAJOR.MINOR.PATCH ("v"
// optional) or whose minor is outside the supported range. The error names the
// option (flag is how the caller spells it: "--kubernetes-version" or
// "KubernetesVersion") and the range.
func checkKubernetesVersion(flag, v string) error {
	m := versionRE.FindStringSubmatch(v)
	if m == nil {
		return fmt.Errorf("testcluster: %s must look like 1.37.1 (MAJOR.MINOR.PATCH, supported %s), got %q", flag, supportedKubernetesRange(), v)
	}
	minor, _ := strconv.Atoi(m[2])
	if m[1] != "1" || minor < MinKubernetesMinor || minor > MaxKubernetesMinor {
		return fmt.Errorf("testcluster: %s %s is not supported: the test cluster runs Kubernetes %s (default %s)", flag, v, supportedKubernetesRange(), DefaultKubernetesVersion)
	}
	return nil
}

// k8sMinor is the minor of a checked version ("1.34.4" → 34).
func k8sMinor(version string) int {
	m, _ := k8sMinorPatch(version)
	n, _ := strconv.Atoi(m)
	return n
}

// Build builds (or finds cached) the Kubernetes binaries of o.KubernetesVersion
// into <CacheDir>/k8s/v<version>/bin, without starting anything and without
// taking the cluster's lock (the output directory is per version and every
// binary is renamed into place whole), so a later Start of that version finds
// them warm. A cold build takes about 10 minutes on 2 cores. Errors: invalid
// options (as Start), no go command, or the go command's own (module download,
// compile), with its output.
func Build(ctx context.Context, o Options) error {
	o, err := o.resolve()
	if err != nil {
		return err
	}
	r := newRunner(o)
	t := time.Now()
	kb := k8sBuild{Version: o.KubernetesVersion, SrcDir: filepath.Join(r.l.k8sDir, "src"), BinDir: r.l.k8sBin, GoCache: r.l.gocache}
	if err := kb.run(ctx, r); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	r.timing("build-k8s", t)
	return nil
}

// adoptKubernetesVersion makes r run the Kubernetes version of the running
// cluster st: with explicit false (the caller left KubernetesVersion empty)
// whatever st records, so that a cluster brought up with another version (by
// a test matrix) is reused as it is; with explicit true only the version
// asked, or an error naming the option and the way out (Stop first).
func (r *runner) adoptKubernetesVersion(st *clusterState, explicit bool) error {
	running := st.KubernetesVersion
	if running == "" { // a state written before the version was recorded
		running = DefaultKubernetesVersion
	}
	if explicit && running != r.o.KubernetesVersion {
		return fmt.Errorf("testcluster: KubernetesVersion (--kubernetes-version) %s asked, but the running cluster runs Kubernetes %s: stop it first (testcluster down), or leave the version out to reuse it",
			r.o.KubernetesVersion, running)
	}
	if running != r.o.KubernetesVersion {
		r.o.KubernetesVersion = running
		r.l = newLayout(r.o)
	}
	return nil
}

// KubernetesVersion is the version the cluster's control plane and kubelets
// run ("1.34.4"), as recorded when it was brought up.
func (c *Cluster) KubernetesVersion() string { return c.r.o.KubernetesVersion }
