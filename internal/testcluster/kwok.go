package testcluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
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
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
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

	// FailNodes are names of simulated nodes on which nodeexec pods end Failed
	// instead, every container terminated with exit code 1, reason Error.
	FailNodes []string

	// Version of sigs.k8s.io/kwok, built from the Go module proxy. Default
	// DefaultKwokVersion.
	Version string
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
	bin, modDir, err := r.kwokBinary(ctx, o.Version)
	if err != nil {
		return nil, fmt.Errorf("testcluster: kwok: %w", err)
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
	fp := kwokFingerprint(argv, config)
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
		r.stopProcs(10*time.Second, procKwok)
	}
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
	if _, err := r.startDaemon(procKwok, nsTarget{Netns: netnsPath(hubNetns)}, argv, false); err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	if err := r.waitKwok(ctx); err != nil {
		r.stopProcs(5*time.Second, procKwok)
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

// Stop stops kwok (by its recorded PID). Simulated nodes stay; without kwok they go
// NotReady within a minute. Stop is idempotent.
func (k *Kwok) Stop(ctx context.Context) error {
	r := k.c.r
	unlock, err := lockCache(ctx, r.l, r.logf)
	if err != nil {
		return err
	}
	defer unlock()
	r.stopProcs(10*time.Second, procKwok)
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

// RawPodRate measures how fast the cluster runs one pod per node on simulated
// nodes, without any controller: it creates a nodeexec pod (label
// KwokPodLabel=KwokPodLabelValue, spec.nodeName set, restartPolicy Never, tolerating
// every taint, command sh -c true) for each of nodes in namespace (which must exist
// and have its default ServiceAccount), with a client of QPS 1000 and burst 1000
// (JSON, as client-go's default) and `workers` goroutines, and waits until every pod
// has ended (Succeeded; Failed on KwokOptions.FailNodes). created is the time until
// the last create returned, completed the time until the last pod ended, both from
// the first create; len(nodes)/completed is the rate. The pods are deleted before
// RawPodRate returns (also on error). It includes kwok's stage delays: a pod is
// Running 2-10 s after it was created (pod/general stages), and ends
// PodCompleteAfter later.
func (k *Kwok) RawPodRate(ctx context.Context, namespace string, nodes []string, workers int) (created, completed time.Duration, err error) {
	if workers < 1 {
		workers = 1
	}
	cfg, err := k.c.RESTConfig()
	if err != nil {
		return 0, 0, err
	}
	cfg.QPS, cfg.Burst = 1000, 1000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 0, 0, fmt.Errorf("testcluster: %w", err)
	}
	run := randomSuffix()
	sel := "nodeexec.io/raw-pod-rate=" + run
	pods := cs.CoreV1().Pods(namespace)
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		defer cancel()
		if derr := deletePodsAndWait(cctx, pods, sel); derr != nil && err == nil {
			err = derr
		}
	}()

	// watch from before the first create, so that no pod's end is missed
	timeout := 5*time.Minute + time.Duration(len(nodes))*100*time.Millisecond
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ended := make(chan error, 1)
	var t0 time.Time
	var endAt atomic.Int64
	synced := make(chan struct{})
	go func() {
		ended <- waitPodsEnded(wctx, pods, sel, len(nodes), synced, func() { endAt.Store(time.Now().UnixNano()) })
	}()
	select {
	case <-synced:
	case err := <-ended:
		return 0, 0, fmt.Errorf("testcluster: RawPodRate: %w", err)
	}

	t0 = time.Now()
	err = forEach(ctx, workers, len(nodes), func(ctx context.Context, i int) error {
		_, err := pods.Create(ctx, rawRatePod(nodes[i], run), metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create pod on %s: %w", nodes[i], err)
		}
		return nil
	})
	created = time.Since(t0)
	if err != nil {
		return created, 0, fmt.Errorf("testcluster: RawPodRate: %w", err)
	}
	if err := <-ended; err != nil {
		return created, 0, fmt.Errorf("testcluster: RawPodRate: %w", err)
	}
	completed = time.Duration(endAt.Load() - t0.UnixNano())
	k.c.r.logf("RawPodRate: %d pods created in %s, all ended after %s: %.1f pods/s", len(nodes),
		created.Round(time.Millisecond), completed.Round(time.Millisecond), float64(len(nodes))/completed.Seconds())
	return created, completed, nil
}

