package testcluster

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// containerdConfig renders a node's containerd (1.6/1.7, config version 2) config.
// Every path is the node's own (root, state, sockets, runc root, CNI conf dir, opt
// dir), so several containerds coexist on one host.
func containerdConfig(n nodeSpec) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[debug]
  address = %[5]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[6]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[7]q
  # This machine's root lacks CAP_SYS_RESOURCE, so no process may lower its
  # oom_score_adj: the CRI would give the sandbox -998 and runc fails with
  # "nsexec: failed to update /proc/self/oom_score_adj: Permission denied".
  # restrict_oom_score_adj clamps every score to >= containerd's own (0).
  restrict_oom_score_adj = true
  # pod network namespaces are pinned under the state dir, not /run/netns
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[8]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[9]q
  # registry hosts (certs.d/<registry>/hosts.toml): the test registry, its CA, mirrors
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %[10]q
`,
		containerdPaths(n)...)
}

// containerdPaths are the node's paths and settings both containerd config
// versions render, in the order of their %[1]q..%[10]q: root, state, the
// socket, its ttrpc socket, the debug socket, opt, the sandbox image, runc's
// root, the CNI config directory, the registry hosts directory.
func containerdPaths(n nodeSpec, extra ...any) []any {
	return append([]any{
		filepath.Join(n.ContainerdDir, "root"),
		filepath.Join(n.ContainerdState, "state"),
		n.ContainerdSocket,
		n.ContainerdSocket + ".ttrpc",
		filepath.Join(n.ContainerdState, "debug.sock"),
		filepath.Join(n.ContainerdDir, "opt"),
		PauseImage,
		filepath.Join(n.ContainerdState, "runc"),
		filepath.Join(n.CNIDir, "net.d"),
		n.certsDir(),
	}, extra...)
}

// cniConfig renders the node's CNI network: a bridge cni0 in the node's network
// namespace with host-local IPAM over the node's pod subnet (data under the state dir).
func cniConfig(n nodeSpec) string {
	type m = map[string]any
	conf := m{
		"cniVersion": "1.0.0",
		"name":       n.Name, // per node: names the CNI result cache files
		"plugins": []m{
			{
				"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
				"ipam": m{
					"type":    "host-local",
					"dataDir": filepath.Join(n.CNIDir, "networks"),
					"ranges":  [][]m{{{"subnet": n.PodCIDR}}},
					"routes":  []m{{"dst": "0.0.0.0/0"}},
				},
			},
			{"type": "portmap", "capabilities": m{"portMappings": true}},
		},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		panic(err) // static structure
	}
	return string(b) + "\n"
}

// kubeletConfig renders a node's KubeletConfiguration.
func kubeletConfig(l layout, n nodeSpec) string {
	q := strconv.Quote
	return `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 host: kubelets 1.35+ refuse to start on it unless told otherwise
failCgroupV1: false
# no systemd here; containerd 1.6 has no RuntimeConfig CRI call, so this is used as is
cgroupDriver: cgroupfs
# every node gets its own cgroup root (pre-created in every hierarchy), so several
# kubelets (and other clusters' kubelets) never share /kubepods
cgroupRoot: ` + q(n.CgroupRoot) + `
containerRuntimeEndpoint: ` + q("unix://"+n.ContainerdSocket) + `
address: ` + q(n.IP) + `
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: ` + q(filepath.Join(l.pki, "ca.crt")) + `}
authorization: {mode: Webhook}
tlsCertFile: ` + q(filepath.Join(l.pki, "kubelet-"+n.Name+"-serving.crt")) + `
tlsPrivateKeyFile: ` + q(filepath.Join(l.pki, "kubelet-"+n.Name+"-serving.key")) + `
rotateCertificates: false
serverTLSBootstrap: false
clusterDomain: cluster.local
clusterDNS: [` + q(clusterDNSIP) + `]
resolvConf: ""
failSwapOn: false
podCIDR: ` + q(n.PodCIDR) + `
serializeImagePulls: false
# renewed every 5 s (a quarter of it); the controller manager's node-monitor grace
# period is 20 s
nodeLeaseDurationSeconds: 20
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# the default -999 needs CAP_SYS_RESOURCE, which root lacks on this machine
oomScoreAdj: 0
podLogsDir: ` + q(filepath.Join(n.KubeletDir, "pod-logs")) + `
volumePluginDir: ` + q(filepath.Join(n.KubeletDir, "volume-plugins")) + `
`
}

func kubeletArgs(l layout, n nodeSpec) []string {
	return []string{
		l.k8sBinary("kubelet"),
		"--config=" + filepath.Join(n.KubeletDir, "config.yaml"),
		"--kubeconfig=" + filepath.Join(l.pki, "kubelet-"+n.Name+".kubeconfig"),
		"--root-dir=" + filepath.Join(n.KubeletDir, "root"),
		"--hostname-override=" + n.Name,
		"--node-ip=" + n.IP,
		"--v=1",
	}
}

func etcdArgs(l layout) []string {
	return []string{
		l.etcdBinary(DefaultEtcdVersion), "--name", "nodeexec-tc", "--data-dir", l.etcdDir,
		"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "nodeexec-tc=http://127.0.0.1:2380", "--listen-metrics-urls", "http://127.0.0.1:2381",
		"--quota-backend-bytes", "2147483648", "--snapshot-count", "10000",
	}
}

func apiserverArgs(l layout) []string {
	p := func(name string) string { return filepath.Join(l.pki, name) }
	return []string{
		l.k8sBinary("kube-apiserver"),
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address=0.0.0.0",
		"--secure-port=" + strconv.Itoa(hubAPIPort),
		"--advertise-address=" + l.hubIP(),
		"--service-cluster-ip-range=" + serviceCIDR,
		"--client-ca-file=" + p("ca.crt"),
		"--tls-cert-file=" + p("apiserver.crt"),
		"--tls-private-key-file=" + p("apiserver.key"),
		"--kubelet-client-certificate=" + p("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + p("apiserver-kubelet-client.key"),
		"--kubelet-certificate-authority=" + p("ca.crt"),
		// node names do not resolve: exec/logs/attach must use the node's InternalIP
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p("sa.pub"),
		"--service-account-signing-key-file=" + p("sa.key"),
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		"--profiling=false",
		"--audit-policy-file=" + l.auditPolicyFile(),
		"--audit-log-path=" + l.audit,
		"--audit-log-format=json",
		"--audit-log-maxsize=100", // MB, then one rotated file is kept
		"--audit-log-maxbackup=1",
		"--v=1",
	}
}

// auditPolicy has kube-apiserver record each finished request that creates,
// updates or patches a pod, an ephemeral container or a NodeScript at the
// Request level (who, what, when, and the body: the pod's or the ephemeral
// container's command, the NodeScript's script), each Lease creation at the
// Request level too (a resident agent's run record: node and command line;
// the Lease of a run; a node's first heartbeat), each pod deletion and each exec, attach and port-forward into a
// pod at the Metadata level (who, what, when; an exec's command is in its
// requestURI), as a security team's policy would: what benchmarks attribute
// to a client or to the kubelets, and what the e2e tests read to say who ran
// what on a node (Cluster.AuditLog). Every other request of a member of
// AuditAllGroup (Cluster.AuditedUser) is recorded at the Metadata level.
// Nothing else is recorded.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Request
  verbs: [create, update, patch]
  resources:
  - group: ""
    resources: [pods, pods/ephemeralcontainers]
  - group: nodeexec.io
    resources: [nodescripts]
- level: Request
  verbs: [create]
  resources:
  - group: coordination.k8s.io
    resources: [leases]
- level: Metadata
  userGroups: [` + AuditAllGroup + `]
- level: Metadata
  verbs: [delete, deletecollection]
  resources:
  - group: ""
    resources: [pods]
- level: Metadata
  resources:
  - group: ""
    resources: [pods/exec, pods/attach, pods/portforward]
- level: None
`

