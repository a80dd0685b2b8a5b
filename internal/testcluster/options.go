package testcluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Options configures the test cluster. The zero value is valid: every field has a default.
type Options struct {
	// Nodes is the number of real nodes Start brings up (named "nodeexec-tc-1",
	// "nodeexec-tc-2", ...). Default 2. At most MaxNodes. When a running cluster is
	// reused and has fewer nodes, Start adds the missing ones; it never removes nodes.
	Nodes int

	// CacheDir holds everything worth keeping between runs: the Kubernetes binaries,
	// the Go build cache, helper binaries and image tarballs. Stop leaves it alone.
	// Default: $NODEEXEC_TC_CACHE if set, else /var/cache/nodeexec-testcluster.
	CacheDir string

	// StateDir holds the cluster's state: etcd data, PKI, containerd and kubelet
	// roots, logs and the admin kubeconfig. Stop removes it.
	// Default /var/lib/nodeexec-testcluster.
	StateDir string

	// RunDir holds PID files and unix sockets. Stop removes it.
	// Default /run/nodeexec-testcluster.
	RunDir string

	// KubernetesVersion of kube-apiserver, kube-controller-manager, kube-scheduler
	// and kubelet, built from the Go module proxy ("v" prefix optional).
	// Default "1.37.1".
	KubernetesVersion string

	// ContainerdVersion is the nodes' container runtime: "" (the default) is
	// Debian's packaged containerd 1.6 for a new cluster and whatever runs
	// for a reused one; "1.6" asks for Debian's explicitly; "2.x.y" builds
	// containerd, containerd-shim-runc-v2 and ctr from the Go module proxy
	// (github.com/containerd/containerd/v2) and the runc that release tests
	// with (github.com/opencontainers/runc), cached in
	// <CacheDir>/containerd/v2.x.y/bin. Other values, and a 2.x.y the proxy
	// does not serve, are refused before anything starts. See
	// docs/testcluster-runtimes.md.
	ContainerdVersion string

	// APIPort is the port on the host's 127.0.0.1 where the API server is reachable.
	// Default 16443.
	APIPort int

	// RegistryPort is the port on the host's 127.0.0.1 where the test registry is
	// reachable (see Cluster.Registry). Default DefaultRegistryHostPort (15000).
	RegistryPort int

	// Log receives progress lines, including "TIMING <step> <seconds>s" lines.
	// Default io.Discard.
	Log io.Writer
}

// Defaults and fixed names. The names are fixed so that only one nodeexec test
// cluster runs per machine; they are chosen not to collide with other local clusters.
const (
	DefaultNodes             = 2
	DefaultCacheDir          = "/var/cache/nodeexec-testcluster"
	DefaultStateDir          = "/var/lib/nodeexec-testcluster"
	DefaultRunDir            = "/run/nodeexec-testcluster"
	DefaultKubernetesVersion = "1.37.1"
	DefaultAPIPort           = 16443
	// CacheDirEnv overrides DefaultCacheDir when Options.CacheDir is empty.
	CacheDirEnv = "NODEEXEC_TC_CACHE"
	// MaxNodes is the highest node index the address plan supports.
	MaxNodes = 99

	// NodeNamePrefix is followed by the node index: "nodeexec-tc-1".
	NodeNamePrefix = "nodeexec-tc-"
	// PauseImage is the sandbox image every node's containerd uses.
	PauseImage = "nodeexec.local/pause:3.10"
	// ToolsImage is busybox-static with a symlink per applet, /etc/passwd, /etc/group, /tmp.
	ToolsImage = "nodeexec.local/tools:1"
	// BusyboxImage is the same image as ToolsImage under the name the nodeexec library
	// uses by default; containerd stores it as docker.io/library/busybox:stable.
	BusyboxImage = "busybox:stable"
	// BaselineNamespace is created with pod-security.kubernetes.io/enforce=baseline,
	// for tests of requests that Pod Security Admission must reject. All other
	// namespaces are "privileged" (no cluster default is configured).
	BaselineNamespace = "nodeexec-baseline"
)

// ErrNotRunning is wrapped by the errors Attach returns when no healthy cluster runs.
var ErrNotRunning = errors.New("nodeexec test cluster is not running")

var versionRE = regexp.MustCompile(`^v?([0-9]+)\.([0-9]+)\.([0-9]+)$`)

