package testcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Cluster is a running test cluster.
type Cluster struct {
	r *runner
}

// Start returns the running cluster, or brings one up: it installs missing Debian
// packages, builds what is not cached (Kubernetes binaries, pause, images), creates
// the PKI and network namespaces, starts etcd, the control plane and o.Nodes nodes,
// and waits until every node is Ready and the default ServiceAccount exists. It also
// starts Prometheus, the Alertmanager and the Pushgateway (see PrometheusURL) and
// waits until each answers /-/ready; on a running cluster it starts those that are
// not running (installing their packages if missing).
//
// A healthy running cluster is reused (the warm path takes well under a second);
// nodes are added if it has fewer than o.Nodes. A stopped or partial cluster is
// removed first (as Stop does). With KubernetesVersion empty a running cluster
// is reused whatever its Kubernetes version (Cluster.KubernetesVersion says
// which); a running cluster started with another KubernetesVersion asked
// explicitly, or another APIPort, is an error (Stop it first). Start needs root.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	explicitK8s := o.KubernetesVersion != ""
	o, err := o.resolve()
	if err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("testcluster: Start needs root")
	}
	r := newRunner(o)
	t0 := time.Now()
	if err := checkContainerdServed(ctx, r.l, o.ContainerdVersion); err != nil {
		return nil, err
	}
	unlock, err := lockCache(ctx, r.l, r.logf)
	if err != nil {
		return nil, err
	}
	defer unlock()

	if st, err := r.attach(ctx); err == nil {
		if err := r.adoptKubernetesVersion(st, explicitK8s); err != nil {
			return nil, err
		}
		if st.APIPort != o.APIPort {
			return nil, fmt.Errorf("testcluster: a cluster on port %d is running (wanted %d); Stop it first", st.APIPort, o.APIPort)
		}
		if err := r.checkContainerdReuse(st); err != nil {
			return nil, err
		}
		r.logf("reusing the running cluster (%d nodes, Kubernetes %s, containerd %s)", len(st.Nodes), r.o.KubernetesVersion, containerdShown(st.ContainerdVersion))
		c := &Cluster{r: r}
		for len(st.Nodes) < o.Nodes {
			if _, err := r.addNode(ctx, st); err != nil {
				return nil, err
			}
		}
		cs, err := r.clientset()
		if err != nil {
			return nil, err
		}
		for _, i := range st.Nodes {
			if err := waitNodeReady(ctx, cs, nodeName(i), 2*time.Minute); err != nil {
				return nil, fmt.Errorf("testcluster: %w", err)
			}
		}
		// monitoring processes missing (never started, or stopped): start them
		if err := r.ensurePackages(ctx); err != nil {
			return nil, fmt.Errorf("testcluster: %w", err)
		}
		if err := r.startMonitoring(ctx); err != nil {
			return nil, fmt.Errorf("testcluster: %w (logs in %s)", err, r.l.logs)
		}
		r.timing("start-reuse", t0)
		return c, nil
	} else if r.leftovers() {
		r.logf("no healthy cluster (%v): removing what is left of one", err)
		if err := r.stop(ctx); err != nil {
			r.logf("warning: %v", err)
		}
	}

	if err := r.up(ctx); err != nil {
		return nil, fmt.Errorf("testcluster: %w (logs in %s; Stop removes everything)", err, r.l.logs)
	}
	r.timing("start-total", t0)
	return &Cluster{r: r}, nil
}

// Attach returns the running cluster described by o's directories. It fails with an
// error wrapping ErrNotRunning when there is none, or when a component is not
// running or the API server does not answer. With KubernetesVersion empty it
// takes the running cluster's version; another version asked explicitly is an error.
func Attach(ctx context.Context, o Options) (*Cluster, error) {
	explicitK8s := o.KubernetesVersion != ""
	o, err := o.resolve()
	if err != nil {
		return nil, err
	}
	r := newRunner(o)
	st, err := r.attach(ctx)
	if err != nil {
		return nil, err
	}
	if err := r.adoptKubernetesVersion(st, explicitK8s); err != nil {
		return nil, err
	}
	// the running cluster's port wins over o's
	r.o.APIPort = st.APIPort
	r.adoptContainerd(st)
	return &Cluster{r: r}, nil
}