func rawRatePod(node, run string) *corev1.Pod {
	no := false
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "raw-pod-rate-",
			Labels:       map[string]string{KwokPodLabel: KwokPodLabelValue, "nodeexec.io/raw-pod-rate": run},
		},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: new(int64),
			AutomountServiceAccountToken:  &no,
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name: "c", Image: BusyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"sh", "-c", "true"},
			}},
		},
	}
}

// waitPodsEnded waits until n pods matching sel have ended (Succeeded or Failed);
// synced is closed once the initial list is in, and mark is called when the n-th
// pod is seen ending.
func waitPodsEnded(ctx context.Context, pods podLister, sel string, n int, synced chan struct{}, mark func()) error {
	var ended map[string]bool
	listed := false
	err := listWatch(ctx, listWatchFuncs{
		list: func(ctx context.Context, o metav1.ListOptions) ([]runtime.Object, string, error) {
			o.LabelSelector = sel
			l, err := pods.List(ctx, o)
			if err != nil {
				return nil, "", err
			}
			objs := make([]runtime.Object, len(l.Items))
			for i := range l.Items {
				objs[i] = &l.Items[i]
			}
			if !listed {
				listed = true
				defer close(synced)
			}
			return objs, l.ResourceVersion, nil
		},
		watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			return pods.Watch(ctx, o)
		},
	}, func() { ended = map[string]bool{} }, func(obj runtime.Object, deleted bool) bool {
		p, ok := obj.(*corev1.Pod)
		if !ok || deleted || ended[p.Name] {
			return false
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			ended[p.Name] = true
			if len(ended) == n {
				mark()
				return true
			}
		}
		return false
	})
	if err != nil {
		return fmt.Errorf("waiting for %d pods to end (%d ended): %w", n, len(ended), err)
	}
	return nil
}

type podLister interface {
	List(ctx context.Context, o metav1.ListOptions) (*corev1.PodList, error)
	Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error)
	Delete(ctx context.Context, name string, o metav1.DeleteOptions) error
	DeleteCollection(ctx context.Context, d metav1.DeleteOptions, o metav1.ListOptions) error
}

// deletePodsAndWait deletes the pods matching sel (ended pods go at once; running
// ones when kwok's pod-delete stage removes them) and waits until they are gone.
func deletePodsAndWait(ctx context.Context, pods podLister, sel string) error {
	err := deleteAll(ctx, func(string, ...any) {}, "pods "+sel, func(ctx context.Context) error {
		return pods.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel})
	}, func(ctx context.Context) ([]string, error) {
		l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return nil, err
		}
		var left []string
		for _, p := range l.Items {
			if p.DeletionTimestamp == nil {
				left = append(left, p.Name)
			}
		}
		return left, nil
	}, func(ctx context.Context, name string) error {
		return pods.Delete(ctx, name, metav1.DeleteOptions{})
	})
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	return poll(ctx, 5*time.Minute, 500*time.Millisecond, "pods "+sel+" gone", func(ctx context.Context) (bool, error) {
		l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: sel, Limit: 1})
		if err != nil {
			return false, err
		}
		return len(l.Items) == 0, nil
	})
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

// watchEvents hands w's events to handle until it returns true (done), the watch
// ends (ctx ended, or timed out: resume from *rv) or reports an error (restart).
func watchEvents(ctx context.Context, w watch.Interface, rv *string, last *error, handle func(obj runtime.Object, deleted bool) bool) (restart, done bool) {
	for {
		select {
		case <-ctx.Done():
			return false, false
		case ev, ok := <-w.ResultChan():
			if !ok {
				return false, false
			}
			if ev.Type == watch.Error {
				*last = apierrors.FromObject(ev.Object)
				return true, false
			}
			if m, err := meta.Accessor(ev.Object); err == nil && m.GetResourceVersion() != "" {
				*rv = m.GetResourceVersion()
			}
			if ev.Type != watch.Bookmark && handle(ev.Object, ev.Type == watch.Deleted) {
				return false, true
			}
		}
	}
}

