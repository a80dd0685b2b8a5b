package watcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	batchinformers "k8s.io/client-go/informers/batch/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/backends"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// ErrLeadershipLost is returned by Start when another replica took the
// leader election lease while this one was running the rollouts; the
// process should exit (as controller-runtime managers do) and be restarted.
var ErrLeadershipLost = errors.New("watcher: leader election lost")

// LeaderElection configures leader election through a coordination.k8s.io
// Lease, so that of several replicas only one runs rollouts. RBAC: get and
// update on the Lease (resourceNames can name it), create on leases in
// Namespace.
type LeaderElection struct {
	// Namespace and Name of the Lease. Namespace is required; Name defaults
	// to "nodeexec-watcher".
	Namespace, Name string
	// Identity of this replica in the Lease. Defaults to hostname_<random>.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's
	// leaderelection timings. Default 15s, 10s and 2s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// DefaultSyncTimeout is the default of Options.SyncTimeout, as
// controller-runtime's CacheSyncTimeout.
const DefaultSyncTimeout = 2 * time.Minute

// stopGrace bounds how long Start waits, once its context ends, for the
// informers to stop: client-go's reflector sleeps out a backoff of up to
// 30s after a refused connection without looking at its context (watch-list
// path, client-go 1.35 to 1.37), and a stopped watcher must not wait for
// that. Informers still stopping after it finish on their own.
const stopGrace = 2 * time.Second

// DefaultPodBatchPeriod is the default of Options.PodBatchPeriod. At
// 5,000 SIMULATED nodes (make bench-watcher), reconciling on every pod
// event recorded 5 to 10 runs per reconcile, each reconcile paying its
// pass over every node.
const DefaultPodBatchPeriod = time.Second

// Options configure a Watcher.
type Options struct {
	// Client reads nodes and pods, creates and deletes run pods, patches
	// nodes (annotations, cordon, taints) and their status (each
	// NodeScript's condition), records Events and writes output records (for
	// NodeScripts with spec.recordOutput). Required.
	// RBAC (deploy/rbac.yaml): nodes get/list/watch/patch, nodes/status
	// patch; pods get/list/
	// watch in every namespace (the run pod informer; drain), create/delete
	// and pods/log get in the backends' namespaces; configmaps get/create/
	// update in the backends' namespaces (output records); pods/eviction
	// create and daemonsets get (drain), poddisruptionbudgets list (the
	// drain checks), pods delete (drain.onTimeout: Force); jobs get/list/watch
	// in every namespace and create/delete in the backends' namespaces
	// (spec.hooks); events create/patch in namespace
	// default (client-go records the Events of cluster-scoped objects, Nodes
	// and NodeScripts, there); leases when LeaderElection is set.
	Client kubernetes.Interface
	// Dynamic reads NodeScripts, writes their status, manages their
	// Finalizer and removes expired run-now overrides (nodescripts
	// get/list/watch/patch, nodescripts/status patch). Required.
	Dynamic dynamic.Interface
	// LeaderElection, when set, makes Start run rollouts only while this
	// replica holds the Lease. Nil runs without election (one replica).
	LeaderElection *LeaderElection
	// Metrics, when set, registers the watcher's Prometheus metrics (runs by
	// result, run duration histogram, nodes per phase, queue depth). Nil
	// keeps them unregistered.
	Metrics prometheus.Registerer
	// Workers is the number of NodeScripts reconciled at once. Defaults to 2.
	Workers int
	// CreateParallelism bounds the pod creates and node patches one
	// reconcile makes at once. Defaults to 16.
	CreateParallelism int
	// Resync requeues every NodeScript this often, besides reacting to
	// changes. Defaults to 30s.
	Resync time.Duration
	// PodBatchPeriod is how long a run pod's event (created, started,
	// finished, deleted) waits before it reconciles the pod's NodeScript,
	// so that the runs that finish together are recorded in one reconcile
	// rather than one each (the Job controller batches its pods' events the
	// same way). A run's outcome is recorded up to this much later; node
	// and NodeScript events reconcile at once. Defaults to
	// DefaultPodBatchPeriod; negative reconciles on every pod event at once.
	PodBatchPeriod time.Duration
	// SuccessLogLines is how many lines of a successful run's log are kept
	// in its output record, for NodeScripts with spec.recordOutput (a failed
	// run's record keeps its termination message, the end of its output,
	// without this). Defaults to 20; negative fetches no log (one pods/log
	// request per node saved).
	SuccessLogLines int
	// CollectInterval is how often the watcher (while it leads) deletes,
	// cluster-wide, the pods and run Leases of one-shot runs (nodeexec run,
	// shell) whose client died: podexec.CollectExpired. Defaults to
	// podexec.DefaultCollectInterval (15s); negative disables it. RBAC:
	// pods list/delete and leases.coordination.k8s.io list/delete,
	// cluster-wide; without them the collector logs the refusal and the
	// rollouts are unaffected.
	CollectInterval time.Duration
	// NotReadyGrace is how long a run pod may sit on a node whose Ready
	// condition is not True (kubelet stopped, node unreachable, runtime down)
	// before the run counts as an infrastructure failure (NodeNotReady): the
	// pod is deleted and the run retried, with backoff, once the node is Ready
	// and the pod gone. Defaults to DefaultNotReadyGrace (1 minute).
	NotReadyGrace time.Duration
	// Clock drives timestamps, soak times and backoffs. Defaults to the real clock.
	Clock clock.WithTicker
	// Backends builds the backend a NodeScript's spec.backend names, from
	// NodeBackendOptions(ns) with Client set. The watcher only creates the
	// pods of its CompletionPod (nodeexec.CompletionPodBuilder); it never
	// execs, and it refuses a pod any of whose containers runs another
	// image than NodeBackendOptions' Image (RunImage: spec.backend.image or
	// the backend's default, the image deploy/policy checks). Defaults to
	// backends.NewNode.
	Backends func(backends.NodeOptions) (nodeexec.Backend, error)
	// Rebooter, when set, reboots node for spec.reboot instead of the pod
	// running spec.rebootCommand that the watcher creates by default; it is
	// called in a goroutine of its own, at most one at a time per node, and
	// its error is logged (the wait for a new boot ID within
	// spec.rebootTimeout decides the outcome). Tests inject the test
	// cluster's node reboot.
	Rebooter func(ctx context.Context, node string) error
	// SyncTimeout bounds how long Start waits for the API server to
	// answer its first LIST of NodeScripts (each failure is logged, at
	// once, then retried with backoff from 500ms to 10s) and then for its
	// informers to sync (each failed list or watch logged likewise); past
	// it Start returns an error with the last failure. Defaults to
	// DefaultSyncTimeout; it must not be negative.
	SyncTimeout time.Duration
	// KuredDaemonSets are kured's DaemonSets ("NAMESPACE/NAME") whose
	// KuredLockAnnotation the MaintenanceBudget count reads. Defaults to
	// [DefaultKuredDaemonSet]. RBAC: get on daemonsets there.
	KuredDaemonSets []string
	// HTTPClient makes the requests of spec.gates to Prometheus and
	// Alertmanager. Defaults to a client with a timeout of GateTimeout.
	HTTPClient *http.Client
	// GateTimeout bounds one check of a gate (a query, a GET or LIST and
	// its CEL evaluation); a check past it fails and the gate is closed.
	// Defaults to DefaultGateTimeout (10s); it must not be negative.
	GateTimeout time.Duration
	// RESTMapper maps a CEL gate's apiVersion and kind to its resource and
	// scope. Defaults to a mapper over Client's discovery (cached; reset
	// when a kind is not found).
	RESTMapper meta.RESTMapper
	// NotifyAttempts is how many times a notification of spec.notify is
	// POSTed before it is given up (NotificationFailed). HTTPClient makes
	// the POSTs (redirects followed only to the same host). Defaults to
	// DefaultNotifyAttempts (8).
	NotifyAttempts int
	// NotifyBackoff is the wait before a notification's second attempt,
	// doubled for each next one up to MaxNotifyBackoff (5m). Defaults to
	// DefaultNotifyBackoff (1s).
	NotifyBackoff time.Duration
}

// Watcher applies every NodeScript in the cluster to the nodes its
// selector matches, now and as nodes join, as controlled rollouts. Its
// state lives in the API (node annotations, run pods, NodeScript status),
// so it can be stopped and started again at any moment.
type Watcher struct {
	o       Options
	metrics *metrics

	mu sync.Mutex
	// overlay holds per NodeScript the node states this process wrote that
	// the node informer may not show yet, so that a reconcile never acts on
	// a stale state (and never starts a node twice or overshoots concurrency).
	overlay map[string]map[string]nodeState
	// created holds run pods created and not yet seen by the pod informer.
	created map[string]time.Time
	// deleted holds, by UID, finished pods this process recorded and
	// deleted whose deletion the pod informer has not shown yet.
	deleted map[types.UID]time.Time
	// draining holds the nodes being drained; rebooting, the nodes an
	// Options.Rebooter is rebooting.
	draining, rebooting map[string]bool
	// decoded caches per NodeScript and node the last state annotation
	// decoded, so that a reconcile of 5,000 nodes decodes only what changed.
	decoded map[string]map[string]decodedState
	// conds holds per NodeScript the node conditions this process wrote
	// (nil: removed) that the node informer may not show yet, so that an
	// unchanged condition is not written again.
	conds map[string]map[string]*corev1.NodeCondition
	// runNow holds per NodeScript the run-now override last recorded in an
	// Event (AnnotationRunNow and AnnotationRunNowBy), so that each is
	// recorded once.
	runNow map[string]string
	// drainVerdicts holds per NodeScript and node the last drain check that
	// found the node blocked, for DrainRecheck (drains.go; made on first use).
	drainVerdicts map[string]map[string]drainVerdict
	// ledger serializes the MaintenanceBudget and exclusivity decisions.
	ledger ledger
	// gates caches the checks of spec.gates (see gateCache).
	gates *gateCache
	// analyses holds per NodeScript the last canary analysis check made.
	analyses analysisMemo
	// forecasts keeps the learned durations and forecasts (forecast.go).
	forecasts forecastMemo
	// places holds per NodeScript the rollout order of its last decision
	// (NODESCRIPT_ORDINAL, NODESCRIPT_CANARY; annotations_env.go).
	places placeMemo
}

type decodedState struct {
	raw    string
	absent bool   // the node has no state annotation: s is Pending
	rv     string // the resourceVersion of the node raw was read from
	s      nodeState
}

// New validates o and returns a Watcher. Errors name the bad field.
func New(o Options) (*Watcher, error) {
	if o.Client == nil {
		return nil, errors.New("watcher: Options.Client is nil: give a Kubernetes client")
	}
	if o.Dynamic == nil {
		return nil, errors.New("watcher: Options.Dynamic is nil: give a dynamic client (dynamic.NewForConfig)")
	}
	if err := runOptions(&o); err != nil {
		return nil, err
	}
	if le := o.LeaderElection; le != nil {
		l, err := leaderElectionOptions(*le)
		if err != nil {
			return nil, err
		}
		o.LeaderElection = &l
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.KuredDaemonSets == nil {
		o.KuredDaemonSets = []string{DefaultKuredDaemonSet}
	}
	for _, ds := range o.KuredDaemonSets {
		if ns, name, ok := strings.Cut(ds, "/"); !ok || ns == "" || name == "" {
			return nil, fmt.Errorf("watcher: Options.KuredDaemonSets: %q: want NAMESPACE/NAME, e.g. %s", ds, DefaultKuredDaemonSet)
		}
	}
	if err := gateOptions(&o); err != nil {
		return nil, err
	}
	if err := notifyOptions(&o); err != nil {
		return nil, err
	}
	m := newMetrics()
	if o.Metrics != nil {
		if err := m.register(o.Metrics); err != nil {
			return nil, fmt.Errorf("watcher: registering metrics: %w", err)
		}
	}
	return &Watcher{
		o: o, metrics: m,
		overlay:  map[string]map[string]nodeState{},
		created:  map[string]time.Time{},
		deleted:  map[types.UID]time.Time{},
		draining: map[string]bool{}, rebooting: map[string]bool{},
		decoded: map[string]map[string]decodedState{},
		conds:   map[string]map[string]*corev1.NodeCondition{},
		runNow:  map[string]string{},
		gates:   newGateCache(),
	}, nil
}

// Start runs the watcher until ctx ends, then returns nil (within
// StopGrace); it returns an error when the API server does not serve
// NodeScripts (wrapping ErrCRDNotInstalled, found by a LIST of at most one
// NodeScript before the informers start), when that LIST or the informers'
// sync has not succeeded within Options.SyncTimeout (each failure is logged
// on ctx's logger as it happens, naming the API server), or when leadership
// is lost (ErrLeadershipLost). With LeaderElection set it first waits to become
// the leader. Its signature is controller-runtime's Runnable, so a Watcher
// can be added to a manager (mgr.Add(w)) unchanged; the manager's own
// leader election then applies and Options.LeaderElection should be nil.
func (w *Watcher) Start(ctx context.Context) error {
	le := w.o.LeaderElection
	if le == nil {
		return w.run(ctx)
	}
	// The API server's answer first: the elector would retry an
	// unreachable one forever, logging only to klog.
	if err := w.firstList(ctx, time.Now().Add(w.o.SyncTimeout)); err != nil || ctx.Err() != nil {
		return err
	}
	log := logr.FromContextOrDiscard(ctx).WithValues("lease", le.Namespace+"/"+le.Name, "identity", le.Identity)
	// OnStartedLeading runs in a goroutine of the elector's; mu orders it
	// with the elector's return, so Start waits for a run that began.
	var (
		mu      sync.Mutex
		stopped bool
		running bool
		runErr  error
		done    = make(chan struct{})
	)
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: le.Namespace, Name: le.Name},
			Client:     w.o.Client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: le.Identity},
		},
		LeaseDuration:   le.LeaseDuration,
		RenewDeadline:   le.RenewDeadline,
		RetryPeriod:     le.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            le.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				mu.Lock()
				if stopped {
					mu.Unlock()
					return
				}
				running = true
				mu.Unlock()
				defer close(done)
				log.Info("became leader")
				runErr = w.run(ctx)
			},
			OnStoppedLeading: func() { log.Info("stopped leading") },
		},
	})
	if err != nil {
		return fmt.Errorf("watcher: leader election: %w", err)
	}
	log.Info("waiting for leadership")
	elector.Run(ctx)
	mu.Lock()
	stopped = true
	wasRunning := running
	mu.Unlock()
	if wasRunning {
		<-done
	}
	if runErr != nil {
		return runErr
	}
	if ctx.Err() == nil {
		return ErrLeadershipLost
	}
	return nil
}

