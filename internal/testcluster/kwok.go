package testcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// KwokOptions configures the kwok controller (sigs.k8s.io/kwok) that StartKwok runs
// against the test cluster's API server. kwok simulates nodes and the pods bound to
// them: no kubelet, no containers, only API objects. The zero value is valid.
type KwokOptions struct {
	// Heartbeat makes kwok hold a Lease per simulated node and renew it every 10 s
	// (lease duration 40 s, as a kubelet does), plus a node status update every 10-20
	// minutes (kwok's node-heartbeat-with-lease stage). Default off, because 5,000
	// heartbeating nodes are too heavy for this 2-core machine: 500 lease updates/s,
	// with which the API server, etcd, kwok and kube-controller-manager need more than
	// twice the CPU they need without, when nothing else happens.
	//
	// Without heartbeats nothing renews a simulated node's status, so
	// kube-controller-manager's node lifecycle controller may set its Ready condition
	// to Unknown (and taint it node.kubernetes.io/unreachable:NoSchedule) once its last
	// status update is older than the controller's --node-monitor-grace-period (50 s);
	// kwok's node-initialize stage then sets Ready=True again within milliseconds, and
	// the controller removes the taint. A simulated node is thus Ready except for short
	// blips about once a minute (with thousands of nodes the controller gets round to
	// them less often). Code that filters nodes on Ready or times NotReady periods
	// should tolerate such blips, or use Heartbeat.
	Heartbeat bool

	// PodCompleteAfter is how long a nodeexec pod (label KwokPodLabel=KwokPodLabelValue)
	// runs on a simulated node: that long after kwok has made it Running, it ends
	// Succeeded with every container terminated with exit code 0, reason Completed.
	// Default 1s.
	PodCompleteAfter time.Duration

	// PodStartDelay, when non-zero, replaces the delays of kwok's stock pod-create
	// stage (the pod gets its IP) and pod-ready stage (it is Running): each waits
	// between PodStartDelay and twice that instead of between 1 and 5 s, so a
	// nodeexec pod ends PodCompleteAfter after 2-4 PodStartDelays rather than 2-10 s
	// after it was created. Default 0: kwok's stock delays. At least 1ms when set.
	PodStartDelay time.Duration

	// FailNodes are names of simulated nodes on which nodeexec pods end Failed
	// instead, every container terminated with exit code 1, reason Error.
	FailNodes []string

	// Version of sigs.k8s.io/kwok, built from the Go module proxy. Default
	// DefaultKwokVersion.
	Version string

	// Exec makes the simulated nodes answer exec, attach, logs and port-forward
	// through the API server, as a kubelet does (see kwok_exec.go): every simulated
	// node's kubelet endpoint is kwok's own TLS server (InternalIP 10.252.0.1, port
	// 10250), which runs the command of an exec (a real exit code, stdin, the
	// container's literal env values plus KwokEnvNodeName, KwokEnvPodName and
	// KwokEnvPodNamespace) in a sandbox of its own, never in the host's namespaces
	// (KwokSandboxHostname), and forwards every port-forward to one real `nodeexec
	// agent serve` in that sandbox (KwokAgentPort). nodeexec's pods that wait for
	// an exec (the nsenter and runtime agents' `agent hold`, the debug pod's
	// `sleep`) stay Running until deleted; the run-to-completion pods of the
	// watcher keep PodCompleteAfter and FailNodes. Needs AgentBinary and a kwok
	// built with this package's patches (the default Version). Default off.
	Exec bool

	// AgentBinary is the static nodeexec binary (make build: bin/nodeexec) that
	// Exec puts at /usr/local/bin/nodeexec in the sandbox, where the agent image
	// has it; it is copied into kwok's state directory, and a changed binary
	// restarts kwok. Required with Exec, ignored without.
	AgentBinary string
}

