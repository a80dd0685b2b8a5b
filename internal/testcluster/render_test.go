package testcluster

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

func testLayout(t *testing.T) layout {
	t.Helper()
	o, err := Options{CacheDir: "/c", StateDir: "/s", RunDir: "/r"}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	return newLayout(o)
}

func TestContainerdConfig(t *testing.T) {
	n := testLayout(t).node(2)
	c := containerdConfig(n)
	for _, want := range []string{
		`root = "/s/containerd-nodeexec-tc-2/root"`,
		`state = "/r/containerd-nodeexec-tc-2/state"`,
		`address = "/r/containerd-nodeexec-tc-2.sock"`,
		`address = "/r/containerd-nodeexec-tc-2.sock.ttrpc"`,
		`path = "/s/containerd-nodeexec-tc-2/opt"`,
		`sandbox_image = "nodeexec.local/pause:3.10"`,
		"restrict_oom_score_adj = true", // gotcha 1
		"netns_mounts_under_state_dir = true",
		"SystemdCgroup = false",
		`Root = "/r/containerd-nodeexec-tc-2/runc"`,
		`conf_dir = "/s/cni-nodeexec-tc-2/net.d"`,
		`bin_dir = "/usr/lib/cni"`,
	} {
		if !strings.Contains(c, want) {
			t.Errorf("containerd config lacks %q:\n%s", want, c)
		}
	}
	if strings.Contains(c, "/run/containerd") || strings.Contains(c, "/var/lib/containerd") {
		t.Errorf("containerd config uses a default (shared) path:\n%s", c)
	}
}

func TestCNIConfig(t *testing.T) {
	n := testLayout(t).node(3)
	var conf struct {
		CNIVersion string `json:"cniVersion"`
		Name       string
		Plugins    []struct {
			Type, Bridge string
			IPAM         struct {
				Type    string
				DataDir string `json:"dataDir"`
				Ranges  [][]struct{ Subnet string }
			}
		}
	}
	if err := json.Unmarshal([]byte(cniConfig(n)), &conf); err != nil {
		t.Fatal(err)
	}
	if conf.Name != "nodeexec-tc-3" || len(conf.Plugins) != 2 || conf.Plugins[0].Type != "bridge" ||
		conf.Plugins[0].IPAM.Ranges[0][0].Subnet != "10.245.3.0/24" || conf.Plugins[0].IPAM.DataDir != "/s/cni-nodeexec-tc-3/networks" {
		t.Errorf("CNI config: %+v", conf)
	}
}

func TestKubeletConfig(t *testing.T) {
	l := testLayout(t)
	n := l.node(1)
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(kubeletConfig(l, n)), &cfg); err != nil {
		t.Fatalf("kubelet config is not YAML: %v", err)
	}
	for key, want := range map[string]any{
		"kind":                        "KubeletConfiguration",
		"failCgroupV1":                false, // cgroup v1 host
		"cgroupDriver":                "cgroupfs",
		"cgroupRoot":                  "/nodeexec-tc-1", // every node, not only node 2+
		"oomScoreAdj":                 float64(0),       // gotcha 1
		"containerRuntimeEndpoint":    "unix:///r/containerd-nodeexec-tc-1.sock",
		"address":                     "10.251.0.11",
		"readOnlyPort":                float64(0),
		"resolvConf":                  "",
		"failSwapOn":                  false,
		"podCIDR":                     "10.245.1.0/24",
		"tlsCertFile":                 "/s/pki/kubelet-nodeexec-tc-1-serving.crt",
		"podLogsDir":                  "/s/kubelet-nodeexec-tc-1/pod-logs",
		"volumePluginDir":             "/s/kubelet-nodeexec-tc-1/volume-plugins",
		"imageGCHighThresholdPercent": float64(100),
	} {
		if got := cfg[key]; got != want {
			t.Errorf("kubelet %s = %#v, want %#v", key, got, want)
		}
	}
	if auth := cfg["authentication"].(map[string]any); auth["anonymous"].(map[string]any)["enabled"] != false {
		t.Errorf("anonymous auth enabled: %v", auth)
	}
	args := kubeletArgs(l, n)
	for _, want := range []string{"--hostname-override=nodeexec-tc-1", "--node-ip=10.251.0.11",
		"--root-dir=/s/kubelet-nodeexec-tc-1/root", "--config=/s/kubelet-nodeexec-tc-1/config.yaml"} {
		if !slices.Contains(args, want) {
			t.Errorf("kubelet args lack %q: %v", want, args)
		}
	}
}