// Index names of the pod informer.
const byNodeScript = "nodescript"

// podIndexers are the pod informer's indexes: byNodeScript, a run pod's
// NodeScript (its LabelNodeScript).
func podIndexers() cache.Indexers {
	return cache.Indexers{byNodeScript: func(obj any) ([]string, error) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return nil, nil
		}
		return []string{p.Labels[v1alpha1.LabelNodeScript]}, nil
	}}
}

// run is the controller proper: informers, the workqueue and its workers.
func (w *Watcher) run(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Without the CRD the NodeScript informer would retry its list forever
	// and the watcher never sync (nor collect): say so instead. Other errors
	// (an API server unreachable or restarting) are logged and retried, up
	// to SyncTimeout (real time, whatever Options.Clock is: it bounds
	// waits on the network).
	syncBy := time.Now().Add(w.o.SyncTimeout)
	if err := w.firstList(ctx, syncBy); err != nil || ctx.Err() != nil {
		return err
	}
	inf, err := w.newInformers(ctx)
	if err != nil {
		return err
	}
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](500*time.Millisecond, 2*time.Minute),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodescripts", MetricsProvider: w.metrics, Clock: w.o.Clock})
	defer queue.ShutDown()
	enqueueAll := inf.enqueueAll(queue)
	if err := inf.addCRHandlers(queue, enqueueAll); err != nil {
		return err
	}
	if err := w.addCoreHandlers(inf, queue, enqueueAll); err != nil {
		return err
	}
	recorder, stopEvents := w.recorder(ctx)
	defer stopEvents()
	c, synced := inf.controller(w, recorder, queue)
	lastErr, err := inf.logWatchErrors(log)
	if err != nil {
		return err
	}
	inf.start(ctx)
	defer shutdownWithin(log, stopGrace, inf.shutdown...)
	t0 := w.o.Clock.Now()
	if err := w.waitSynced(ctx, syncBy, synced, lastErr); err != nil || ctx.Err() != nil {
		return err
	}
	log.Info("caches synced", "nodes", len(inf.nodes.Informer().GetStore().ListKeys()),
		"nodescripts", len(inf.scripts.Informer().GetStore().ListKeys()), "after", w.o.Clock.Since(t0).String())
	w.runWorkers(ctx, c, queue, enqueueAll)
	return nil
}

