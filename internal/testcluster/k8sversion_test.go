package testcluster

import (
	"strings"
	"testing"
)

func TestKubernetesVersionRange(t *testing.T) {
	for _, v := range []string{"1.34.0", "1.34.4", "v1.34.4", "1.35.4", "1.36.3", "1.37.1", DefaultKubernetesVersion} {
		if err := checkKubernetesVersion("--kubernetes-version", v); err != nil {
			t.Errorf("%s: %v", v, err)
		}
		if _, err := (Options{KubernetesVersion: v}).resolve(); err != nil {
			t.Errorf("resolve %s: %v", v, err)
		}
	}
	for v, want := range map[string]string{
		"1.33.5":  "1.33.5 is not supported",
		"1.30.0":  "is not supported",
		"1.38.0":  "is not supported",
		"2.34.0":  "is not supported",
		"0.34.4":  "is not supported",
		"1.34":    "must look like 1.37.1",
		"latest":  "must look like 1.37.1",
		"1.34.x":  "must look like 1.37.1",
		"1.34.4 ": "must look like 1.37.1",
		"":        "must look like 1.37.1",
	} {
		err := checkKubernetesVersion("--kubernetes-version", v)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--kubernetes-version") ||
			!strings.Contains(err.Error(), "1.34 to 1.37") {
			t.Errorf("%q: %v, want an error naming the flag, the range and %q", v, err, want)
		}
	}
	if _, err := (Options{KubernetesVersion: "1.33.9"}).resolve(); err == nil || !strings.Contains(err.Error(), "KubernetesVersion") {
		t.Errorf("resolve 1.33.9: %v", err)
	}
	if k8sMinor("1.34.4") != 34 || k8sMinor("v1.37.1") != 37 {
		t.Error("k8sMinor")
	}
}

func TestAdoptKubernetesVersion(t *testing.T) {
	newR := func(v string) *runner {
		o, err := Options{KubernetesVersion: v}.resolve()
		if err != nil {
			t.Fatal(err)
		}
		return newRunner(o)
	}
	// no version asked: the running cluster's, with its binaries
	r := newR("")
	if err := r.adoptKubernetesVersion(&clusterState{KubernetesVersion: "1.34.4"}, false); err != nil {
		t.Fatal(err)
	}
	if r.o.KubernetesVersion != "1.34.4" || !strings.HasSuffix(r.l.k8sBin, "/k8s/v1.34.4/bin") || (&Cluster{r: r}).KubernetesVersion() != "1.34.4" {
		t.Errorf("adopted %s, binaries %s", r.o.KubernetesVersion, r.l.k8sBin)
	}
	// the same version asked
	r = newR("v1.34.4")
	if err := r.adoptKubernetesVersion(&clusterState{KubernetesVersion: "1.34.4"}, true); err != nil {
		t.Error(err)
	}
	// another version asked: refused, naming the flag and what to do
	r = newR("1.37.1")
	err := r.adoptKubernetesVersion(&clusterState{KubernetesVersion: "1.34.4"}, true)
	if err == nil || !strings.Contains(err.Error(), "--kubernetes-version") || !strings.Contains(err.Error(), "testcluster down") {
		t.Errorf("mismatch: %v", err)
	}
	// a state without a version is the default's
	r = newR("")
	if err := r.adoptKubernetesVersion(&clusterState{}, false); err != nil || r.o.KubernetesVersion != DefaultKubernetesVersion {
		t.Errorf("old state: %s %v", r.o.KubernetesVersion, err)
	}
}