// Simulated nodes and pods.
const (
	DefaultKwokVersion          = "v0.8.0"
	DefaultKwokPodCompleteAfter = time.Second

	// KwokNodePrefix is followed by the node number: "kwok-node-1".
	KwokNodePrefix = "kwok-node-"
	// KwokNodeSelector selects the simulated nodes; kwok manages only nodes with this
	// label. They also carry the annotation and the NoSchedule taint
	// kwok.x-k8s.io/node=fake.
	KwokNodeSelector = kwokNodeLabel + "=" + kwokNodeLabelValue
	// KwokPodLabel=KwokPodLabelValue marks the pods whose end the simulated nodes
	// decide (see KwokOptions.PodCompleteAfter and FailNodes). Other pods on
	// simulated nodes follow kwok's stock stages: they run until deleted (Job pods
	// complete).
	KwokPodLabel      = "app.kubernetes.io/managed-by"
	KwokPodLabelValue = "nodeexec"

	kwokNodeLabel      = "type"
	kwokNodeLabelValue = "kwok"
	kwokFakeKey        = "kwok.x-k8s.io/node"
	kwokModule         = "sigs.k8s.io/kwok"

	procKwok = "kwok"
	// Inside the hub network namespace: kwok's own HTTP server (health, logs), the
	// address simulated nodes report, and the pool their pod IPs come from (none of
	// them routed anywhere; see the address plan in options.go).
	kwokServerAddr = "127.0.0.1:10247"
	kwokNodeIP     = "10.252.0.1"
	kwokPodCIDR    = "10.246.0.0/16"
	// heartbeat lease duration (kwok renews every quarter of it, like a kubelet)
	kwokLeaseSeconds = 40
	// parallel workers inside kwok (its default is 4 per kind)
	kwokParallelism = 16

	// kwokClientQPS and kwokWorkers are used to create and delete simulated nodes.
	kwokClientQPS = 1000
	kwokWorkers   = 32
)

// Kwok is a handle on the kwok controller of a test cluster. Its methods may be
// called from several goroutines.
type Kwok struct {
	c  *Cluster
	o  KwokOptions
	cs kubernetes.Interface // high QPS, protobuf
}

var kwokVersionRE = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

// resolve fills in the defaults and returns FailNodes sorted and deduplicated (so
// that equal options compare equal).
func (o KwokOptions) resolve() (KwokOptions, error) {
	if o.Version == "" {
		o.Version = DefaultKwokVersion
	}
	if !strings.HasPrefix(o.Version, "v") {
		o.Version = "v" + o.Version
	}
	if !kwokVersionRE.MatchString(o.Version) {
		return o, fmt.Errorf("testcluster: kwok Version must look like v0.8.0, got %q", o.Version)
	}
	if o.PodCompleteAfter == 0 {
		o.PodCompleteAfter = DefaultKwokPodCompleteAfter
	}
	if o.PodCompleteAfter < time.Millisecond {
		return o, fmt.Errorf("testcluster: kwok PodCompleteAfter must be at least 1ms, got %s", o.PodCompleteAfter)
	}
	if o.PodStartDelay < 0 || (o.PodStartDelay > 0 && o.PodStartDelay < time.Millisecond) {
		return o, fmt.Errorf("testcluster: kwok PodStartDelay must be 0 (kwok's delays) or at least 1ms, got %s", o.PodStartDelay)
	}
	fail := slices.Clone(o.FailNodes)
	for _, n := range fail {
		if n == "" || strings.ContainsAny(n, " \t\n,\"'") {
			return o, fmt.Errorf("testcluster: kwok FailNodes: invalid node name %q", n)
		}
	}
	slices.Sort(fail)
	o.FailNodes = slices.Compact(fail)
	if len(o.FailNodes) == 0 {
		o.FailNodes = nil
	}
	if !o.Exec {
		o.AgentBinary = ""
	} else {
		if o.AgentBinary == "" {
			return o, errors.New("testcluster: kwok Exec needs AgentBinary: give the path of a static nodeexec binary (make build: bin/nodeexec)")
		}
		abs, err := filepath.Abs(o.AgentBinary)
		if err != nil {
			return o, fmt.Errorf("testcluster: kwok AgentBinary: %w", err)
		}
		o.AgentBinary = abs
	}
	return o, nil
}

// KwokNodeName is the name of simulated node i (1-based).
func KwokNodeName(i int) string { return KwokNodePrefix + strconv.Itoa(i) }