// watcherInformers are run's informers and their factories.
type watcherInformers struct {
	nodeFactory, podFactory, jobFactory informers.SharedInformerFactory
	nsFactory                           dynamicinformer.DynamicSharedInformerFactory
	nodes                               coreinformers.NodeInformer
	pods                                coreinformers.PodInformer
	jobs                                batchinformers.JobInformer
	scripts                             informers.GenericInformer
	// budgets, plans, calendars: nil when the API server does not serve them.
	budgets, plans, calendars cache.SharedIndexInformer
	shutdown                  []func()
}

// newInformers builds the watcher's informers: nodes, its pods, its hook
// Jobs (spec.hooks, hooks.go), NodeScripts, and MaintenanceBudgets, plans
// and MaintenanceCalendars when served.
func (w *Watcher) newInformers(ctx context.Context) (*watcherInformers, error) {
	inf := &watcherInformers{}
	inf.nodeFactory = informers.NewSharedInformerFactoryWithOptions(w.o.Client, 0, informers.WithTransform(trimNode))
	inf.podFactory = informers.NewSharedInformerFactoryWithOptions(w.o.Client, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.LabelSelector = nodeexec.LabelManagedBy + "=" + nodeexec.ManagedByValue + "," + v1alpha1.LabelNodeScript
		}),
		informers.WithTransform(trimPod))
	inf.nsFactory = dynamicinformer.NewDynamicSharedInformerFactory(w.o.Dynamic, 0)
	inf.jobFactory = informers.NewSharedInformerFactoryWithOptions(w.o.Client, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.LabelSelector = nodeexec.LabelManagedBy + "=" + nodeexec.ManagedByValue + "," + v1alpha1.LabelNodeScript + "," + v1alpha1.LabelHook
		}),
		informers.WithTransform(trimJob))
	inf.jobs = inf.jobFactory.Batch().V1().Jobs() // spec.hooks (hooks.go)
	inf.nodes = inf.nodeFactory.Core().V1().Nodes()
	inf.pods = inf.podFactory.Core().V1().Pods()
	inf.scripts = inf.nsFactory.ForResource(v1alpha1.Resource)
	inf.budgets, inf.plans = w.budgetInformers(ctx, inf.nsFactory)
	inf.calendars = w.calendarInformer(ctx, inf.nsFactory)
	if err := inf.pods.Informer().AddIndexers(podIndexers()); err != nil {
		return nil, err
	}
	inf.shutdown = []func(){inf.nodeFactory.Shutdown, inf.podFactory.Shutdown, inf.nsFactory.Shutdown, inf.jobFactory.Shutdown}
	return inf, nil
}

