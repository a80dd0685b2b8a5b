// Package testcluster runs a real local Kubernetes cluster for nodeexec's end-to-end
// tests: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and real nodes
// (kubelet + containerd + runc + bridge CNI), all on this machine, with no container
// registry: the Kubernetes binaries are built from the Go module proxy and every
// image is built locally and imported.
//
//	c, err := testcluster.Start(ctx, testcluster.Options{Log: os.Stderr}) // or reuse
//	cfg, err := c.RESTConfig()
//	name, err := c.AddNode(ctx) // "a node that joins later"
//	err = c.RemoveNode(ctx, name)
//	err = testcluster.Stop(ctx, testcluster.Options{})
//
// From a shell: `make cluster-up` (prints `export KUBECONFIG=...` last),
// `make cluster-add-node`, `make cluster-down`; see cmd/testcluster. Everything needs
// root and a Debian machine (apt-get installs what is missing).
//
// Simulated nodes for scale tests (kwok, sigs.k8s.io/kwok, against the same API
// server; only API objects, no containers):
//
//	k, err := c.StartKwok(ctx, testcluster.KwokOptions{FailNodes: []string{"kwok-node-7"}})
//	names, err := k.CreateNodes(ctx, 5000, nil) // kwok-node-1..5000, label type=kwok, all Ready
//	created, completed, err := k.RawPodRate(ctx, ns, names, 32)
//	err = k.DeleteNodes(ctx); err = k.Stop(ctx)
//
// From a shell: `make kwok-up KWOK_NODES=1000`, `make kwok-down`. Simulated nodes and
// kwok are shared by everyone using the cluster: StartKwok with other options
// restarts kwok, DeleteNodes deletes every simulated node.
//
// With KwokOptions.Exec the simulated nodes answer exec, attach, logs and
// port-forward through the API server (kwok's own TLS server is their kubelet
// endpoint): `nodeexec run` with the nsenter and debugpod backends and
// --use-resident reaches them. kwok runs the commands in a sandbox of its own (new
// mount, PID, UTS and IPC namespaces, a tmpfs root, hostname KwokSandboxHostname),
// never in the host's, and forwards every port-forward to one real `nodeexec agent
// serve` there (kwok_exec.go):
//
//	k, err := c.StartKwok(ctx, testcluster.KwokOptions{Exec: true, AgentBinary: "bin/nodeexec"})
//
// From a shell: `make kwok-up KWOK_NODES=200 KWOK_EXEC=1`.
//
// Monitoring (monitoring.go): a real Prometheus (127.0.0.1:19090), Alertmanager
// (127.0.0.1:19093) and Pushgateway (127.0.0.1:19091) from Debian's packages, on the
// host's loopback, started by Start (also on a running cluster that lacks them):
//
//	err = c.PushMetric(ctx, "job", testcluster.TestAlertMetric, map[string]string{"node": "n1"}, 1)
//	// Prometheus scrapes it within ~1 s; the rule NodeexecTestAlert fires and reaches the Alertmanager
//	err = c.FireAlert(ctx, "Custom", labels); err = c.StopPrometheus(ctx); err = c.StartPrometheus(ctx)
//
// # Layout
//
// Each node i ("nodeexec-tc-<i>", address 10.251.0.(10+i), pods 10.245.<i>.0/24) has
// its own network namespace (node 1: "nodeexec-tc", which also holds the control
// plane; node i >= 2: "nodeexec-tc-n<i>", linked to node 1's by a veth pair), its own
// PID namespace whose PID 1 is a tiny init (the pause binary), a private copy of the
// host's mount namespace shared by its containerd and kubelet, its own containerd
// (socket <RunDir>/containerd-<name>.sock, own root, state and runc root) and a
// kubelet with cgroupRoot /<name>. Nothing is added to the host's network
// namespace; the API server is forwarded to 127.0.0.1:<APIPort> by two socat
// processes (host port -> unix socket -> port 6443 inside node 1's namespace).
// Services: 10.97.0.0/24, no kube-proxy and no DNS; only the "kubernetes" Service is
// reachable from pods (a DNAT rule in each node's namespace).
//
// Images: PauseImage (the sandbox image), ToolsImage = BusyboxImage (busybox-static
// with a symlink per applet). More with BuildImage + Cluster.ImportImage. Pods must
// use imagePullPolicy IfNotPresent or Never (the default for a non-latest tag).
// Namespaces are "privileged" for Pod Security Admission, except BaselineNamespace.
//
// State: CacheDir (binaries, Go build cache, image tarballs; kept by Stop), StateDir
// (etcd, PKI, containerd/kubelet roots, logs/<component>.log, admin.kubeconfig,
// cluster.json), RunDir (<component>.pid holding "PID START-TIME", sockets).
// Operations that change the cluster hold an flock on <CacheDir>/.lock, so parallel
// test processes can all call Start.
//
// # Machine quirks handled (from the shared recipe)
//
//   - root lacks CAP_SYS_RESOURCE: containerd restrict_oom_score_adj = true, kubelet
//     oomScoreAdj: 0 (otherwise runc fails on every sandbox).
//   - cgroup v1: kubelet failCgroupV1: false, cgroupDriver cgroupfs (no systemd).
//   - the machine's PID 1 refuses namespace access: each node's own PID namespace
//     init, so a hostPID pod's `nsenter -t 1 -m -u -i -n -p` works as on a real node.
//   - no dummy netdev driver: node addresses sit on veth pairs.
//   - `ip netns exec` makes a mount namespace per call: daemons are started with
//     nsenter --net (and --pid --mount into the node's init).
//   - node names do not resolve: --kubelet-preferred-address-types=InternalIP.
//   - the kubelet changes host-wide sysctls: saved before the first kubelet starts
//     (only if no saved copy exists), restored by Stop.
//   - Kubernetes 1.37 with Debian's containerd 1.6 (no RuntimeConfig CRI call): the
//     kubelet falls back to its configured cgroupDriver. Kubernetes 1.38 is expected
//     to need containerd 2.x.
//
// Coexistence: every name, port, address, socket, cgroup and directory differs from
// other local clusters (e.g. the shared recipe's netns "tc", port 6443, /opt/tc), Stop
// only signals the PIDs it recorded (checked against their start time), and a new
// node's mount namespace drops its copies of other runtimes' mounts.
package testcluster
