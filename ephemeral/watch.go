package ephemeral

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

// podWatch is a watch over one pod (field selector metadata.name; RBAC:
// list, watch on pods). It keeps running after the ctx it was started with
// ends, until stop, so that a timed-out run can still see its container end.
type podWatch struct {
	store   cache.Store
	key     string
	changed chan struct{}
	stop    context.CancelFunc
}

func watchPod(ctx context.Context, client kubernetes.Interface, namespace, name string) *podWatch {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return client.CoreV1().Pods(namespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return client.CoreV1().Pods(namespace).Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), &corev1.Pod{}, 0, cache.Indexers{})
	w := &podWatch{store: inf.GetStore(), key: namespace + "/" + name, changed: make(chan struct{}, 1), stop: cancel}
	notify := func(any) {
		select {
		case w.changed <- struct{}{}:
		default:
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, obj any) { notify(obj) },
		DeleteFunc: notify,
	})
	go inf.RunWithContext(wctx)
	return w
}

// get is the last observed state of the pod, or nil.
func (w *podWatch) get() *corev1.Pod {
	obj, ok, _ := w.store.GetByKey(w.key)
	if !ok {
		return nil
	}
	return obj.(*corev1.Pod)
}

// restAttacher is the Attacher that talks to the API server: WebSocket
// (v5.channel.k8s.io) first, SPDY when the server cannot upgrade to
// WebSocket, as podexec's exec streamer.
type restAttacher struct {
	config *rest.Config
	client rest.Interface
}

// NewAttacher returns the Attacher for a real cluster. client is
// kubernetes.Interface.CoreV1().RESTClient(); config supplies the transport.
// RBAC: create on pods/attach (WebSocket attach is authorised as create).
func NewAttacher(config *rest.Config, client rest.Interface) Attacher {
	return &restAttacher{config: config, client: client}
}

func (a *restAttacher) Attach(ctx context.Context, namespace, pod string, opts *corev1.PodAttachOptions, streams remotecommand.StreamOptions) error {
	u := a.client.Post().Namespace(namespace).Resource("pods").Name(pod).SubResource("attach").
		VersionedParams(opts, scheme.ParameterCodec).URL()
	ws, err := remotecommand.NewWebSocketExecutor(a.config, "GET", u.String())
	if err != nil {
		return fmt.Errorf("websocket executor: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(a.config, "POST", u)
	if err != nil {
		return fmt.Errorf("spdy executor: %w", err)
	}
	fallback := func(err error) bool {
		return (httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)) && !podexec.IsContainerNotReady(err)
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, fallback)
	if err != nil {
		return err
	}
	return exec.StreamWithContext(ctx, streams)
}