// enqueueAll queues every NodeScript and every MaintenanceBudget.
func (inf *watcherInformers) enqueueAll(queue workqueue.TypedRateLimitingInterface[string]) func() {
	return func() {
		for _, key := range inf.scripts.Informer().GetStore().ListKeys() {
			queue.Add(key)
		}
		if inf.budgets != nil {
			for _, key := range inf.budgets.GetStore().ListKeys() {
				queue.Add(budgetKeyPrefix + key)
			}
		}
	}
}

// addCRHandlers: a budget's or plan's change queues everything (a
// budget's status alone does not), a calendar's its NodeScripts, a
// NodeScript's (not its status alone) itself.
func (inf *watcherInformers) addCRHandlers(queue workqueue.TypedRateLimitingInterface[string], enqueueAll func()) error {
	for _, i := range []cache.SharedIndexInformer{inf.budgets, inf.plans} {
		if i == nil {
			continue
		}
		if _, err := i.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { enqueueAll() },
			UpdateFunc: func(old, obj any) {
				if !statusOnlyChange(old, obj) || i == inf.plans {
					enqueueAll()
				}
			},
			DeleteFunc: func(any) { enqueueAll() },
		}); err != nil {
			return err
		}
	}
	if inf.calendars != nil {
		if _, err := inf.calendars.AddEventHandler(calendarHandler(inf.scripts.Informer().GetStore(), queue.Add)); err != nil {
			return err
		}
	}
	_, err := inf.scripts.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { enqueueKey(queue, obj) },
		UpdateFunc: func(old, obj any) {
			// The status is the watcher's own output: a change of it
			// alone (each reconcile's write) needs no reconcile.
			if !statusOnlyChange(old, obj) {
				enqueueKey(queue, obj)
			}
		},
		DeleteFunc: func(obj any) { enqueueKey(queue, obj) },
	})
	return err
}

