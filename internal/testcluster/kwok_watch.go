package testcluster

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

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
// Unlike an informer it makes no watch-list request, so that it works on etcd
// versions before 3.5 too (they lack RequestWatchProgress, and kube-apiserver
// 1.37 serves a watch without a resourceVersion as a watch-list).
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