type listWatchFuncs struct {
	list  func(ctx context.Context, o metav1.ListOptions) ([]runtime.Object, string, error)
	watch func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error)
}

// listWatch lists objects from the watch cache (resourceVersion 0) and watches from
// the list's resourceVersion, as an informer does, calling handle for every object
// (deleted for deletions) until it returns true. A watch that ends is resumed from
// the last resourceVersion seen; after a watch error it starts over (reset, list).
// Unlike an informer it makes no watch-list request: on this cluster those fail
// (etcd 3.4 lacks RequestWatchProgress), and so does a watch without a
// resourceVersion (served as one by kube-apiserver 1.37).
func listWatch(ctx context.Context, lw listWatchFuncs, reset func(), handle func(obj runtime.Object, deleted bool) bool) error {
	var last error
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				if last != nil {
					return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
				}
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}
		reset()
		objs, rv, err := lw.list(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			last = err
			continue
		}
		for _, o := range objs {
			if handle(o, false) {
				return nil
			}
		}
		for ctx.Err() == nil {
			w, err := lw.watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				last = err
				break
			}
			restart, done := watchEvents(ctx, w, &rv, &last, handle)
			w.Stop()
			if done {
				return nil
			}
			if restart {
				break
			}
		}
	}
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

// ---------------------------------------------------------------------------
// kwok's binary, configuration and process

func (l layout) kwokStateDir() string { return filepath.Join(l.o.StateDir, "kwok") }

// kwokArgs is kwok's command line. Its kubeconfig points at the API server inside
// the hub namespace (no socat hop).
func kwokArgs(bin, stateDir string, o KwokOptions) []string {
	argv := []string{bin,
		"--config=" + filepath.Join(stateDir, "config.yaml"),
		"--kubeconfig=" + filepath.Join(stateDir, "kubeconfig"),
		"--manage-all-nodes=false",
		"--manage-nodes-with-label-selector=" + KwokNodeSelector,
		"--node-ip=" + kwokNodeIP,
		"--cidr=" + kwokPodCIDR,
		"--server-address=" + kwokServerAddr,
		// one INFO line per patch is 25,000 lines for 5,000 nodes and their pods
		"--v=WARN",
	}
	if o.Heartbeat {
		argv = append(argv, "--node-lease-duration-seconds="+strconv.Itoa(kwokLeaseSeconds))
	}
	return argv
}

func kwokFingerprint(argv []string, config []byte) string {
	h := sha256.New()
	for _, a := range argv {
		h.Write([]byte(a))
		h.Write([]byte{0})
	}
	h.Write(config)
	return hex.EncodeToString(h.Sum(nil))
}

// waitKwok waits until kwok's HTTP server answers inside the hub namespace.
func (r *runner) waitKwok(ctx context.Context) error {
	dial := netnsDialer(netnsPath(hubNetns))
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: dial}}
	defer client.CloseIdleConnections()
	rec, _ := r.l.readProc(procKwok)
	return poll(ctx, 30*time.Second, 100*time.Millisecond, "kwok /healthz", func(ctx context.Context) (bool, error) {
		if !rec.alive() {
			return false, errors.New("kwok exited")
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+kwokServerAddr+"/healthz", nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("kwok /healthz: %s", resp.Status)
	})
}