// addCoreHandlers: a node's change that matters queues everything, a
// pod's its NodeScript (after PodBatchPeriod), a hook Job's its
// NodeScript.
func (w *Watcher) addCoreHandlers(inf *watcherInformers, queue workqueue.TypedRateLimitingInterface[string], enqueueAll func()) error {
	if _, err := inf.nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { enqueueAll() },
		UpdateFunc: func(old, obj any) {
			// The transform dropped what changes on every heartbeat, so
			// an update that changed nothing the watcher keeps is skipped;
			// so is one that changed only the watcher's own records (state
			// annotations, Node conditions), which the reconcile that
			// wrote them has taken into account.
			if !sameNode(withoutRecords(old.(*corev1.Node)), withoutRecords(obj.(*corev1.Node))) {
				enqueueAll()
			}
		},
		DeleteFunc: func(any) { enqueueAll() },
	}); err != nil {
		return err
	}
	podEvent := func(old, obj any) { w.podChanged(queue, old, obj) }
	if _, err := inf.pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		// A pod added (created by this watcher, or listed again) counts
		// as an update from nothing.
		AddFunc:    func(obj any) { podEvent(&corev1.Pod{}, obj) },
		UpdateFunc: podEvent,
		DeleteFunc: func(obj any) { podEvent(nil, obj) },
	}); err != nil {
		return err
	}
	_, err := inf.jobs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { enqueueJob(queue, obj) },
		UpdateFunc: func(_, obj any) { enqueueJob(queue, obj) },
		DeleteFunc: func(obj any) { enqueueJob(queue, obj) },
	})
	return err
}

// podChanged handles a pod's event (old nil: deleted; an empty pod:
// added): the pod is no longer expected (created) nor, added, deleted;
// an update that matters queues its NodeScript.
func (w *Watcher) podChanged(queue workqueue.TypedRateLimitingInterface[string], old, obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	w.mu.Lock()
	delete(w.created, p.Name)
	if old == nil {
		delete(w.deleted, p.UID)
	}
	w.mu.Unlock()
	if o, ok := old.(*corev1.Pod); ok && !podUpdateMatters(o, p) {
		return
	}
	if w.o.PodBatchPeriod > 0 {
		queue.AddAfter(p.Labels[v1alpha1.LabelNodeScript], w.o.PodBatchPeriod)
	} else {
		queue.Add(p.Labels[v1alpha1.LabelNodeScript])
	}
}

// controller is the controller on inf's caches, and the informers to wait
// for.
func (inf *watcherInformers) controller(w *Watcher, recorder record.EventRecorder, queue workqueue.TypedRateLimitingInterface[string]) (*controller, []cache.InformerSynced) {
	c := &controller{
		w: w, nodes: inf.nodes.Lister(), pods: inf.pods.Informer().GetIndexer(), scripts: inf.scripts.Informer().GetStore(),
		events: recorder, queue: queue, jobs: inf.jobs.Informer().GetStore(),
	}
	c.notify = newNotifier(w, recorder, queue.Add)
	synced := []cache.InformerSynced{inf.nodes.Informer().HasSynced, inf.pods.Informer().HasSynced, inf.scripts.Informer().HasSynced, inf.jobs.Informer().HasSynced}
	for _, o := range []struct {
		inf   cache.SharedIndexInformer
		store *cache.Store
	}{{inf.budgets, &c.budgets}, {inf.plans, &c.plans}, {inf.calendars, &c.calendars}} {
		if o.inf != nil {
			*o.store = o.inf.GetStore()
			synced = append(synced, o.inf.HasSynced)
		}
	}
	return c, synced
}