// StartKwok builds kwok (once; cached in CacheDir/kwok/<version>), writes its
// configuration and starts it inside the cluster's hub network namespace, talking
// to the API server directly. It is a recorded process ("kwok"), so Stop and
// `testcluster down` stop it like every other component. kwok manages only nodes
// labelled KwokNodeSelector; create them with CreateNodes.
//
// A kwok started by an earlier StartKwok with the same options is reused; one with
// other options is stopped (by its recorded PID) and started again with the new
// ones. Simulated nodes and pods are left alone either way; their node leases are
// deleted before a kwok starts (a lease held by the old process would keep the new
// one off its node for the lease duration).
//
// kwok's stages come from its module source: node/fast/node-initialize, with
// Heartbeat node/heartbeat-with-lease, the pod/general stages (a new pod gets its IP
// 1-5 s after it was created, and is Running 1-5 s later) and two stages of ours
// that end nodeexec pods (see KwokOptions). The stock pod-complete stage is told to
// leave nodeexec pods alone, and pod-delete ended pods (the API server removes those
// itself). kwok is built from a copy of its module source with one line changed
// (see kwokWatchPatch): stock kwok v0.8.0 cannot keep a watch open on this cluster.
func (c *Cluster) StartKwok(ctx context.Context, o KwokOptions) (*Kwok, error) {
	o, err := o.resolve()
	if err != nil {
		return nil, err
	}
	r := c.r
	unlock, err := lockCache(ctx, r.l, r.logf)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, err := r.attach(ctx); err != nil {
		return nil, err
	}
	t0 := time.Now()
	bin, modDir, patched, err := r.kwokBinary(ctx, o.Version)
	if err != nil {
		return nil, fmt.Errorf("testcluster: kwok: %w", err)
	}
	if o.Exec && !patched {
		return nil, fmt.Errorf("testcluster: kwok Exec needs kwok built with this package's patches, which do not apply to kwok %s: use %s", o.Version, DefaultKwokVersion)
	}
	if o.Exec {
		if err := checkAgentBinary(o.AgentBinary); err != nil {
			return nil, err
		}
	}
	stages, err := readKwokStages(modDir, o.Heartbeat)
	if err != nil {
		return nil, fmt.Errorf("testcluster: kwok: %w", err)
	}
	config, err := kwokConfig(stages, o)
	if err != nil {
		return nil, fmt.Errorf("testcluster: kwok: %w", err)
	}
	dir := r.l.kwokStateDir()
	argv := kwokArgs(bin, dir, o)
	agentSum := ""
	if o.Exec {
		if agentSum, err = fileSHA256(o.AgentBinary); err != nil {
			return nil, fmt.Errorf("testcluster: kwok AgentBinary: %w", err)
		}
	}
	fp := kwokFingerprint(append(slices.Clone(argv), agentSum), config)
	k, err := c.kwokHandle(o)
	if err != nil {
		return nil, err
	}

	rec, err := r.l.readProc(procKwok)
	running := err == nil && rec.alive()
	if running {
		if old, err := os.ReadFile(filepath.Join(dir, "fingerprint")); err == nil && string(old) == fp {
			r.logf("reusing kwok (pid %d)", rec.PID)
			return k, nil
		}
		r.logf("kwok runs with other options: restarting it")
	}
	// the sandbox and its agent too: they hold the old binaries
	r.stopProcs(10*time.Second, procKwok, procKwokAgent)
	r.stopProcs(10*time.Second, procKwokSandbox)
	// node leases are held by a kwok process (its identity is random per process):
	// a new kwok would not manage a node, nor its pods, until the old holder's lease
	// expired
	if err := k.deleteLeases(ctx); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("testcluster: kwok: %w", err)
	}
	if err := writeKubeconfig(filepath.Join(dir, "kubeconfig"), r.l.pki, "https://127.0.0.1:"+strconv.Itoa(hubAPIPort), "admin"); err != nil {
		return nil, fmt.Errorf("testcluster: kwok: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, "config.yaml"), config, 0o644); err != nil {
		return nil, fmt.Errorf("testcluster: kwok: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, "options.json"), mustJSON(o), 0o644); err != nil {
		return nil, fmt.Errorf("testcluster: kwok: %w", err)
	}
	target := nsTarget{Netns: netnsPath(hubNetns)}
	forks := false
	if o.Exec {
		agent := filepath.Join(dir, "nodeexec")
		if err := copyFile(o.AgentBinary, agent); err != nil {
			return nil, fmt.Errorf("testcluster: kwok AgentBinary: %w", err)
		}
		if err := os.Chmod(agent, 0o755); err != nil {
			return nil, fmt.Errorf("testcluster: kwok AgentBinary: %w", err)
		}
		if err := r.kwokServingCert(dir); err != nil {
			return nil, fmt.Errorf("testcluster: kwok serving certificate: %w", err)
		}
		if err := r.ensureKwokNodeIP(ctx); err != nil {
			return nil, fmt.Errorf("testcluster: kwok node address: %w", err)
		}
		pause, err := r.buildPause(ctx)
		if err != nil {
			return nil, fmt.Errorf("testcluster: kwok sandbox: %w", err)
		}
		init, err := r.startKwokSandbox(ctx, agent, pause, bin)
		if err != nil {
			return nil, fmt.Errorf("testcluster: %w", err)
		}
		if _, err := r.startDaemon(procKwokAgent, nsTarget{}, inKwokSandbox(init, []string{kwokAgentPath, "agent", "serve",
			"--listen", "127.0.0.1:" + strconv.Itoa(KwokAgentPort)}), true); err != nil {
			r.stopProcs(5*time.Second, procKwokSandbox)
			return nil, fmt.Errorf("testcluster: %w", err)
		}
		argv = inKwokSandbox(init, argv)
		target, forks = nsTarget{}, true
	}
	if _, err := r.startDaemon(procKwok, target, argv, forks); err != nil {
		r.stopProcs(5*time.Second, procKwokAgent, procKwokSandbox)
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	if err := r.waitKwok(ctx, o.Exec); err != nil {
		r.stopProcs(5*time.Second, procKwok, procKwokAgent)
		r.stopProcs(5*time.Second, procKwokSandbox)
		return nil, fmt.Errorf("testcluster: %w (log %s: %s)", err, filepath.Join(r.l.logs, procKwok+".log"),
			tail(filepath.Join(r.l.logs, procKwok+".log"), 5))
	}
	if err := writeFileAtomic(filepath.Join(dir, "fingerprint"), []byte(fp), 0o644); err != nil {
		return nil, fmt.Errorf("testcluster: kwok: %w", err)
	}
	r.timing("kwok-start", t0)
	return k, nil
}

// AttachKwok returns a handle on the cluster's kwok whether it runs or not, with the
// options it was last started with (the defaults if it never was): enough to
// delete simulated nodes and stop kwok, as `testcluster kwok down` does.
func (c *Cluster) AttachKwok() (*Kwok, error) {
	o, _ := KwokOptions{}.resolve()
	if b, err := os.ReadFile(filepath.Join(c.r.l.kwokStateDir(), "options.json")); err == nil {
		var saved KwokOptions
		if json.Unmarshal(b, &saved) == nil {
			o = saved
		}
	}
	return c.kwokHandle(o)
}

func (c *Cluster) kwokHandle(o KwokOptions) (*Kwok, error) {
	cfg, err := c.RESTConfig()
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = kwokClientQPS, kwokClientQPS
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	return &Kwok{c: c, o: o, cs: cs}, nil
}

// Options returns the options kwok runs with (defaults filled in).
func (k *Kwok) Options() KwokOptions {
	o := k.o
	o.FailNodes = slices.Clone(o.FailNodes)
	return o
}

// PID returns the host PID of the running kwok, or 0.
func (k *Kwok) PID() int {
	rec, err := k.c.r.l.readProc(procKwok)
	if err != nil || !rec.alive() {
		return 0
	}
	return rec.PID
}

// Stop stops kwok (by its recorded PID), and with Exec its agent and sandbox. Simulated nodes stay; without kwok they go
// NotReady within a minute. Stop is idempotent.
func (k *Kwok) Stop(ctx context.Context) error {
	r := k.c.r
	unlock, err := lockCache(ctx, r.l, r.logf)
	if err != nil {
		return err
	}
	defer unlock()
	r.stopProcs(10*time.Second, procKwok, procKwokAgent)
	// the sandbox's init last: the kernel ends whatever is left in its PID namespace
	r.stopProcs(10*time.Second, procKwokSandbox)
	_ = os.Remove(filepath.Join(r.l.kwokStateDir(), "fingerprint"))
	return nil
}

// CreateNodes creates the simulated nodes kwok-node-1 ... kwok-node-<n> (existing
// ones are kept as they are) and waits until all of them are Ready; it returns their
// names. Each node has the labels type=kwok, kubernetes.io/hostname=<name>,
// kubernetes.io/os=linux and the given labels, the annotation and NoSchedule taint
// kwok.x-k8s.io/node=fake, and 32 CPUs, 256Gi memory and 110 pods as capacity and
// allocatable. The nodes are created by 32 workers of a client with QPS 1000.
func (k *Kwok) CreateNodes(ctx context.Context, n int, labels map[string]string) ([]string, error) {
	if n < 0 {
		return nil, fmt.Errorf("testcluster: CreateNodes: n = %d", n)
	}
	r := k.c.r
	names := make([]string, n)
	for i := range names {
		names[i] = KwokNodeName(i + 1)
	}
	t0 := time.Now()
	var created atomic.Int64
	err := forEach(ctx, kwokWorkers, len(names), func(ctx context.Context, i int) error {
		_, err := k.cs.CoreV1().Nodes().Create(ctx, kwokNode(names[i], labels), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("create node %s: %w", names[i], err)
		}
		created.Add(1)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	r.logf("created %d simulated nodes (%d existed already)", created.Load(), int64(n)-created.Load())
	r.timing(fmt.Sprintf("kwok-create-%d-nodes", n), t0)
	timeout := 5*time.Minute + time.Duration(n)*100*time.Millisecond
	if err := k.waitNodesReady(ctx, names, timeout); err != nil {
		return nil, fmt.Errorf("testcluster: %w (is kwok running? log %s)", err, filepath.Join(r.l.logs, procKwok+".log"))
	}
	r.timing(fmt.Sprintf("kwok-%d-nodes-ready", n), t0)
	return names, nil
}

// DeleteNodes deletes every simulated node (label type=kwok) with one
// DeleteCollection call (and one by one what that left: the API server gives up on
// a collection after 60 s), then force-deletes the pods still bound to them.
func (k *Kwok) DeleteNodes(ctx context.Context) error {
	r := k.c.r
	t0 := time.Now()
	nodes := k.cs.CoreV1().Nodes()
	list, err := nodes.List(ctx, metav1.ListOptions{LabelSelector: KwokNodeSelector})
	if err != nil {
		return fmt.Errorf("testcluster: list simulated nodes: %w", err)
	}
	names := map[string]bool{}
	for _, n := range list.Items {
		names[n.Name] = true
	}
	if len(names) > 0 {
		err := deleteAll(ctx, r.logf, "simulated nodes", func(ctx context.Context) error {
			return nodes.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: KwokNodeSelector})
		}, func(ctx context.Context) ([]string, error) {
			l, err := nodes.List(ctx, metav1.ListOptions{LabelSelector: KwokNodeSelector})
			if err != nil {
				return nil, err
			}
			var left []string
			for _, n := range l.Items {
				left = append(left, n.Name)
			}
			return left, nil
		}, func(ctx context.Context, name string) error {
			return nodes.Delete(ctx, name, metav1.DeleteOptions{})
		})
		if err != nil {
			return fmt.Errorf("testcluster: %w", err)
		}
	}
	r.timing(fmt.Sprintf("kwok-delete-%d-nodes", len(names)), t0)
	// their leases (Heartbeat): the garbage collector would take its time, and a node
	// created later under the same name would find a lease held by another kwok
	if err := k.deleteLeases(ctx); err != nil {
		return err
	}
	// pods bound to a simulated node: the pod garbage collector would get to them
	// only after its 40 s quarantine, and a node created later under the same name
	// would run them again
	pods, err := k.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName!="})
	if err != nil {
		return fmt.Errorf("testcluster: list pods: %w", err)
	}
	var bound []corev1.Pod
	for _, p := range pods.Items {
		if names[p.Spec.NodeName] || strings.HasPrefix(p.Spec.NodeName, KwokNodePrefix) {
			bound = append(bound, p)
		}
	}
	zero := int64(0)
	err = forEach(ctx, kwokWorkers, len(bound), func(ctx context.Context, i int) error {
		p := bound[i]
		err := k.cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	if len(bound) > 0 {
		r.logf("deleted %d pods bound to simulated nodes", len(bound))
	}
	return nil
}

// deleteLeases deletes the node leases of simulated nodes (kube-node-lease/kwok-node-*).
func (k *Kwok) deleteLeases(ctx context.Context) error {
	leases := k.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	l, err := leases.List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("testcluster: list node leases: %w", err)
	}
	var names []string
	for _, le := range l.Items {
		if strings.HasPrefix(le.Name, KwokNodePrefix) {
			names = append(names, le.Name)
		}
	}
	err = forEach(ctx, kwokWorkers, len(names), func(ctx context.Context, i int) error {
		if err := leases.Delete(ctx, names[i], metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete lease %s: %w", names[i], err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	if len(names) > 0 {
		k.c.r.logf("deleted %d leases of simulated nodes", len(names))
	}
	return nil
}

// deleteAll deletes a set of objects with one DeleteCollection call, then deletes
// whatever list still returns one by one (kwokWorkers at a time), and repeats that
// until list returns nothing. The API server deletes a collection one object after
// the other and ends the call after its request timeout (60 s): with thousands of
// objects on a busy machine the call fails ("stream error ... INTERNAL_ERROR")
// having deleted only part of them.
func deleteAll(ctx context.Context, logf func(string, ...any), what string, deleteCollection func(context.Context) error,
	list func(context.Context) ([]string, error), deleteOne func(ctx context.Context, name string) error) error {
	if err := deleteCollection(ctx); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("delete %s: %w", what, err)
		}
		logf("deleting %s as a collection: %v; deleting the rest one by one", what, err)
	}
	for round := 0; ; round++ {
		left, err := list(ctx)
		if err != nil {
			return fmt.Errorf("list %s: %w", what, err)
		}
		if len(left) == 0 {
			return nil
		}
		if round == 5 {
			return fmt.Errorf("delete %s: %d left after %d rounds (first %s)", what, len(left), round, left[0])
		}
		err = forEach(ctx, kwokWorkers, len(left), func(ctx context.Context, i int) error {
			if err := deleteOne(ctx, left[i]); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete %s: %w", left[i], err)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("delete %s: %w", what, err)
		}
	}
}

// waitNodesReady waits until every named node is Ready at the same time, from one
// list and a watch of the simulated nodes.
func (k *Kwok) waitNodesReady(ctx context.Context, names []string, timeout time.Duration) error {
	if len(names) == 0 {
		return nil
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	ready := map[string]bool{}
	var mu sync.Mutex // ready is read by the progress logger
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(15 * time.Second):
				mu.Lock()
				k.c.r.logf("%d of %d simulated nodes Ready", len(ready), len(want))
				mu.Unlock()
			}
		}
	}()
	nodes := k.cs.CoreV1().Nodes()
	err := listWatch(ctx, listWatchFuncs{
		list: func(ctx context.Context, o metav1.ListOptions) ([]runtime.Object, string, error) {
			o.LabelSelector = KwokNodeSelector
			l, err := nodes.List(ctx, o)
			if err != nil {
				return nil, "", err
			}
			objs := make([]runtime.Object, len(l.Items))
			for i := range l.Items {
				objs[i] = &l.Items[i]
			}
			return objs, l.ResourceVersion, nil
		},
		watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = KwokNodeSelector
			return nodes.Watch(ctx, o)
		},
	}, func() {
		mu.Lock()
		clear(ready)
		mu.Unlock()
	}, func(obj runtime.Object, deleted bool) bool {
		n, ok := obj.(*corev1.Node)
		if !ok || !want[n.Name] {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		if !deleted && nodeIsReady(n) {
			ready[n.Name] = true
		} else {
			delete(ready, n.Name)
		}
		return len(ready) == len(want)
	})
	if err != nil {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Errorf("waiting for %d simulated nodes to be Ready (%d are): %w", len(want), len(ready), err)
	}
	return nil
}

func nodeIsReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// kwokNode is a simulated node's object as CreateNodes creates it.
func kwokNode(name string, extra map[string]string) *corev1.Node {
	labels := map[string]string{}
	for k, v := range extra {
		labels[k] = v
	}
	labels[kwokNodeLabel] = kwokNodeLabelValue
	labels[corev1.LabelHostname] = name
	labels[corev1.LabelOSStable] = "linux"
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      labels,
			Annotations: map[string]string{kwokFakeKey: "fake"},
		},
		Spec: corev1.NodeSpec{
			Taints: []corev1.Taint{{Key: kwokFakeKey, Value: "fake", Effect: corev1.TaintEffectNoSchedule}},
		},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res.DeepCopy()},
	}
}

// forEach calls f(i) for i in [0, n) from `workers` goroutines; the first error
// stops the others and is returned.
func forEach(ctx context.Context, workers, n int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func mustJSON(v any) []byte {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}
