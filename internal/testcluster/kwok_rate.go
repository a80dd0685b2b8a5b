package testcluster

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

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