// lastError is the last failed list or watch of an informer.
type lastError struct {
	sync.Mutex
	err error
}

// logWatchErrors logs each informer's failed list or watch (client-go
// would log it to klog, which a CLI silences), and keeps the last for the
// error of a sync that times out.
func (inf *watcherInformers) logWatchErrors(log logr.Logger) (*lastError, error) {
	lastErr := &lastError{}
	for what, i := range map[string]cache.SharedIndexInformer{"nodes": inf.nodes.Informer(), "pods": inf.pods.Informer(), "nodescripts": inf.scripts.Informer(), "jobs": inf.jobs.Informer()} {
		if err := i.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			switch {
			case errors.Is(err, io.EOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
				return // the watch ended; the reflector starts another
			case errors.Is(err, io.ErrUnexpectedEOF):
				log.V(1).Info("watch cut; watching again", "resource", what, "err", err.Error())
				return
			}
			lastErr.Lock()
			lastErr.err = fmt.Errorf("%s: %w", what, err)
			lastErr.Unlock()
			log.Error(err, "listing or watching failed; retrying", "resource", what)
		}); err != nil {
			return nil, err
		}
	}
	return lastErr, nil
}

func (inf *watcherInformers) start(ctx context.Context) {
	inf.nodeFactory.Start(ctx.Done())
	inf.podFactory.Start(ctx.Done())
	inf.nsFactory.Start(ctx.Done())
	inf.jobFactory.Start(ctx.Done())
}

// waitSynced waits until the informers synced, at most until syncBy: an
// error naming the last failed list or watch when they did not (nil when
// ctx ended).
func (w *Watcher) waitSynced(ctx context.Context, syncBy time.Time, synced []cache.InformerSynced, lastErr *lastError) error {
	syncCtx, syncCancel := context.WithDeadline(ctx, syncBy)
	ok := cache.WaitForCacheSync(syncCtx.Done(), synced...)
	syncCancel()
	if ok || ctx.Err() != nil {
		return nil
	}
	lastErr.Lock()
	defer lastErr.Unlock()
	if lastErr.err == nil {
		return fmt.Errorf("watcher: informers did not sync within %s (Options.SyncTimeout)", w.o.SyncTimeout)
	}
	return fmt.Errorf("watcher: informers did not sync within %s (Options.SyncTimeout): %w", w.o.SyncTimeout, lastErr.err)
}

// runWorkers runs the workers, the resync, the notifier and the
// collector until ctx ends, then shuts the queue down and waits for them.
func (w *Watcher) runWorkers(ctx context.Context, c *controller, queue workqueue.TypedRateLimitingInterface[string], enqueueAll func()) {
	var wg sync.WaitGroup
	for range w.o.Workers {
		wg.Go(func() {
			for c.processNext(ctx) {
			}
		})
	}
	wg.Go(func() { wait.Until(enqueueAll, w.o.Resync, ctx.Done()) })
	wg.Go(func() { c.notify.run(ctx) })
	if w.o.CollectInterval > 0 {
		wg.Go(func() {
			_ = podexec.RunCollector(ctx, w.o.Client, metav1.NamespaceAll, w.o.CollectInterval, w.o.Clock)
		})
	}
	<-ctx.Done()
	queue.ShutDown()
	wg.Wait()
}

// firstList lists at most one NodeScript, retrying until it succeeds,
// ctx ends (nil) or the time is past by: the API server does not serve
// NodeScripts (ErrCRDNotInstalled), or it has not answered (the last
// error). Each failure is logged at once: it names the API server.
func (w *Watcher) firstList(ctx context.Context, by time.Time) error {
	log := logr.FromContextOrDiscard(ctx)
	delay := 500 * time.Millisecond
	for {
		_, err := w.o.Dynamic.Resource(v1alpha1.Resource).List(ctx, metav1.ListOptions{Limit: 1})
		switch {
		case err == nil || ctx.Err() != nil:
			return nil
		case nodescript.CRDMissing(err):
			return fmt.Errorf("watcher: %w", ErrCRDNotInstalled)
		case !time.Now().Add(delay).Before(by):
			return fmt.Errorf("watcher: listing NodeScripts did not succeed within %s (Options.SyncTimeout): %w", w.o.SyncTimeout, err)
		}
		log.Error(err, "listing NodeScripts failed; retrying", "in", delay.String())
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		delay = min(2*delay, 10*time.Second)
	}
}

// shutdownWithin calls each of stops in turn, waiting at most grace for
// them (see StopGrace).
func shutdownWithin(log logr.Logger, grace time.Duration, stops ...func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, stop := range stops {
			stop()
		}
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		log.V(1).Info("informers still stopping; not waiting for them", "after", grace.String())
	}
}

func enqueueKey(q workqueue.TypedRateLimitingInterface[string], obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		q.Add(key)
	}
}

// recorder returns an EventRecorder writing to the API, and its stop function.
func (w *Watcher) recorder(ctx context.Context) (record.EventRecorder, func()) {
	s := runtime.NewScheme()
	_ = scheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: w.o.Client.CoreV1().Events("")})
	return b.NewRecorder(s, corev1.EventSource{Component: "nodeexec-watcher"}), b.Shutdown
}