// resolve returns o with every default filled in, or an error if a value is invalid.
func (o Options) resolve() (Options, error) {
	if o.Nodes == 0 {
		o.Nodes = DefaultNodes
	}
	if o.Nodes < 1 || o.Nodes > MaxNodes {
		return o, fmt.Errorf("testcluster: Nodes must be between 1 and %d, got %d", MaxNodes, o.Nodes)
	}
	if o.CacheDir == "" {
		o.CacheDir = os.Getenv(CacheDirEnv)
	}
	if o.CacheDir == "" {
		o.CacheDir = DefaultCacheDir
	}
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir
	}
	if o.RunDir == "" {
		o.RunDir = DefaultRunDir
	}
	for _, d := range []struct{ name, path string }{{"CacheDir", o.CacheDir}, {"StateDir", o.StateDir}, {"RunDir", o.RunDir}} {
		if !filepath.IsAbs(d.path) || filepath.Clean(d.path) == "/" {
			return o, fmt.Errorf("testcluster: %s must be an absolute path other than /, got %q", d.name, d.path)
		}
	}
	o.CacheDir, o.StateDir, o.RunDir = filepath.Clean(o.CacheDir), filepath.Clean(o.StateDir), filepath.Clean(o.RunDir)
	if o.StateDir == o.RunDir || o.StateDir == o.CacheDir || o.RunDir == o.CacheDir {
		return o, fmt.Errorf("testcluster: CacheDir, StateDir and RunDir must differ")
	}
	if o.KubernetesVersion == "" {
		o.KubernetesVersion = DefaultKubernetesVersion
	}
	if err := checkKubernetesVersion("KubernetesVersion (--kubernetes-version)", o.KubernetesVersion); err != nil {
		return o, err
	}
	o.KubernetesVersion = strings.TrimPrefix(o.KubernetesVersion, "v")
	var err error
	if o.ContainerdVersion, err = resolveContainerdVersion(o.ContainerdVersion); err != nil {
		return o, err
	}
	if o.APIPort == 0 {
		o.APIPort = DefaultAPIPort
	}
	if o.APIPort < 1 || o.APIPort > 65535 {
		return o, fmt.Errorf("testcluster: APIPort out of range: %d", o.APIPort)
	}
	if o.RegistryPort == 0 {
		o.RegistryPort = DefaultRegistryHostPort
	}
	if o.RegistryPort < 1 || o.RegistryPort > 65535 || o.RegistryPort == o.APIPort {
		return o, fmt.Errorf("testcluster: RegistryPort must be a port other than APIPort, got %d", o.RegistryPort)
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	// unix socket paths are limited to 107 bytes; the longest one we make:
	if l := len(newLayout(o).node(MaxNodes).ContainerdSocket) + len(".ttrpc"); l > 107 {
		return o, fmt.Errorf("testcluster: RunDir %q is too long for unix socket paths", o.RunDir)
	}
	return o, nil
}

// k8sMinorPatch splits "1.37.1" into "37" and "1".
func k8sMinorPatch(version string) (minor, patch string) {
	m := versionRE.FindStringSubmatch(version)
	if m == nil {
		return "", ""
	}
	return m[2], m[3]
}

// Address plan. Everything below exists only inside network namespaces this
// package creates; nothing is added to the host's own network namespace.
const (
	hubNetns     = "nodeexec-tc" // node 1 and the control plane
	hubAPIPort   = 6443          // kube-apiserver port inside the hub namespace
	serviceCIDR  = "10.97.0.0/24"
	serviceIP    = "10.97.0.1" // the "kubernetes" Service
	clusterDNSIP = "10.97.0.10"
	nodeCIDR     = "10.251.0.0/24"
	podSupernet  = "10.245.0.0/16"
)

// nodeSpec describes node number Index (1-based).
type nodeSpec struct {
	Index            int
	Name             string // nodeexec-tc-<i>
	Netns            string // nodeexec-tc for node 1, nodeexec-tc-n<i> otherwise
	IP               string // 10.251.0.(10+i)
	PodCIDR          string // 10.245.<i>.0/24
	ContainerdSocket string // <run>/containerd-<name>.sock
	CgroupRoot       string // /<name>, pre-created in every cgroup hierarchy
	ContainerdDir    string // <state>/containerd-<name>: config, root
	ContainerdState  string // <run>/containerd-<name>: state, runc root
	KubeletDir       string // <state>/kubelet-<name>: config, root, logs
	CNIDir           string // <state>/cni-<name>: conf dir, host-local IPAM data
	HubVeth          string // hub end of the link to this node (i >= 2)
	NodeVeth         string // node end of the link to the hub (i >= 2)
}

func nodeName(i int) string { return NodeNamePrefix + strconv.Itoa(i) }

