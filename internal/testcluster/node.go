package testcluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// addNode starts the node with the lowest free index (without waiting for Ready) and
// records it in st.
func (r *runner) addNode(ctx context.Context, st *clusterState) (string, error) {
	i, err := st.freeIndex()
	if err != nil {
		return "", err
	}
	n := r.l.node(i)
	// recorded first, so that Stop and RemoveNode clean up a half-started node
	st.Nodes = append(st.Nodes, i)
	if err := r.l.saveState(st); err != nil {
		return "", err
	}
	if err := r.startNode(ctx, st, n); err != nil {
		return "", fmt.Errorf("testcluster: node %s: %w (logs in %s)", n.Name, err, r.l.logs)
	}
	return n.Name, nil
}

func (r *runner) startNode(ctx context.Context, st *clusterState, n nodeSpec) error {
	l := r.l
	t := time.Now()
	if err := r.setupNodeNetns(ctx, n); err != nil {
		return err
	}
	init, err := r.startInit(ctx, n, st.PauseBinary)
	if err != nil {
		return err
	}
	target := nsTarget{InitPID: init.PID, Netns: netnsPath(n.Netns)}

	c, err := ensureCA(l.pki)
	if err != nil {
		return err
	}
	for _, s := range nodeCerts(n) {
		if err := c.ensureCert(l.pki, s); err != nil {
			return err
		}
	}
	if err := writeKubeconfig(filepath.Join(l.pki, "kubelet-"+n.Name+".kubeconfig"), l.pki,
		"https://"+l.hubIP()+":"+strconv.Itoa(hubAPIPort), "kubelet-"+n.Name); err != nil {
		return err
	}

	for _, d := range []string{n.ContainerdDir, n.ContainerdState, filepath.Join(n.KubeletDir, "root"),
		filepath.Join(n.CNIDir, "net.d"), filepath.Join(n.CNIDir, "networks")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	files := map[string]string{
		filepath.Join(n.ContainerdDir, "config.toml"):            l.nodeContainerdConfig(n),
		filepath.Join(n.CNIDir, "net.d", "10-nodeexec.conflist"): cniConfig(n),
		filepath.Join(n.KubeletDir, "config.yaml"):               kubeletConfig(l, n),
	}
	for p, content := range files {
		if err := writeFileAtomic(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	if st.Registry != nil {
		if err := writeHostsFiles(l, n, st.Registry.Password); err != nil {
			return err
		}
	}
	if _, err := r.startDaemon(containerdProc(n), target, l.containerdArgv(n), false); err != nil {
		return err
	}
	if err := poll(ctx, 30*time.Second, 50*time.Millisecond, "containerd of "+n.Name, func(ctx context.Context) (bool, error) {
		_, err := r.run(ctx, r.l.ctr(), "-a", n.ContainerdSocket, "version")
		return err == nil, err
	}); err != nil {
		return err
	}
	for _, img := range st.Images {
		if err := r.importImage(ctx, n, img); err != nil {
			return err
		}
	}
	if err := createCgroupRoot(n.CgroupRoot); err != nil {
		return err
	}
	// the kubelet changes host-wide sysctls; the first node saves the originals
	if err := saveSysctls(l.sysctlFile); err != nil {
		return err
	}
	if _, err := r.startDaemon(kubeletProc(n), target, kubeletArgs(l, n), false); err != nil {
		return err
	}
	r.addServiceDNAT(ctx, n)
	r.timing("start-node "+n.Name, t)
	return nil
}

func (r *runner) importImage(ctx context.Context, n nodeSpec, tarball string) error {
	if _, err := r.run(ctx, r.l.ctr(), "-a", n.ContainerdSocket, "-n", "k8s.io", "images", "import", tarball); err != nil {
		return fmt.Errorf("import %s into %s: %w", filepath.Base(tarball), n.Name, err)
	}
	return nil
}

// removeContainers kills and deletes every task of node n's containerd (app
// containers first, then the pod sandboxes), so that their shims exit and clean up
// after themselves.
func (r *runner) removeContainers(ctx context.Context, n nodeSpec) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out, err := r.run(ctx, r.l.ctr(), "-a", n.ContainerdSocket, "-n", "k8s.io", "tasks", "ls", "-q")
	if err != nil {
		r.logf("warning: %v", err)
		return
	}
	sandbox := map[string]bool{}
	ents, _ := os.ReadDir(filepath.Join(n.ContainerdDir, "root", "io.containerd.grpc.v1.cri", "sandboxes"))
	for _, e := range ents {
		sandbox[e.Name()] = true
	}
	var apps, sandboxes []string
	for _, id := range trimLines(out) {
		if sandbox[id] {
			sandboxes = append(sandboxes, id)
		} else {
			apps = append(apps, id)
		}
	}
	for _, ids := range [][]string{apps, sandboxes} {
		if len(ids) == 0 {
			continue
		}
		args := append([]string{"-a", n.ContainerdSocket, "-n", "k8s.io", "tasks", "rm", "-f"}, ids...)
		// a task can exit and be deleted by containerd meanwhile: "not found" is fine
		if out, err := r.run(ctx, r.l.ctr(), args...); err != nil && !strings.Contains(out, "not found") {
			r.logf("warning: %v", err)
		}
	}
	if len(apps)+len(sandboxes) > 0 {
		r.logf("removed %d containers and %d pod sandboxes of %s", len(apps), len(sandboxes), n.Name)
	}
}

// killOurShims SIGKILLs containerd shims left over from our containerds: only shims
// whose -address is one of our sockets (in RunDir). only limits it to one node.
func (r *runner) killOurShims(only *nodeSpec) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil || !bytes.Contains(b, []byte("containerd-shim")) {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if !strings.Contains(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for j := 0; j+1 < len(args); j++ {
			if args[j] != "-address" {
				continue
			}
			addr := args[j+1]
			ours := strings.HasPrefix(addr, r.o.RunDir+"/containerd-")
			if only != nil {
				ours = addr == only.ContainerdSocket
			}
			if ours {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
				r.logf("killing leftover shim %d (%s)", pid, addr)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// stopNode stops node n and removes its state; see Cluster.RemoveNode.
func (r *runner) stopNode(ctx context.Context, n nodeSpec) {
	r.stopProcs(15*time.Second, kubeletProc(n))
	if rec, err := r.l.readProc(containerdProc(n)); err == nil && rec.alive() {
		r.removeContainers(ctx, n)
	}
	r.stopProcs(15*time.Second, containerdProc(n))
	r.killOurShims(&n)
	dirs := []string{n.ContainerdDir, n.ContainerdState, n.KubeletDir, n.CNIDir}
	if n.Index > 1 {
		r.stopProcs(10*time.Second, initProc(n))
	} else if rec, err := r.l.readProc(initProc(n)); err == nil && rec.alive() {
		// node 1 shares its namespaces with the control plane, which keeps running:
		// unmount the node's volumes, rootfs and network namespace pins in there
		r.unmountInside(ctx, rec.PID, dirs...)
	}
	if left := removeCgroupRoot(n.CgroupRoot, 10*time.Second); len(left) > 0 {
		r.logf("warning: could not remove cgroups %v", left)
	}
	r.deleteNodeNetns(ctx, n)
	removeHostFilesOf(n)
	removeShimSockets(n)
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			r.logf("warning: %v", err)
		}
	}
	for _, s := range []string{n.ContainerdSocket, n.ContainerdSocket + ".ttrpc"} {
		_ = os.Remove(s)
	}
}

// removeHostFilesOf removes kubelet log symlinks into node n's directories and the
// CNI result cache files of its pod sandboxes (<network>-<sandbox ID>-<interface>,
// for its own network and containerd's "cni-loopback"). Call it before n's
// containerd root is removed: the sandbox IDs are read from there.
func removeHostFilesOf(n nodeSpec) {
	logs, _ := filepath.Glob("/var/log/containers/*.log")
	for _, f := range logs {
		if t, err := os.Readlink(f); err == nil && strings.HasPrefix(t, n.KubeletDir+"/") {
			_ = os.Remove(f)
		}
	}
	results, _ := filepath.Glob("/var/lib/cni/results/" + n.Name + "-*")
	sandboxes, _ := os.ReadDir(filepath.Join(n.ContainerdDir, "root", "io.containerd.grpc.v1.cri", "sandboxes"))
	for _, sb := range sandboxes {
		more, _ := filepath.Glob("/var/lib/cni/results/*-" + sb.Name() + "-*")
		results = append(results, more...)
	}
	for _, f := range results {
		_ = os.Remove(f)
	}
}

// removeShimSockets removes the sockets of node n's shims, which containerd puts in
// /run/containerd/s/ whatever its own state directory (named by the sha256 of
// "<containerd socket>/<namespace>/<task ID>"). A shim removes its socket when it
// exits normally; this cleans up after shims that were killed. Call it after the
// shims are gone and before n's state directory is removed (task IDs are read there).
func removeShimSockets(n nodeSpec) {
	tasks, _ := os.ReadDir(filepath.Join(n.ContainerdState, "state", "io.containerd.runtime.v2.task", "k8s.io"))
	for _, t := range tasks {
		p := shimSocketPath(n.ContainerdSocket, "k8s.io", t.Name())
		if st, err := os.Lstat(p); err == nil && st.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(p)
		}
	}
}

// shimSocketPath is containerd's runtime/v2 shim.SocketAddress (1.6 to 2.x), without
// the unix:// scheme.
func shimSocketPath(containerdSocket, namespace, id string) string {
	sum := sha256.Sum256([]byte(filepath.Join(containerdSocket, namespace, id)))
	return filepath.Join("/run/containerd/s", hex.EncodeToString(sum[:]))
}