// kwokWatchPatch is the one-line change kwok is built with.
//
// kwok's informers (pkg/utils/informer) force resourceVersion=0 on every request,
// watches included. kube-apiserver 1.37 (WatchList on by default) turns a watch from
// resourceVersion 0 with allowWatchBookmarks into a watch-list stream
// (sendInitialEvents=true), which needs etcd's RequestWatchProgress; Debian's etcd
// 3.4 lacks it, so every such watch ends at once with "a watch stream was requested
// by the client but the required storage feature RequestWatchProgress is disabled".
// Stock kwok then sees changes only when its reflectors re-list, backing off up to
// 30 s: nodes and pods move through their stages seconds to tens of seconds late.
// With the patch a watch resumes from the resourceVersion its reflector passes (as
// every client-go informer does); lists still read resourceVersion 0 (the watch
// cache).
var kwokWatchPatch = struct{ file, old, new string }{
	file: "pkg/utils/informer/event.go",
	old:  "\tif !o.EnableListPager || o.EnableStreamWatch {\n\t\topts.ResourceVersion = \"0\"\n",
	new:  "\tif (!o.EnableListPager || o.EnableStreamWatch) && opts.ResourceVersion == \"\" {\n\t\topts.ResourceVersion = \"0\"\n",
}

// kwokBinary returns the kwok binary for version, building it if it is not in the
// cache, and the directory of kwok's module source (Stage YAMLs). The source comes
// from the Go module proxy (`go mod download`); the build is CGO_ENABLED=0 with the
// cluster's Go build cache. If kwokWatchPatch applies to the version, the binary is
// built from a patched copy of the source (`go build ./cmd/kwok` in it, with kwok's
// own go.mod and go.sum); otherwise it is `go install sigs.k8s.io/kwok/cmd/kwok@version`.
func (r *runner) kwokBinary(ctx context.Context, version string) (bin, modDir string, err error) {
	goBin, err := goTool()
	if err != nil {
		return "", "", err
	}
	base := filepath.Join(r.o.CacheDir, "kwok", version)
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", "", err
	}
	env := []string{"GOCACHE=" + r.l.gocache, "GOFLAGS=-mod=mod -buildvcs=false", "CGO_ENABLED=0", "GOWORK=off"}
	out, err := runEnv(ctx, env, base, goBin, "mod", "download", "-json", kwokModule+"@"+version)
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal([]byte(out), &info); jerr != nil || info.Dir == "" {
		return "", "", fmt.Errorf("go mod download %s@%s: %v %v %s", kwokModule, version, err, jerr, info.Error)
	}
	orig, err := os.ReadFile(filepath.Join(info.Dir, kwokWatchPatch.file))
	if err != nil {
		return "", "", err
	}
	if !bytes.Contains(orig, []byte(kwokWatchPatch.old)) {
		bin = filepath.Join(base, "kwok")
		if commandExists(bin) {
			return bin, info.Dir, nil
		}
		r.logf("warning: kwok %s: %s changed, building kwok unpatched (its watches may fail on this cluster)", version, kwokWatchPatch.file)
		t := time.Now()
		r.logf("building kwok %s (about 1.5 minutes with a cold build cache)", version)
		if _, err := runEnv(ctx, append(env, "GOBIN="+base), base, goBin, "install", "-trimpath", "-ldflags", "-s -w",
			kwokModule+"/cmd/kwok@"+version); err != nil {
			return "", "", err
		}
		r.timing("build-kwok", t)
		return bin, info.Dir, nil
	}
	patched := bytes.Replace(orig, []byte(kwokWatchPatch.old), []byte(kwokWatchPatch.new), 1)
	sum := sha256.Sum256(patched)
	bin = filepath.Join(base, "kwok-"+hex.EncodeToString(sum[:6]))
	if commandExists(bin) {
		return bin, info.Dir, nil
	}
	t := time.Now()
	r.logf("building kwok %s with the watch patch (about 1.5 minutes with a cold build cache)", version)
	src := filepath.Join(base, "src")
	if err := os.RemoveAll(src); err != nil {
		return "", "", err
	}
	if err := copyTree(info.Dir, src); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(filepath.Join(src, kwokWatchPatch.file), patched, 0o644); err != nil {
		return "", "", err
	}
	if _, err := runEnv(ctx, env, src, goBin, "build", "-trimpath", "-ldflags", "-s -w", "-o", bin+".tmp", "./cmd/kwok"); err != nil {
		return "", "", err
	}
	if err := os.Rename(bin+".tmp", bin); err != nil {
		return "", "", err
	}
	_ = os.RemoveAll(src)
	r.timing("build-kwok", t)
	return bin, info.Dir, nil
}