// Stop stops everything this package started for the cluster in o's directories,
// using the PIDs it recorded (never by name), removes its network namespaces,
// cgroups, mounts, state and run directories and the host directories it created,
// and restores the host sysctls the kubelets changed. The cache stays. Stop is
// idempotent: it does nothing when no cluster is there.
func Stop(ctx context.Context, o Options) error {
	o, err := o.resolve()
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("testcluster: Stop needs root")
	}
	r := newRunner(o)
	unlock, err := lockCache(ctx, r.l, r.logf)
	if err != nil {
		return err
	}
	defer unlock()
	return r.stop(ctx)
}

// AuditLog is the path of kube-apiserver's audit log: JSON lines, one
// audit.k8s.io/v1 Event at the Metadata level per finished pod create or
// delete and per exec, attach or port-forward into a pod, by any user (the
// admin kubeconfig's is nodeexec-tc-admin; kubelets are system:node:NAME).
// It is rotated at 100 MB, keeping one older file.
func (c *Cluster) AuditLog() string { return c.r.l.audit }

// Kubeconfig is the path of the admin kubeconfig (server https://127.0.0.1:<APIPort>,
// user in group system:masters).
func (c *Cluster) Kubeconfig() string { return c.r.l.kubeconfig }

// RESTConfig returns the admin client configuration.
func (c *Cluster) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.r.l.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	return cfg, nil
}

// Nodes returns the names of the cluster's real nodes, in index order.
func (c *Cluster) Nodes() []string {
	st, err := c.r.l.loadState()
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(st.Nodes))
	for _, i := range slices.Sorted(slices.Values(st.Nodes)) {
		names = append(names, nodeName(i))
	}
	return names
}

// AddNode starts the next real node (the lowest free index): its own network
// namespace linked to the others, PID namespace, containerd with every image
// imported so far, and kubelet. It waits until the node is Ready and returns its name.
func (c *Cluster) AddNode(ctx context.Context) (string, error) {
	r := c.r
	unlock, err := lockCache(ctx, r.l, r.logf)
	if err != nil {
		return "", err
	}
	defer unlock()
	st, err := r.attach(ctx)
	if err != nil {
		return "", err
	}
	t0 := time.Now()
	name, err := r.addNode(ctx, st)
	if err != nil {
		return "", err
	}
	cs, err := r.clientset()
	if err != nil {
		return "", err
	}
	if err := waitNodeReady(ctx, cs, name, 2*time.Minute); err != nil {
		return "", fmt.Errorf("testcluster: %w (logs in %s)", err, r.l.logs)
	}
	r.timing("add-node "+name, t0)
	return name, nil
}