// runOptions fills o's run options left 0 with their defaults and checks
// them (Backends, Workers, CreateParallelism, Resync, PodBatchPeriod,
// NotReadyGrace, SuccessLogLines, CollectInterval, SyncTimeout).
func runOptions(o *Options) error {
	if o.Backends == nil {
		o.Backends = backends.NewNode
	}
	setDefault(&o.Workers, 2)
	setDefault(&o.CreateParallelism, 16)
	setDefault(&o.Resync, 30*time.Second)
	setDefault(&o.PodBatchPeriod, DefaultPodBatchPeriod)
	setDefault(&o.NotReadyGrace, DefaultNotReadyGrace)
	setDefault(&o.SuccessLogLines, 20)
	setDefault(&o.CollectInterval, podexec.DefaultCollectInterval)
	setDefault(&o.SyncTimeout, DefaultSyncTimeout)
	switch {
	case o.SyncTimeout < 0:
		return fmt.Errorf("watcher: Options.SyncTimeout is %s: give a positive duration, or 0 for the default %s", o.SyncTimeout, DefaultSyncTimeout)
	case o.Workers < 0:
		return fmt.Errorf("watcher: Options.Workers is %d: give a positive number, or 0 for the default 2", o.Workers)
	case o.CreateParallelism < 0:
		return fmt.Errorf("watcher: Options.CreateParallelism is %d: give a positive number, or 0 for the default 16", o.CreateParallelism)
	case o.NotReadyGrace < 0:
		return fmt.Errorf("watcher: Options.NotReadyGrace is %s: give a positive duration, or 0 for the default %s", o.NotReadyGrace, DefaultNotReadyGrace)
	case o.Resync < 0:
		return fmt.Errorf("watcher: Options.Resync is %s: give a positive duration, or 0 for the default 30s", o.Resync)
	}
	return nil
}

// setDefault sets *v to def when it is 0.
func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// leaderElectionOptions is l with its defaults, checked.
func leaderElectionOptions(l LeaderElection) (LeaderElection, error) {
	if l.Namespace == "" {
		return l, errors.New("watcher: Options.LeaderElection.Namespace is empty: name the namespace of the Lease")
	}
	setDefault(&l.Name, "nodeexec-watcher")
	if msgs := validation.IsDNS1123Subdomain(l.Name); len(msgs) > 0 {
		return l, fmt.Errorf("watcher: Options.LeaderElection.Name %q: %v", l.Name, msgs)
	}
	if l.Identity == "" {
		host, _ := os.Hostname()
		l.Identity = host + "_" + podexec.RandomSuffix(8)
	}
	setDefault(&l.LeaseDuration, 15*time.Second)
	setDefault(&l.RenewDeadline, 10*time.Second)
	setDefault(&l.RetryPeriod, 2*time.Second)
	if !(l.LeaseDuration > l.RenewDeadline && l.RenewDeadline > l.RetryPeriod && l.RetryPeriod > 0) {
		return l, fmt.Errorf("watcher: Options.LeaderElection: want LeaseDuration > RenewDeadline > RetryPeriod > 0, got %s, %s, %s", l.LeaseDuration, l.RenewDeadline, l.RetryPeriod)
	}
	return l, nil
}

// state is node n's state for NodeScript name: what this process last
// wrote when the informer does not show it yet, else the node's annotation.
// ok is false when the annotation cannot be read (the node is then left
// alone, and the error logged).
func (w *Watcher) state(ctx context.Context, name string, n *corev1.Node) (nodeState, bool) {
	// Fast path, taken for most nodes on most reconciles: no state of this
	// process's own overlays it, and the cached node is the one (same
	// resourceVersion, so the same annotations) its state was decoded from.
	w.mu.Lock()
	_, overlaid := w.overlay[name][n.Name]
	d, ok := w.decoded[name][n.Name]
	w.mu.Unlock()
	if !overlaid && ok && d.rv != "" && d.rv == n.ResourceVersion {
		return d.s, true
	}
	raw, has := n.Annotations[stateAnnotation(name)]
	w.mu.Lock()
	if o, ok := w.overlay[name][n.Name]; ok {
		if !has || raw != o.Encode() {
			w.mu.Unlock()
			return o, true
		}
		delete(w.overlay[name], n.Name)
	}
	w.mu.Unlock()
	if !has {
		d = decodedState{absent: true, s: nodeState{Phase: v1alpha1.PhasePending}}
	} else if !ok || d.absent || d.raw != raw {
		s, err := decodeState(n.Annotations, name)
		if err != nil {
			logr.FromContextOrDiscard(ctx).Error(err, "node state unreadable; node skipped", "node", n.Name)
			return nodeState{}, false
		}
		d = decodedState{raw: raw, s: s}
	}
	d.rv = n.ResourceVersion
	w.mu.Lock()
	if w.decoded[name] == nil {
		w.decoded[name] = map[string]decodedState{}
	}
	w.decoded[name][n.Name] = d
	w.mu.Unlock()
	return d.s, true
}