// copyTree copies the regular files and directories under src to dst, writable
// (module cache files are read-only).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(target, b, 0o644)
		}
		return nil
	})
}

// kwokStageFiles are the Stage documents taken from kwok's module source
// (kustomize/stage/...), in this order.
func kwokStageFiles(heartbeat bool) []string {
	files := []string{"node/fast/node-initialize.yaml"}
	if heartbeat {
		files = append(files, "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml")
	}
	for _, s := range []string{"pod-create", "pod-init-container-running", "pod-init-container-completed",
		"pod-ready", "pod-complete", "pod-delete"} {
		files = append(files, "pod/general/"+s+".yaml")
	}
	return files
}

type kwokStage struct {
	file string
	doc  []byte
}

func readKwokStages(modDir string, heartbeat bool) ([]kwokStage, error) {
	var stages []kwokStage
	for _, f := range kwokStageFiles(heartbeat) {
		b, err := os.ReadFile(filepath.Join(modDir, "kustomize", "stage", f))
		if err != nil {
			return nil, err
		}
		stages = append(stages, kwokStage{f, b})
	}
	return stages, nil
}

// kwokConfig renders kwok's --config: a KwokConfiguration (more parallel workers),
// the stock stages (pod-complete changed to skip nodeexec pods, pod-delete to skip
// ended pods), and our stages that end nodeexec pods.
func kwokConfig(stock []kwokStage, o KwokOptions) ([]byte, error) {
	var docs [][]byte
	conf, err := yaml.Marshal(map[string]any{
		"apiVersion": "config.kwok.x-k8s.io/v1alpha1",
		"kind":       "KwokConfiguration",
		"options": map[string]any{
			"podPlayStageParallelism":  kwokParallelism,
			"nodePlayStageParallelism": kwokParallelism,
			"nodeLeaseParallelism":     kwokParallelism,
		},
	})
	if err != nil {
		return nil, err
	}
	docs = append(docs, conf)
	names := map[string]bool{}
	for _, s := range stock {
		var st map[string]any
		if err := yaml.Unmarshal(s.doc, &st); err != nil {
			return nil, fmt.Errorf("%s: %w", s.file, err)
		}
		if st["kind"] != "Stage" {
			return nil, fmt.Errorf("%s: kind %v, want Stage", s.file, st["kind"])
		}
		name, _, _ := unstructuredString(st, "metadata", "name")
		var expr map[string]any
		switch name {
		case "pod-complete":
			// its selector (Running, Ready, owned by a Job) could also match a nodeexec
			// pod; of two matching stages kwok picks one at random by weight
			expr = map[string]any{"key": `.metadata.labels["` + KwokPodLabel + `"]`, "operator": "NotIn", "values": []any{KwokPodLabelValue}}
		case "pod-delete":
			// the API server removes a Succeeded or Failed pod itself (grace period 0),
			// but first writes its deletionTimestamp; kwok would then try to delete the
			// pod too, usually after it is gone: one failed DELETE per pod
			expr = map[string]any{"key": ".status.phase", "operator": "NotIn", "values": []any{"Succeeded", "Failed"}}
		}
		if expr != nil {
			if err := appendMatchExpression(st, expr); err != nil {
				return nil, fmt.Errorf("%s: %w", s.file, err)
			}
		}
		names[name] = true
		b, err := yaml.Marshal(st)
		if err != nil {
			return nil, err
		}
		docs = append(docs, b)
	}
	for _, want := range []string{"node-initialize", "pod-create", "pod-ready", "pod-complete", "pod-delete"} {
		if !names[want] {
			return nil, fmt.Errorf("kwok's stage %s is missing", want)
		}
	}
	for _, st := range nodeexecStages(o) {
		b, err := yaml.Marshal(st)
		if err != nil {
			return nil, err
		}
		docs = append(docs, b)
	}
	return append([]byte("---\n"), bytes.Join(docs, []byte("---\n"))...), nil
}