func TestControlPlaneArgs(t *testing.T) {
	l := testLayout(t)
	api := apiserverArgs(l)
	for _, want := range []string{
		"--kubelet-preferred-address-types=InternalIP", // gotcha 6
		"--advertise-address=10.251.0.11",
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		"--secure-port=6443",
		"--service-cluster-ip-range=10.97.0.0/24",
		"--client-ca-file=/s/pki/ca.crt",
		"--audit-policy-file=/s/pki/audit-policy.yaml",
		"--audit-log-path=/s/logs/audit.log",
	} {
		if !slices.Contains(api, want) {
			t.Errorf("apiserver args lack %q", want)
		}
	}
	if api[0] != "/c/k8s/v1.37.1/bin/kube-apiserver" {
		t.Errorf("apiserver binary %q", api[0])
	}
	if cm := controllerManagerArgs(l); !slices.Contains(cm, "--use-service-account-credentials=true") ||
		!slices.Contains(cm, "--kubeconfig=/s/pki/controller-manager.kubeconfig") {
		t.Errorf("controller-manager args %v", cm)
	}
	if s := schedulerArgs(l); !slices.Contains(s, "--kubeconfig=/s/pki/scheduler.kubeconfig") {
		t.Errorf("scheduler args %v", s)
	}
	if e := strings.Join(etcdArgs(l), " "); !strings.Contains(e, "--data-dir /s/etcd") || !strings.Contains(e, "http://127.0.0.1:2379") {
		t.Errorf("etcd args %s", e)
	}
	if e := etcdArgs(l)[0]; e != "/c/bin/etcd-v"+DefaultEtcdVersion {
		t.Errorf("etcd binary %s, want the one built into the cache's bin (not a packaged etcd)", e)
	}
	if f := strings.Join(hostForwarderArgs(l), " "); f != "socat TCP-LISTEN:16443,bind=127.0.0.1,fork,reuseaddr,nodelay UNIX-CONNECT:/r/apiserver.sock" {
		t.Errorf("host forwarder %s", f)
	}
	if f := strings.Join(sockForwarderArgs(l), " "); f != "socat UNIX-LISTEN:/r/apiserver.sock,fork,unlink-early,mode=600 TCP:127.0.0.1:6443,nodelay" {
		t.Errorf("netns forwarder %s", f)
	}
	rules := serviceDNATRules(l)
	if len(rules) != 2 || !slices.Contains(rules[0], "10.251.0.11:6443") || !slices.Contains(rules[0], "10.97.0.1/32") {
		t.Errorf("DNAT rules %v", rules)
	}
}

func TestNodeNetnsSteps(t *testing.T) {
	l := testLayout(t)
	steps := nodeNetnsSteps(l.hubIP(), l.node(2))
	var flat []string
	for _, s := range steps {
		flat = append(flat, strings.Join(s, " "))
	}
	for _, want := range []string{
		"netns add nodeexec-tc-n2",
		"-n nodeexec-tc link add nx2h type veth peer name nx2n netns nodeexec-tc-n2",
		"-n nodeexec-tc route add 10.245.2.0/24 via 10.251.0.12 dev nx2h onlink",
		"-n nodeexec-tc-n2 route add 10.245.0.0/16 via 10.251.0.11 dev nx2n onlink",
		"-n nodeexec-tc-n2 route add blackhole default",
	} {
		if !slices.Contains(flat, want) {
			t.Errorf("missing step %q in\n%s", want, strings.Join(flat, "\n"))
		}
	}
	if flat[0] != "netns add nodeexec-tc-n2" {
		t.Errorf("first step %q", flat[0])
	}
}

