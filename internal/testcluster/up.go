package testcluster

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// up brings up a new cluster (nothing of an old one is left).
func (r *runner) up(ctx context.Context) error {
	a, err := r.buildArtifacts(ctx)
	if err != nil {
		return err
	}
	st, err := r.prepareState(a)
	if err != nil {
		return err
	}
	hub, err := r.startControlPlane(ctx, a.pauseBin)
	if err != nil {
		return err
	}
	if err := r.startRegistryWithImages(ctx, hub, a, st); err != nil {
		return err
	}
	if err := r.startNodes(ctx, st); err != nil {
		return err
	}
	if err := r.startMonitoring(ctx); err != nil {
		return err
	}
	return r.seedObjects(ctx)
}

// artifacts are what up builds before it starts anything.
type artifacts struct {
	pauseBin, registryBin string
	// images are the base images to push, by reference.
	images map[string]v1.Image
}

// buildArtifacts installs the packages and builds Kubernetes, the pause
// binary and base images, the registry and etcd (each cached).
func (r *runner) buildArtifacts(ctx context.Context) (artifacts, error) {
	var a artifacts
	t := time.Now()
	if err := r.ensurePackages(ctx); err != nil {
		return a, err
	}
	r.timing("apt-packages", t)

	t = time.Now()
	kb := k8sBuild{Version: r.o.KubernetesVersion, SrcDir: filepath.Join(r.l.k8sDir, "src"), BinDir: r.l.k8sBin, GoCache: r.l.gocache}
	if err := kb.run(ctx, r); err != nil {
		return a, err
	}
	r.timing("build-k8s", t)

	t = time.Now()
	if err := r.buildContainerd2(ctx); err != nil {
		return a, err
	}
	r.timing("build-containerd", t)

	t = time.Now()
	var err error
	if a.pauseBin, err = r.buildPause(ctx); err != nil {
		return a, err
	}
	if a.images, err = baseImages(ctx, a.pauseBin); err != nil {
		return a, err
	}
	r.timing("build-pause+images", t)

	t = time.Now()
	if a.registryBin, err = r.buildRegistry(ctx, DefaultRegistryVersion); err != nil {
		return a, err
	}
	r.timing("build-registry", t)

	t = time.Now()
	if _, err := r.buildEtcd(ctx, DefaultEtcdVersion); err != nil {
		return a, err
	}
	r.timing("build-etcd", t)
	return a, nil
}

// prepareState creates the state and run directories, saves the cluster's
// state (with a new registry password) and makes the control plane's PKI.
func (r *runner) prepareState(a artifacts) (*clusterState, error) {
	l := r.l
	password, err := randomPassword()
	if err != nil {
		return nil, err
	}
	t := time.Now()
	st := &clusterState{
		KubernetesVersion: r.o.KubernetesVersion,
		ContainerdVersion: r.l.recordedContainerd(),
		APIPort:           r.o.APIPort,
		PauseBinary:       a.pauseBin,
		Registry:          &registryState{Version: DefaultRegistryVersion, HostPort: r.o.RegistryPort, Password: password},
		AbsentHostPaths:   absentHostPaths(),
	}
	for _, d := range []string{r.o.StateDir, r.o.RunDir, l.logs, l.pki, l.images} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(l.etcdDir, 0o700); err != nil {
		return nil, err
	}
	if err := l.saveState(st); err != nil {
		return nil, err
	}
	if err := r.controlPlanePKI(); err != nil {
		return nil, err
	}
	r.timing("pki", t)
	return st, nil
}