// nodeIndex is the inverse of nodeName.
func nodeIndex(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, NodeNamePrefix)
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	if err != nil || i < 1 || i > MaxNodes || strconv.Itoa(i) != s {
		return 0, false
	}
	return i, true
}

func netnsPath(name string) string { return "/run/netns/" + name }

// layout is every path derived from the resolved Options.
type layout struct {
	o          Options
	k8sDir     string // <cache>/k8s/v<version>
	k8sBin     string // <cache>/k8s/v<version>/bin
	gocache    string // <cache>/gocache
	binDir     string // <cache>/bin: helper binaries
	imagesDir  string // <cache>/images: base image tarballs
	lockFile   string // <cache>/.lock
	pki        string // <state>/pki
	logs       string // <state>/logs
	audit      string // <state>/logs/audit.log: kube-apiserver's audit log (auditPolicy)
	etcdDir    string // <state>/etcd
	images     string // <state>/images: copies of imported tarballs, for nodes added later
	stateFile  string // <state>/cluster.json
	sysctlFile string // <state>/sysctl.orig
	kubeconfig string // <state>/admin.kubeconfig (https://127.0.0.1:<APIPort>)
	apiSock    string // <run>/apiserver.sock
}

func newLayout(o Options) layout {
	return layout{
		o:          o,
		k8sDir:     filepath.Join(o.CacheDir, "k8s", "v"+o.KubernetesVersion),
		k8sBin:     filepath.Join(o.CacheDir, "k8s", "v"+o.KubernetesVersion, "bin"),
		gocache:    filepath.Join(o.CacheDir, "gocache"),
		binDir:     filepath.Join(o.CacheDir, "bin"),
		imagesDir:  filepath.Join(o.CacheDir, "images"),
		lockFile:   filepath.Join(o.CacheDir, ".lock"),
		pki:        filepath.Join(o.StateDir, "pki"),
		logs:       filepath.Join(o.StateDir, "logs"),
		audit:      filepath.Join(o.StateDir, "logs", "audit.log"),
		etcdDir:    filepath.Join(o.StateDir, "etcd"),
		images:     filepath.Join(o.StateDir, "images"),
		stateFile:  filepath.Join(o.StateDir, "cluster.json"),
		sysctlFile: filepath.Join(o.StateDir, "sysctl.orig"),
		kubeconfig: filepath.Join(o.StateDir, "admin.kubeconfig"),
		apiSock:    filepath.Join(o.RunDir, "apiserver.sock"),
	}
}

func (l layout) node(i int) nodeSpec {
	name := nodeName(i)
	n := nodeSpec{
		Index:            i,
		Name:             name,
		Netns:            hubNetns,
		IP:               fmt.Sprintf("10.251.0.%d", 10+i),
		PodCIDR:          fmt.Sprintf("10.245.%d.0/24", i),
		ContainerdSocket: filepath.Join(l.o.RunDir, "containerd-"+name+".sock"),
		CgroupRoot:       "/" + name,
		ContainerdDir:    filepath.Join(l.o.StateDir, "containerd-"+name),
		ContainerdState:  filepath.Join(l.o.RunDir, "containerd-"+name),
		KubeletDir:       filepath.Join(l.o.StateDir, "kubelet-"+name),
		CNIDir:           filepath.Join(l.o.StateDir, "cni-"+name),
	}
	if i > 1 {
		n.Netns = fmt.Sprintf("%s-n%d", hubNetns, i)
		n.HubVeth = fmt.Sprintf("nx%dh", i)
		n.NodeVeth = fmt.Sprintf("nx%dn", i)
	}
	return n
}

// auditPolicyFile holds auditPolicy, which kube-apiserver reads at start.
func (l layout) auditPolicyFile() string { return filepath.Join(l.pki, "audit-policy.yaml") }

// hubIP is node 1's address, where the API server listens for the kubelets.
func (l layout) hubIP() string { return l.node(1).IP }

func (l layout) k8sBinary(name string) string { return filepath.Join(l.k8sBin, name) }

// kubeBinaries are built from the Go module proxy.
func kubeBinaries() []string {
	return []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet"}
}

// isOurNetns reports whether a network namespace name is one this package creates.
func isOurNetns(name string) bool {
	if name == hubNetns {
		return true
	}
	s, ok := strings.CutPrefix(name, hubNetns+"-n")
	if !ok {
		return false
	}
	i, err := strconv.Atoi(s)
	return err == nil && i >= 2 && i <= MaxNodes && strconv.Itoa(i) == s
}