// writeState records s as node n's state for NodeScript ns: one strategic
// merge patch of the node's status (the API server keeps metadata changes
// made through nodes/status) that sets the state annotation, removes the
// annotations drop, and sets ns's Node condition when NodeCondition says
// otherwise than the node (a node ns does not select is left to phase 4).
// So a run's outcome and its condition are one write. RBAC: patch on
// nodes/status.
func (w *Watcher) writeState(ctx context.Context, ns *v1alpha1.NodeScript, n *corev1.Node, s nodeState, drop ...string) error {
	name := ns.Name
	s = s.Bounded()
	s.Since = s.Since.UTC().Truncate(time.Second)
	if s.NextRetry != nil {
		t := s.NextRetry.UTC().Truncate(time.Second)
		s.NextRetry = &t
	}
	ann := map[string]any{stateAnnotation(name): s.Encode()}
	for _, k := range drop {
		ann[k] = nil
	}
	body := map[string]any{"metadata": map[string]any{"annotations": ann}}
	var cond *corev1.NodeCondition
	if sel, err := metav1.LabelSelectorAsSelector(&ns.Spec.NodeSelector); err == nil && nodescript.SelectsNode(ns, sel, n) {
		have, want := w.condition(name, n), nodeCondition(name, v1alpha1.SpecHash(&ns.Spec), s)
		if want != nil && !sameCondition(have, want) {
			c := stamp(*want, have, w.o.Clock.Now())
			cond = &c
			body["status"] = map[string]any{"conditions": []corev1.NodeCondition{c}}
		}
	}
	patch, err := json.Marshal(body)
	if err != nil {
		return err
	}
	if _, err := w.o.Client.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: "nodeexec-watcher"}, "status"); err != nil {
		return fmt.Errorf("node %s: writing state of nodescript %s: %w", n.Name, name, err)
	}
	w.note(name, n.Name, s)
	if cond != nil {
		w.wroteCondition(name, n.Name, cond)
	}
	return nil
}

// note keeps s as node's state for NodeScript name in this process until
// the node cache shows it (see state): after writeState, what it wrote; and,
// never written, the state of a run whose pod is the record while it goes
// (runningState), the annotation keeping the state before the run until the
// outcome is written.
func (w *Watcher) note(name, node string, s nodeState) {
	s.Since = s.Since.UTC().Truncate(time.Second)
	w.mu.Lock()
	if w.overlay[name] == nil {
		w.overlay[name] = map[string]nodeState{}
	}
	w.overlay[name][node] = s
	w.mu.Unlock()
}

// expect notes a pod created and not yet seen by the informer.
func (w *Watcher) expect(pod string, now time.Time) {
	w.mu.Lock()
	w.created[pod] = now
	w.mu.Unlock()
}

func (w *Watcher) unexpect(pod string) {
	w.mu.Lock()
	delete(w.created, pod)
	w.mu.Unlock()
}

// expected reports whether pod was created by this process and not yet
// seen by the informer (for at most a minute).
func (w *Watcher) expected(pod string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fresh(w.created, pod, w.o.Clock.Now())
}

// fresh reports whether m holds k from less than a minute before now; an
// older entry is dropped. The caller holds w.mu.
func fresh[K comparable](m map[K]time.Time, k K, now time.Time) bool {
	t, ok := m[k]
	if ok && now.Sub(t) > time.Minute {
		delete(m, k)
		return false
	}
	return ok
}

// recorded notes that pod, finished, was recorded and deleted (now), so
// that reconciles until the informer shows the deletion skip it instead of
// deleting it again.
func (w *Watcher) recorded(pod types.UID, now time.Time) {
	if pod == "" {
		return // not from an API server: it cannot be told apart
	}
	w.mu.Lock()
	w.deleted[pod] = now
	w.mu.Unlock()
}

// alreadyRecorded reports whether pod was recorded and deleted by this
// process and the informer has not shown its deletion yet (for at most a
// minute, after which it is recorded again if it is still there).
func (w *Watcher) alreadyRecorded(pod types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fresh(w.deleted, pod, w.o.Clock.Now())
}

// prune drops the cached states of nodes that no longer exist.
func (w *Watcher) prune(name string, nodes map[string]*corev1.Node) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for node := range w.decoded[name] {
		if nodes[node] == nil {
			delete(w.decoded[name], node)
		}
	}
	for node := range w.overlay[name] {
		if nodes[node] == nil {
			delete(w.overlay[name], node)
		}
	}
	for node := range w.conds[name] {
		if nodes[node] == nil {
			delete(w.conds[name], node)
		}
	}
}

// forget drops what the process remembers of a deleted NodeScript.
func (w *Watcher) forget(name string) {
	w.mu.Lock()
	delete(w.overlay, name)
	delete(w.decoded, name)
	delete(w.conds, name)
	delete(w.runNow, name)
	delete(w.drainVerdicts, name)
	w.mu.Unlock()
	w.gates.forget(name)
	w.forgetAnalysis(name)
	w.forgetForecast(name)
	w.places.forget(name)
}