// startControlPlane starts the hub (its network namespace and init), etcd,
// kube-apiserver, the controller manager, the scheduler and the forwarders,
// and waits until the API server answers on the host port.
func (r *runner) startControlPlane(ctx context.Context, pauseBin string) (nsTarget, error) {
	l := r.l
	t := time.Now()
	if err := portFree(r.o.APIPort); err != nil {
		return nsTarget{}, fmt.Errorf("API port 127.0.0.1:%d is taken: %w", r.o.APIPort, err)
	}
	if err := r.setupHub(ctx); err != nil {
		return nsTarget{}, err
	}
	hubInit, err := r.startInit(ctx, l.node(1), pauseBin)
	if err != nil {
		return nsTarget{}, err
	}
	hub := nsTarget{InitPID: hubInit.PID, Netns: netnsPath(hubNetns)}
	r.timing("netns+init", t)

	t = time.Now()
	if _, err := r.startDaemon(procEtcd, hub, etcdArgs(l), false); err != nil {
		return hub, err
	}
	if err := r.waitEtcd(ctx); err != nil {
		return hub, err
	}
	r.timing("etcd", t)

	t = time.Now()
	if _, err := r.startDaemon(procAPIServer, hub, apiserverArgs(l), false); err != nil {
		return hub, err
	}
	if err := r.waitAPIServerInNetns(ctx); err != nil {
		return hub, err
	}
	r.timing("kube-apiserver", t)

	t = time.Now()
	for _, d := range []struct {
		name string
		argv []string
	}{{procCM, controllerManagerArgs(l)}, {procScheduler, schedulerArgs(l)}, {procSockFwd, sockForwarderArgs(l)}} {
		if _, err := r.startDaemon(d.name, hub, d.argv, false); err != nil {
			return hub, err
		}
	}
	if err := poll(ctx, 10*time.Second, 20*time.Millisecond, "API socket", func(context.Context) (bool, error) {
		st, err := os.Stat(l.apiSock)
		return err == nil && st.Mode()&os.ModeSocket != 0, err
	}); err != nil {
		return hub, err
	}
	if _, err := r.startDaemon(procHostFwd, nsTarget{}, hostForwarderArgs(l), false); err != nil {
		return hub, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", l.kubeconfig)
	if err != nil {
		return hub, err
	}
	cfg.Timeout = 5 * time.Second
	if err := poll(ctx, 30*time.Second, 100*time.Millisecond, "API server on the host port", func(ctx context.Context) (bool, error) {
		err := readyz(ctx, cfg)
		return err == nil, err
	}); err != nil {
		return hub, err
	}
	r.timing("controllers+forward", t)
	return hub, nil
}

// startRegistryWithImages starts the registry in the hub and pushes the
// base images to it.
func (r *runner) startRegistryWithImages(ctx context.Context, hub nsTarget, a artifacts, st *clusterState) error {
	t := time.Now()
	if err := portFree(r.o.RegistryPort); err != nil {
		return fmt.Errorf("registry port 127.0.0.1:%d is taken: %w", r.o.RegistryPort, err)
	}
	if err := r.startRegistry(ctx, hub, a.registryBin, st.Registry); err != nil {
		return err
	}
	r.timing("registry", t)
	reg, err := (&Cluster{r: r}).Registry()
	if err != nil {
		return err
	}
	for _, ref := range slices.Sorted(maps.Keys(a.images)) {
		t = time.Now()
		if _, err := pushImage(ctx, reg, ref, a.images[ref]); err != nil {
			return err
		}
		r.timing("push "+ref, t)
	}
	return nil
}

// startNodes adds nodes until there are Options.Nodes and waits until each
// is Ready.
func (r *runner) startNodes(ctx context.Context, st *clusterState) error {
	t := time.Now()
	for len(st.Nodes) < r.o.Nodes {
		if _, err := r.addNode(ctx, st); err != nil {
			return err
		}
	}
	cs, err := r.clientset()
	if err != nil {
		return err
	}
	for _, i := range st.Nodes {
		if err := waitNodeReady(ctx, cs, nodeName(i), 2*time.Minute); err != nil {
			return err
		}
	}
	r.timing("nodes-ready", t)
	return nil
}

// seedObjects waits for the default ServiceAccount and creates the
// baseline namespace the tests use.
func (r *runner) seedObjects(ctx context.Context) error {
	t := time.Now()
	cs, err := r.clientset()
	if err != nil {
		return err
	}
	if err := poll(ctx, 90*time.Second, 200*time.Millisecond, "default ServiceAccount", func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	}); err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: BaselineNamespace,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	r.timing("serviceaccount+namespace", t)
	r.logf("cluster up: nodes %v, KUBECONFIG=%s, logs %s", (&Cluster{r: r}).Nodes(), r.l.kubeconfig, r.l.logs)
	return nil
}

func (r *runner) controlPlanePKI() error {
	l := r.l
	c, err := ensureCA(l.pki)
	if err != nil {
		return err
	}
	if err := ensureServiceAccountKey(l.pki); err != nil {
		return err
	}
	for _, s := range controlPlaneCerts(l) {
		if err := c.ensureCert(l.pki, s); err != nil {
			return err
		}
	}
	if err := writeFileAtomic(l.auditPolicyFile(), []byte(auditPolicy), 0o644); err != nil {
		return err
	}
	inside := "https://127.0.0.1:" + strconv.Itoa(hubAPIPort)
	for _, k := range []struct{ file, server, cert string }{
		{l.kubeconfig, "https://127.0.0.1:" + strconv.Itoa(r.o.APIPort), "admin"},
		{filepath.Join(l.pki, "controller-manager.kubeconfig"), inside, "controller-manager"},
		{filepath.Join(l.pki, "scheduler.kubeconfig"), inside, "scheduler"},
	} {
		if err := writeKubeconfig(k.file, l.pki, k.server, k.cert); err != nil {
			return err
		}
	}
	return nil
}

// waitEtcd polls etcd's /health inside the hub namespace.
func (r *runner) waitEtcd(ctx context.Context) error {
	dial := netnsDialer(netnsPath(hubNetns))
	return poll(ctx, 30*time.Second, 100*time.Millisecond, "etcd", func(ctx context.Context) (bool, error) {
		c, err := dial(ctx, "tcp", "127.0.0.1:2379")
		if err != nil {
			return false, err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte("GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")); err != nil {
			return false, err
		}
		buf := make([]byte, 4096)
		var resp []byte
		for {
			n, err := c.Read(buf)
			resp = append(resp, buf[:n]...)
			if err != nil {
				break
			}
		}
		if !strings.Contains(string(resp), `"health":"true"`) {
			return false, fmt.Errorf("etcd /health: %q", lastBytes(resp, 200))
		}
		return true, nil
	})
}

// waitAPIServerInNetns polls /readyz on 127.0.0.1:6443 inside the hub namespace.
func (r *runner) waitAPIServerInNetns(ctx context.Context) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", r.l.kubeconfig)
	if err != nil {
		return err
	}
	cfg.Host = "https://127.0.0.1:" + strconv.Itoa(hubAPIPort)
	cfg.Dial = netnsDialer(netnsPath(hubNetns))
	cfg.Timeout = 5 * time.Second
	return poll(ctx, 90*time.Second, 200*time.Millisecond, "kube-apiserver /readyz", func(ctx context.Context) (bool, error) {
		err := readyz(ctx, cfg)
		return err == nil, err
	})
}

func waitNodeReady(ctx context.Context, cs kubernetes.Interface, name string, timeout time.Duration) error {
	return poll(ctx, timeout, 200*time.Millisecond, "node "+name+" Ready", func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == corev1.ConditionTrue {
					return true, nil
				}
				return false, fmt.Errorf("Ready=%s: %s", c.Status, c.Message)
			}
		}
		return false, nil
	})
}