func controllerManagerArgs(l layout) []string {
	p := func(name string) string { return filepath.Join(l.pki, name) }
	kc := p("controller-manager.kubeconfig")
	return []string{
		l.k8sBinary("kube-controller-manager"),
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1",
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + p("sa.key"),
		"--root-ca-file=" + p("ca.crt"),
		"--cluster-signing-cert-file=" + p("ca.crt"),
		"--cluster-signing-key-file=" + p("ca.key"),
		"--service-cluster-ip-range=" + serviceCIDR,
		// a node whose kubelet stopped turns NotReady after 20 s instead of 50 s, so
		// the fault tests (Cluster.StopKubelet) stay short; the kubelets renew their
		// lease every 5 s (nodeLeaseDurationSeconds: 20)
		"--node-monitor-grace-period=20s",
		"--node-monitor-period=2s",
		"--profiling=false",
		"--v=1",
	}
}

func schedulerArgs(l layout) []string {
	kc := filepath.Join(l.pki, "scheduler.kubeconfig")
	return []string{
		l.k8sBinary("kube-scheduler"),
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1",
		"--leader-elect=false",
		"--profiling=false",
		"--v=1",
	}
}

// forwarder args: host 127.0.0.1:APIPort -> <run>/apiserver.sock -> (in the hub) 127.0.0.1:6443.
// Both TCP sides set TCP_NODELAY ("nodelay"), as Go's own sockets do: with
// Nagle's algorithm on, every small write that follows an unacknowledged
// one (an exec's or port-forward's SPDY frames) waits for the peer's delayed
// ACK, about 40 ms each, which no real cluster's path adds.
func sockForwarderArgs(l layout) []string {
	return []string{"socat", "UNIX-LISTEN:" + l.apiSock + ",fork,unlink-early,mode=600",
		"TCP:127.0.0.1:" + strconv.Itoa(hubAPIPort) + ",nodelay"}
}

func hostForwarderArgs(l layout) []string {
	return []string{"socat", "TCP-LISTEN:" + strconv.Itoa(l.o.APIPort) + ",bind=127.0.0.1,fork,reuseaddr,nodelay",
		"UNIX-CONNECT:" + l.apiSock}
}

// serviceDNATRules make the "kubernetes" Service IP reach the API server from pods
// (and host-network pods) of a node; there is no kube-proxy.
func serviceDNATRules(l layout) [][]string {
	to := l.hubIP() + ":" + strconv.Itoa(hubAPIPort)
	var rules [][]string
	for _, chain := range []string{"PREROUTING", "OUTPUT"} {
		rules = append(rules, []string{"-t", "nat", "-A", chain, "-d", serviceIP + "/32", "-p", "tcp",
			"--dport", "443", "-j", "DNAT", "--to-destination", to})
	}
	return rules
}

// sysctlKeys are the host-wide sysctls the kubelet changes (vm.* and kernel.* are not
// per network namespace); they are saved before the first kubelet starts and
// restored by Stop.
func sysctlKeys() []string {
	return []string{"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
		"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes"}
}

func sysctlPath(key string) string { return "/proc/sys/" + strings.ReplaceAll(key, ".", "/") }
