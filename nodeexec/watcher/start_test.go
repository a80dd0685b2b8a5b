package watcher

import (
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Without the CRD the API server answers a NodeScript list with a 404 that
// names no object: Start returns ErrCRDNotInstalled at once instead of
// waiting forever for its informers to sync.
func TestStartWithoutCRD(t *testing.T) {
	dyn := fakeDynamic(t)
	dyn.PrependReactor("list", "nodescripts", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: "nodeexec.io", Resource: "nodescripts"}, "")
	})
	w, err := New(Options{Client: fake.NewClientset(), Dynamic: dyn, CollectInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Start(t.Context()) }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrCRDNotInstalled) {
			t.Errorf("Start = %v, want ErrCRDNotInstalled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return within 10s without the CRD")
	}
}
