package podexec

import (
	"context"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// tracker is one shared watch over the pods of a run (a namespace and a label
// selector), used by every concurrent Run instead of one watch per pod: a
// fan-out over N nodes costs one LIST and one WATCH, not N of each.
//
// Beside the pods it watches the namespace's "Started" events (reason=Started,
// involvedObject.kind=Pod): the kubelet records one as soon as the container
// runtime has started a container, typically a second before its status
// report shows the container running. Without RBAC to watch events the
// tracker still works; Started then never reports true.
//
// The watch runs while at least one caller holds it (Acquire/release) and
// stops when the last one releases it.
type tracker struct {
	client    kubernetes.Interface
	namespace string
	selector  string

	mu      sync.Mutex
	refs    int
	stop    context.CancelFunc
	store   cache.Store
	started map[string]map[string]bool // pod name -> container ("" when the event names none) -> a Started event was seen
	waiters map[string]map[chan struct{}]struct{}
}

// newTracker returns a tracker for the pods in namespace matching the label selector.
func newTracker(client kubernetes.Interface, namespace, selector string) *tracker {
	return &tracker{client: client, namespace: namespace, selector: selector, waiters: map[string]map[chan struct{}]struct{}{}}
}

// Acquire starts the watch if it is not running and returns the function
// that releases it. The watch outlives ctx's cancellation only until release
// is called; it keeps ctx's values (logger).
func (t *tracker) Acquire(ctx context.Context) (release func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refs++
	if t.refs == 1 {
		wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		t.stop = cancel
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector = t.selector
				return t.client.CoreV1().Pods(t.namespace).List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector = t.selector
				return t.client.CoreV1().Pods(t.namespace).Watch(ctx, o)
			},
		}
		inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, t.client), &corev1.Pod{}, 0, cache.Indexers{})
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    t.notify,
			UpdateFunc: func(_, obj any) { t.notify(obj) },
			DeleteFunc: t.notify,
		})
		t.store = inf.GetStore()
		t.started = map[string]map[string]bool{}
		go inf.RunWithContext(wctx)

		evLW := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.FieldSelector = startedEvents
				return t.client.CoreV1().Events(t.namespace).List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.FieldSelector = startedEvents
				return t.client.CoreV1().Events(t.namespace).Watch(ctx, o)
			},
		}
		evInf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(evLW, t.client), &corev1.Event{}, 0, cache.Indexers{})
		_, _ = evInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    t.onEvent,
			UpdateFunc: func(_, obj any) { t.onEvent(obj) },
		})
		go evInf.RunWithContext(wctx)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			t.refs--
			if t.refs == 0 {
				t.stop()
				t.stop, t.store, t.started = nil, nil, nil
			}
		})
	}
}

const startedEvents = "involvedObject.kind=Pod,reason=Started"

func (t *tracker) onEvent(obj any) {
	ev, ok := obj.(*corev1.Event)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.started == nil || t.waiters[ev.InvolvedObject.Name] == nil {
		return // not one of ours, or nobody waits for it
	}
	name := ev.InvolvedObject.Name
	if t.started[name] == nil {
		t.started[name] = map[string]bool{}
	}
	t.started[name][eventContainer(ev.InvolvedObject.FieldPath)] = true
	t.signal(name)
}

// eventContainer is the container an event's involvedObject.fieldPath
// names: "spec.containers{NAME}" (also initContainers, ephemeralContainers)
// gives NAME; anything else "".
func eventContainer(fieldPath string) string {
	_, rest, ok := strings.Cut(fieldPath, "{")
	if !ok || !strings.HasSuffix(rest, "}") {
		return ""
	}
	return strings.TrimSuffix(rest, "}")
}

// Started reports whether the kubelet has recorded a Started event for the
// container of the named pod since the pod was subscribed to: for an event
// that names no container, any container counts.
func (t *tracker) Started(name, container string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.started[name][container] || t.started[name][""]
}

func (t *tracker) notify(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.signal(pod.Name)
}

// signal wakes the subscribers of the named pod. Called with t.mu held.
func (t *tracker) signal(name string) {
	for ch := range t.waiters[name] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Subscribe returns a channel that receives (coalesced) notifications of
// changes to the named pod, and a function to unsubscribe.
func (t *tracker) Subscribe(name string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.waiters[name] == nil {
		t.waiters[name] = map[chan struct{}]struct{}{}
	}
	t.waiters[name][ch] = struct{}{}
	return ch, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		delete(t.waiters[name], ch)
		if len(t.waiters[name]) == 0 {
			delete(t.waiters, name)
			delete(t.started, name)
		}
	}
}

// Get returns the last observed state of the named pod, or nil if the watch
// has not seen it (yet). Only valid while the Tracker is acquired.
func (t *tracker) Get(name string) *corev1.Pod {
	t.mu.Lock()
	store := t.store
	t.mu.Unlock()
	if store == nil {
		return nil
	}
	obj, ok, _ := store.GetByKey(t.namespace + "/" + name)
	if !ok {
		return nil
	}
	return obj.(*corev1.Pod)
}