func TestNsTargetCommand(t *testing.T) {
	argv := []string{"kubelet", "--v=1"}
	if got, forks := (nsTarget{}).command(argv); !slices.Equal(got, argv) || forks {
		t.Errorf("host: %v %v", got, forks)
	}
	got, forks := nsTarget{InitPID: 42, Netns: "/run/netns/nodeexec-tc"}.command(argv)
	want := []string{"nsenter", "-t", "42", "--pid", "--mount", "--net=/run/netns/nodeexec-tc", "--", "kubelet", "--v=1"}
	if !slices.Equal(got, want) || !forks {
		t.Errorf("got %v %v, want %v (forks)", got, forks, want)
	}
	got, forks = nsTarget{Netns: "/run/netns/x"}.command(argv)
	if !slices.Equal(got, []string{"nsenter", "--net=/run/netns/x", "--", "kubelet", "--v=1"}) || forks {
		t.Errorf("netns only: %v %v", got, forks)
	}
}

const kubernetesGoModSample = `// This is a generated file. Do not edit directly.

module k8s.io/kubernetes

go 1.26.0

godebug default=go1.26

require (
	k8s.io/api v0.0.0
	github.com/foo/bar v1.2.3
)

replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/client-go => ./staging/src/k8s.io/client-go
	github.com/other/thing => github.com/fork/thing v1.0.0
)

replace k8s.io/kubelet v0.0.0 => ./staging/src/k8s.io/kubelet
`

func TestScratchGoMod(t *testing.T) {
	staging, goLine, godebug := parseKubernetesGoMod(kubernetesGoModSample)
	if !slices.Equal(staging, []string{"k8s.io/api", "k8s.io/client-go", "k8s.io/kubelet"}) {
		t.Errorf("staging %v", staging)
	}
	if goLine != "go 1.26.0" || !slices.Equal(godebug, []string{"godebug default=go1.26"}) {
		t.Errorf("go %q godebug %v", goLine, godebug)
	}
	got := scratchGoMod("1.37.1", staging, goLine, godebug)
	want := `module nodeexec-testcluster-k8sbuild

go 1.26.0

godebug default=go1.26

require k8s.io/kubernetes v1.37.1

replace k8s.io/api => k8s.io/api v0.37.1
replace k8s.io/client-go => k8s.io/client-go v0.37.1
replace k8s.io/kubelet => k8s.io/kubelet v0.37.1
`
	if got != want {
		t.Errorf("go.mod:\n%s\nwant:\n%s", got, want)
	}
}