func unstructuredString(m map[string]any, path ...string) (string, bool, error) {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return "", false, fmt.Errorf("%s is not an object", p)
		}
		cur, ok = mm[p]
		if !ok {
			return "", false, nil
		}
	}
	s, ok := cur.(string)
	return s, ok, nil
}

func appendMatchExpression(stage map[string]any, expr map[string]any) error {
	spec, ok := stage["spec"].(map[string]any)
	if !ok {
		return errors.New("no spec")
	}
	sel, ok := spec["selector"].(map[string]any)
	if !ok {
		return errors.New("no spec.selector")
	}
	exprs, _ := sel["matchExpressions"].([]any)
	sel["matchExpressions"] = append(exprs, expr)
	return nil
}

// nodeexecStages end nodeexec pods that kwok has made Running: Succeeded (exit code
// 0) after PodCompleteAfter, or Failed (exit code 1) on FailNodes. The two
// selectors exclude each other, and the stock stages match no Running nodeexec pod
// (pod-complete is changed by kwokConfig), so no two stages compete for a pod.
// Deleting a pod still works: a terminated pod is removed by the API server at
// once, a running one by the stock pod-delete stage.
func nodeexecStages(o KwokOptions) []map[string]any {
	base := []any{
		map[string]any{"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
		map[string]any{"key": ".status.phase", "operator": "In", "values": []any{"Running"}},
	}
	stage := func(name string, exprs []any, template string) map[string]any {
		return map[string]any{
			"apiVersion": "kwok.x-k8s.io/v1alpha1",
			"kind":       "Stage",
			"metadata":   map[string]any{"name": name},
			"spec": map[string]any{
				"resourceRef": map[string]any{"apiGroup": "v1", "kind": "Pod"},
				"selector": map[string]any{
					"matchLabels":      map[string]any{KwokPodLabel: KwokPodLabelValue},
					"matchExpressions": exprs,
				},
				"weight": 1,
				"delay":  map[string]any{"durationMilliseconds": o.PodCompleteAfter.Milliseconds()},
				"next":   map[string]any{"statusTemplate": template},
			},
		}
	}
	var fail []any
	for _, n := range o.FailNodes {
		fail = append(fail, n)
	}
	okExprs := slices.Clone(base)
	if len(fail) > 0 { // NotIn needs at least one value
		okExprs = append(okExprs, map[string]any{"key": ".spec.nodeName", "operator": "NotIn", "values": fail})
	}
	stages := []map[string]any{stage("nodeexec-pod-complete", okExprs, podEndTemplate(corev1.PodSucceeded, 0, "Completed", "PodCompleted"))}
	if len(fail) > 0 {
		failExprs := append(slices.Clone(base), map[string]any{"key": ".spec.nodeName", "operator": "In", "values": fail})
		stages = append(stages, stage("nodeexec-pod-fail", failExprs, podEndTemplate(corev1.PodFailed, 1, "Error", "PodFailed")))
	}
	return stages
}

// podEndTemplate is a kwok status template (Go text/template over the pod as JSON,
// applied as a strategic merge patch of the status) that ends the pod the way a
// kubelet does when its only run of each container exits.
func podEndTemplate(phase corev1.PodPhase, exitCode int, reason, condReason string) string {
	return `{{ $now := Now }}
{{ $root := . }}
conditions:
- lastProbeTime: null
  lastTransitionTime: {{ $now | Quote }}
  reason: ` + condReason + `
  status: "False"
  type: Ready
- lastProbeTime: null
  lastTransitionTime: {{ $now | Quote }}
  reason: ` + condReason + `
  status: "False"
  type: ContainersReady
containerStatuses:
{{ range .spec.containers }}
{{ $name := .name }}
{{ $started := $now }}
{{ range $root.status.containerStatuses }}{{ if eq .name $name }}{{ with .state }}{{ with .running }}{{ $started = .startedAt }}{{ end }}{{ end }}{{ end }}{{ end }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: ` + strconv.Itoa(exitCode) + `
      finishedAt: {{ $now | Quote }}
      reason: ` + reason + `
      startedAt: {{ $started | Quote }}
{{ end }}
phase: ` + string(phase) + `
`
}
