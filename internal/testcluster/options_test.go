package testcluster

import (
	"io"
	"strings"
	"testing"
)

func TestOptionsDefaults(t *testing.T) {
	t.Setenv(CacheDirEnv, "")
	o, err := Options{}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if o.Nodes != 2 || o.CacheDir != "/var/cache/nodeexec-testcluster" || o.StateDir != "/var/lib/nodeexec-testcluster" ||
		o.RunDir != "/run/nodeexec-testcluster" || o.KubernetesVersion != "1.37.1" || o.APIPort != 16443 || o.Log != io.Discard {
		t.Errorf("defaults: %+v", o)
	}
}

func TestOptionsCacheEnv(t *testing.T) {
	t.Setenv(CacheDirEnv, "/tmp/tc-cache")
	o, err := Options{}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if o.CacheDir != "/tmp/tc-cache" {
		t.Errorf("CacheDir = %q, want the env value", o.CacheDir)
	}
	o, err = Options{CacheDir: "/explicit/"}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if o.CacheDir != "/explicit" {
		t.Errorf("CacheDir = %q, an explicit value wins (cleaned)", o.CacheDir)
	}
}

func TestOptionsVersionPrefix(t *testing.T) {
	o, err := Options{KubernetesVersion: "v1.36.3"}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if o.KubernetesVersion != "1.36.3" {
		t.Errorf("version %q", o.KubernetesVersion)
	}
	if minor, patch := k8sMinorPatch(o.KubernetesVersion); minor != "36" || patch != "3" {
		t.Errorf("minor/patch %s %s", minor, patch)
	}
}

func TestOptionsInvalid(t *testing.T) {
	for name, o := range map[string]Options{
		"negative nodes":  {Nodes: -1},
		"too many nodes":  {Nodes: MaxNodes + 1},
		"relative cache":  {CacheDir: "cache"},
		"root state":      {StateDir: "/"},
		"same dirs":       {StateDir: "/x", RunDir: "/x"},
		"bad version":     {KubernetesVersion: "1.37"},
		"bad version 2":   {KubernetesVersion: "latest"},
		"port range":      {APIPort: 70000},
		"negative port":   {APIPort: -1},
		"long socket dir": {RunDir: "/" + strings.Repeat("r", 90)},
	} {
		if _, err := o.resolve(); err == nil {
			t.Errorf("%s: no error for %+v", name, o)
		}
	}
}

func TestNodeSpec(t *testing.T) {
	o, err := Options{}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	l := newLayout(o)
	n1, n2 := l.node(1), l.node(2)
	want1 := nodeSpec{Index: 1, Name: "nodeexec-tc-1", Netns: "nodeexec-tc", IP: "10.251.0.11", PodCIDR: "10.245.1.0/24",
		ContainerdSocket: "/run/nodeexec-testcluster/containerd-nodeexec-tc-1.sock", CgroupRoot: "/nodeexec-tc-1",
		ContainerdDir:   "/var/lib/nodeexec-testcluster/containerd-nodeexec-tc-1",
		ContainerdState: "/run/nodeexec-testcluster/containerd-nodeexec-tc-1",
		KubeletDir:      "/var/lib/nodeexec-testcluster/kubelet-nodeexec-tc-1",
		CNIDir:          "/var/lib/nodeexec-testcluster/cni-nodeexec-tc-1"}
	if n1 != want1 {
		t.Errorf("node 1:\n got %+v\nwant %+v", n1, want1)
	}
	if n2.Netns != "nodeexec-tc-n2" || n2.IP != "10.251.0.12" || n2.PodCIDR != "10.245.2.0/24" || n2.HubVeth != "nx2h" || n2.NodeVeth != "nx2n" {
		t.Errorf("node 2: %+v", n2)
	}
	if n := l.node(MaxNodes); len(n.HubVeth) > 15 || len(n.NodeVeth) > 15 {
		t.Errorf("interface names too long: %+v", n)
	}
	if l.kubeconfig != "/var/lib/nodeexec-testcluster/admin.kubeconfig" || l.k8sBin != "/var/cache/nodeexec-testcluster/k8s/v1.37.1/bin" {
		t.Errorf("layout %+v", l)
	}
}

func TestNames(t *testing.T) {
	for name, want := range map[string]int{"nodeexec-tc-1": 1, "nodeexec-tc-42": 42} {
		if i, ok := nodeIndex(name); !ok || i != want {
			t.Errorf("nodeIndex(%q) = %d %v", name, i, ok)
		}
	}
	for _, name := range []string{"nodeexec-tc-0", "nodeexec-tc-01", "nodeexec-tc-x", "tc-node-1", "nodeexec-tc-100", "nodeexec-tc-"} {
		if _, ok := nodeIndex(name); ok {
			t.Errorf("nodeIndex(%q) accepted", name)
		}
	}
	for _, ns := range []string{"nodeexec-tc", "nodeexec-tc-n2", "nodeexec-tc-n99"} {
		if !isOurNetns(ns) {
			t.Errorf("isOurNetns(%q) = false", ns)
		}
	}
	for _, ns := range []string{"tc", "tc-n2", "nodeexec-tc-n1", "nodeexec-tc-n02", "nodeexec-tc-2", "cni-1234", "nodeexec-tcx"} {
		if isOurNetns(ns) {
			t.Errorf("isOurNetns(%q) = true", ns)
		}
	}
}

func TestStateFreeIndex(t *testing.T) {
	st := &clusterState{Nodes: []int{1, 3}}
	if i, err := st.freeIndex(); err != nil || i != 2 {
		t.Errorf("freeIndex = %d, %v", i, err)
	}
	st.Nodes = []int{2}
	if i, _ := st.freeIndex(); i != 1 {
		t.Errorf("freeIndex = %d, want 1", i)
	}
}