func TestK8sLDFlags(t *testing.T) {
	ld := k8sLDFlags("1.37.1", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	for _, want := range []string{
		"-s -w ",
		"-X k8s.io/component-base/version.gitVersion=v1.37.1",
		"-X k8s.io/component-base/version.gitMinor=37",
		"-X k8s.io/client-go/pkg/version.gitVersion=v1.37.1",
		"-X k8s.io/client-go/pkg/version.buildDate=2026-01-02T03:04:05Z",
	} {
		if !strings.Contains(ld, want) {
			t.Errorf("ldflags lack %q: %s", want, ld)
		}
	}
}

func TestParseDpkgStatus(t *testing.T) {
	got := parseDpkgStatus("containerd\tinstalled\nrunc\tconfig-files\nsocat\tinstalled\nlibc6:amd64\tinstalled\n")
	if !got["containerd"] || got["runc"] || !got["socat"] || !got["libc6"] || got["etcd-server"] {
		t.Errorf("installed %v", got)
	}
}

func TestParseStat(t *testing.T) {
	// comm with spaces and parentheses
	line := "1234 (my (odd) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100 18446744073709551615"
	state, ppid, start, err := parseStat(line)
	if err != nil || state != 'S' || ppid != 1 || start != 987654 {
		t.Errorf("parseStat = %c %d %d %v", state, ppid, start, err)
	}
	if _, _, _, err := parseStat("garbage"); err == nil {
		t.Error("no error for garbage")
	}
	rec, err := parsePidFile(procRecord{PID: 7, Start: 99}.String())
	if err != nil || rec != (procRecord{PID: 7, Start: 99}) {
		t.Errorf("pid file round trip: %v %v", rec, err)
	}
	if _, err := parsePidFile("7"); err == nil {
		t.Error("no error for a pid file without start time")
	}
	if (procRecord{}).alive() {
		t.Error("zero record alive")
	}
}

func TestParseMountInfo(t *testing.T) {
	mi := `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
100 22 0:4 net:[4026532300] /run/netns/tc rw shared:5 - nsfs nsfs rw
101 22 0:50 / /var/lib/x/with\040space rw - tmpfs tmpfs rw
102 22 0:51 / /var/lib/nodeexec-testcluster/kubelet-nodeexec-tc-1/root/pods/a/volumes/v rw - tmpfs tmpfs rw
103 22 0:52 / /var/lib/nodeexec-testcluster/kubelet-nodeexec-tc-1/root/pods/a rw - tmpfs tmpfs rw
104 22 0:53 / /var/lib/nodeexec-testcluster-other rw - tmpfs tmpfs rw
`
	m := parseMountInfo(mi)
	if len(m) != 6 || m[1].FSType != "nsfs" || m[1].MountPoint != "/run/netns/tc" || m[2].MountPoint != "/var/lib/x/with space" {
		t.Fatalf("parsed %+v", m)
	}
	under := mountsUnder(m, "/var/lib/nodeexec-testcluster")
	want := []string{"/var/lib/nodeexec-testcluster/kubelet-nodeexec-tc-1/root/pods/a/volumes/v",
		"/var/lib/nodeexec-testcluster/kubelet-nodeexec-tc-1/root/pods/a"}
	if !slices.Equal(under, want) {
		t.Errorf("mountsUnder = %v, want %v (deepest first, no prefix-only matches)", under, want)
	}
}

func TestParseSysctls(t *testing.T) {
	kv, err := parseSysctls("vm.overcommit_memory=0\nkernel.panic=1\n\n")
	if err != nil || kv["vm.overcommit_memory"] != "0" || kv["kernel.panic"] != "1" || len(kv) != 2 {
		t.Errorf("parseSysctls = %v %v", kv, err)
	}
	if _, err := parseSysctls("nonsense\n"); err == nil {
		t.Error("no error for a bad line")
	}
	if sysctlPath("kernel.keys.root_maxkeys") != "/proc/sys/kernel/keys/root_maxkeys" {
		t.Error("sysctlPath")
	}
}

func TestForeignMounts(t *testing.T) {
	m := parseMountInfo(`1 0 8:1 / / rw - overlay overlay rw
2 1 0:4 net:[1] /run/netns/tc rw - nsfs nsfs rw
3 1 0:5 / /opt/tc/state/containerd/root/io.containerd.runtime.v2.task/k8s.io/abc/rootfs rw - overlay overlay rw
4 1 0:6 / /opt/tc/state/kubelet/root/pods/u/volumes/kubernetes.io~projected/kube-api-access-x rw - tmpfs tmpfs rw
5 1 0:7 / /run/containerd/io.containerd.grpc.v1.cri/sandboxes/abc/shm rw - tmpfs shm rw
6 1 0:8 / /dev/shm rw - tmpfs tmpfs rw
7 1 0:9 / /sys/fs/cgroup rw - tmpfs tmpfs rw
8 1 0:10 / /proc rw - proc proc rw
`)
	got := foreignMounts(m)
	want := []string{
		"/opt/tc/state/kubelet/root/pods/u/volumes/kubernetes.io~projected/kube-api-access-x",
		"/opt/tc/state/containerd/root/io.containerd.runtime.v2.task/k8s.io/abc/rootfs",
		"/run/containerd/io.containerd.grpc.v1.cri/sandboxes/abc/shm",
		"/run/netns/tc",
	}
	if !slices.Equal(got, want) {
		t.Errorf("foreignMounts =\n%v\nwant\n%v", got, want)
	}
}

func TestShimSocketPath(t *testing.T) {
	// observed on containerd 1.6.20: the shim of sandbox 351b... served at this path
	got := shimSocketPath("/run/nodeexec-testcluster/containerd-nodeexec-tc-2.sock", "k8s.io",
		"351b479714a953b9c4b43c3b644c3021b4ac6174027886616c7e9446ef01a6c8")
	if got != "/run/containerd/s/bc8b7af039d83a6c8db37c212141309ba620986ad04b7ab8b5f42d471b4dc22e" {
		t.Errorf("shimSocketPath = %s", got)
	}
}