// RemoveNode stops the node's kubelet and containerd (removing its containers), its
// init and network namespace (node 1's stay: the control plane lives there),
// removes its state and cgroups, deletes its Node object and force-deletes the pods
// bound to it. Its name is free again: AddNode reuses the lowest free index.
func (c *Cluster) RemoveNode(ctx context.Context, name string) error {
	r := c.r
	i, ok := nodeIndex(name)
	if !ok {
		return fmt.Errorf("testcluster: %q is not a test node name", name)
	}
	unlock, err := lockCache(ctx, r.l, r.logf)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := r.l.loadState()
	if err != nil {
		return fmt.Errorf("testcluster: %w: %w", ErrNotRunning, err)
	}
	if !st.hasNode(i) {
		return fmt.Errorf("testcluster: no node %s", name)
	}
	t0 := time.Now()
	r.stopNode(ctx, r.l.node(i))
	st.Nodes = slices.DeleteFunc(st.Nodes, func(x int) bool { return x == i })
	if err := r.l.saveState(st); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	cs, err := r.clientset()
	if err != nil {
		return err
	}
	if err := cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("testcluster: delete Node %s: %w", name, err)
	}
	// Pods bound to the node would otherwise wait for the pod garbage collector, and a
	// node added later under the same name would run them again.
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
	if err != nil {
		return fmt.Errorf("testcluster: pods of %s: %w", name, err)
	}
	zero := int64(0)
	for _, p := range pods.Items {
		err := cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("testcluster: delete pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	r.timing("remove-node "+name, t0)
	return nil
}

// ImportImage imports a docker-archive tarball (see BuildImage) into every node's
// containerd, and keeps a copy so that nodes added later get it too.
func (c *Cluster) ImportImage(ctx context.Context, tarball string) error {
	r := c.r
	unlock, err := lockCache(ctx, r.l, r.logf)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := r.l.loadState()
	if err != nil {
		return fmt.Errorf("testcluster: %w: %w", ErrNotRunning, err)
	}
	if err := os.MkdirAll(r.l.images, 0o755); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	sum, err := fileSHA256(tarball)
	if err != nil {
		return fmt.Errorf("testcluster: import %s: %w", tarball, err)
	}
	keep := filepath.Join(r.l.images, sum[:12]+"-"+filepath.Base(tarball))
	if err := copyFile(tarball, keep); err != nil {
		return fmt.Errorf("testcluster: import %s: %w", tarball, err)
	}
	for _, i := range st.Nodes {
		if err := r.importImage(ctx, r.l.node(i), keep); err != nil {
			return fmt.Errorf("testcluster: %w", err)
		}
	}
	// A newer build of the same tarball replaces the older copies: nodes added
	// later get the current image, and rebuilt images do not pile up on disk.
	base := "-" + filepath.Base(tarball)
	var images []string
	for _, img := range st.Images {
		if img != keep && strings.HasSuffix(img, base) {
			if err := os.Remove(img); err != nil && !os.IsNotExist(err) {
				r.logf("removing the older image tarball %s: %v", img, err)
			}
			continue
		}
		images = append(images, img)
	}
	if !slices.Contains(images, keep) {
		images = append(images, keep)
	}
	st.Images = images
	return r.l.saveState(st)
}

// attach checks that the cluster in r's directories runs: every recorded component
// alive and the API server answering on the host port.
func (r *runner) attach(ctx context.Context) (*clusterState, error) {
	st, err := r.l.loadState()
	if err != nil {
		return nil, fmt.Errorf("testcluster: %w: %w", ErrNotRunning, err)
	}
	need := []string{initProc(r.l.node(1)), procEtcd, procAPIServer, procCM, procScheduler, procSockFwd, procHostFwd}
	// a cluster started before the registry existed runs on without it (its images
	// were imported); Registry and PushImage say so
	if st.Registry != nil {
		need = append(need, procRegistry, procRegistrySockFwd, procRegistryHostFwd)
	}
	for _, i := range st.Nodes {
		n := r.l.node(i)
		if i > 1 {
			need = append(need, initProc(n))
		}
		need = append(need, containerdProc(n), kubeletProc(n))
	}
	for _, name := range need {
		rec, err := r.l.readProc(name)
		if err != nil || !rec.alive() {
			return nil, fmt.Errorf("testcluster: %w: %s is not running", ErrNotRunning, name)
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", r.l.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("testcluster: %w: %w", ErrNotRunning, err)
	}
	cfg.Timeout = 5 * time.Second
	// every process runs: give a busy API server some time before calling it broken
	if err := poll(ctx, 20*time.Second, 250*time.Millisecond, "API server", func(ctx context.Context) (bool, error) {
		err := readyz(ctx, cfg)
		return err == nil, err
	}); err != nil {
		return nil, fmt.Errorf("testcluster: %w: %w", ErrNotRunning, err)
	}
	return st, nil
}

// leftovers reports whether anything of a cluster is there.
func (r *runner) leftovers() bool {
	for _, p := range []string{r.o.StateDir, r.o.RunDir} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	for _, ns := range listNetns() {
		if isOurNetns(ns) {
			return true
		}
	}
	return len(ourCgroupRoots()) > 0
}

func readyz(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(body)) != "ok" {
		return fmt.Errorf("readyz: %s", body)
	}
	return nil
}

func (r *runner) clientset() (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", r.l.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	return cs, nil
}

// stop removes everything of the cluster; see Stop. It goes on after a failed step
// and returns every failure.
func (r *runner) stop(ctx context.Context) error {
	t0 := time.Now()
	var errs []error
	st, _ := r.l.loadState()
	if st == nil {
		st = &clusterState{}
	}
	// the stopped cluster's ctr removes its containers; r keeps its own
	// version for an up that follows
	defer func(o Options, l layout) { r.o, r.l = o, l }(r.o, r.l)
	r.adoptContainerd(st)
	l := r.l
	var kwok, kubelets, containerds, inits, rest []string
	for _, name := range l.recordedProcs() {
		switch {
		case name == procKwok:
			kwok = append(kwok, name)
		case strings.HasPrefix(name, "kubelet-"):
			kubelets = append(kubelets, name)
		case strings.HasPrefix(name, "containerd-"):
			containerds = append(containerds, name)
		case strings.HasPrefix(name, "init-"):
			inits = append(inits, name)
		default:
			rest = append(rest, name)
		}
	}
	// 0. kwok (simulated nodes and their pods), which only talks to the API server
	r.stopProcs(10*time.Second, kwok...)
	// 1. kubelets first, so that nothing recreates containers
	r.stopProcs(15*time.Second, kubelets...)
	// 2. every container, through its containerd (the shims exit and clean up)
	for _, name := range containerds {
		if i, ok := nodeIndex(strings.TrimPrefix(name, "containerd-")); ok {
			if rec, err := l.readProc(name); err == nil && rec.alive() {
				r.removeContainers(ctx, l.node(i))
			}
		}
	}
	r.stopProcs(15*time.Second, containerds...)
	// 3. control plane and forwarders, then the inits (the kernel ends whatever is
	// left in their PID namespaces)
	var first, later []string // etcd last: the API server's shutdown needs it
	for _, name := range rest {
		if name == procEtcd {
			later = append(later, name)
		} else {
			first = append(first, name)
		}
	}
	r.stopProcs(10*time.Second, first...)
	r.stopProcs(10*time.Second, later...)
	r.stopProcs(10*time.Second, inits...)
	r.killOurShims(nil)

	// 4. mounts under our directories in the host's mount namespace (normally none:
	// the daemons mount in their nodes' private mount namespaces)
	if mounts, err := readMountInfo("self"); err == nil {
		for _, m := range mountsUnder(mounts, r.o.StateDir, r.o.RunDir) {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
				r.logf("warning: umount %s: %v", m, err)
			}
		}
	}
	// 5. cgroups the kubelets made under our cgroup roots, and the roots
	roots := ourCgroupRoots()
	for _, root := range roots {
		if left := removeCgroupRoot(root, 10*time.Second); len(left) > 0 {
			errs = append(errs, fmt.Errorf("could not remove cgroups %v", left))
		}
	}
	// 6. network namespaces (their bridges, veths and iptables rules go with them)
	for _, ns := range listNetns() {
		if isOurNetns(ns) {
			if err := r.ip(ctx, "netns", "del", ns); err != nil {
				errs = append(errs, err)
			} else {
				r.logf("deleted network namespace %s", ns)
			}
		}
	}
	// 7. host sysctls the kubelets changed
	restored, err := restoreSysctls(l.sysctlFile)
	if err != nil {
		errs = append(errs, err)
	}
	if len(restored) > 0 {
		r.logf("restored sysctls %v", restored)
	}
	// 8. host files of our nodes: kubelet log symlinks, CNI result cache files
	// and sockets of shims that were killed rather than stopped
	dirs, _ := filepath.Glob(filepath.Join(r.o.StateDir, "containerd-"+NodeNamePrefix+"*"))
	for _, d := range dirs {
		if i, ok := nodeIndex(strings.TrimPrefix(filepath.Base(d), "containerd-")); ok {
			removeHostFilesOf(l.node(i))
			removeShimSockets(l.node(i))
		}
	}
	// 9. our directories, then host directories that were absent before Start
	for _, d := range []string{r.o.StateDir, r.o.RunDir} {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	r.removeAbsentHostPaths(st.AbsentHostPaths)
	r.timing("stop", t0)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("testcluster: stop: %w", err)
	}
	return nil
}

// removeAbsentHostPaths removes the host directories that did not exist before
// Start, if they are empty now. /run/netns is unmounted first (`ip netns add` makes
// it a bind mount of itself) when no namespace is left in it.
func (r *runner) removeAbsentHostPaths(paths []string) {
	sorted := slices.Clone(paths)
	slices.SortFunc(sorted, func(a, b string) int { return len(b) - len(a) }) // deepest first
	for _, p := range sorted {
		if p == "/run/netns" {
			if len(listNetns()) > 0 {
				continue
			}
			for isMountPoint(p) {
				if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil {
					r.logf("warning: umount %s: %v", p, err)
					break
				}
			}
		}
		removeEmptyTree(p)
	}
}
