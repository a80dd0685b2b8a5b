package watcher

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
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

// refusedList makes dyn's NodeScript lists fail as an API server that does
// not listen does: connection refused, naming its address.
func refusedList(dyn *dynamicfake.FakeDynamicClient) {
	dyn.PrependReactor("list", "nodescripts", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, &url.Error{Op: "Get", URL: "https://192.0.2.1:6443/apis/nodeexec.io/v1alpha1/nodescripts?limit=1",
			Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}
	})
}

// An API server that does not answer: Start logs each failed attempt at
// once, naming the server, and returns an error naming it once
// SyncTimeout has passed, instead of waiting silently forever.
func TestStartUnreachableAPIServer(t *testing.T) {
	dyn := fakeDynamic(t)
	refusedList(dyn)
	w, err := New(Options{Client: fake.NewClientset(), Dynamic: dyn, CollectInterval: -1, SyncTimeout: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncLines
	ctx := logr.NewContext(t.Context(), funcr.New(logs.add, funcr.Options{}))
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- w.Start(ctx) }()
	if !waitUntil(time.Second, func() bool { return strings.Contains(logs.String(), "192.0.2.1:6443") }) {
		t.Errorf("no log line naming the API server within 1s; logs:\n%s", logs.String())
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "192.0.2.1:6443") || !strings.Contains(err.Error(), "SyncTimeout") {
			t.Errorf("Start = %v, want an error naming the API server and SyncTimeout", err)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("Start returned after %s, want about SyncTimeout (1.5s)", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return within 10s with an unreachable API server")
	}
}

// Interrupted while it retries an unreachable API server, Start returns nil
// at once, with or without leader election.
func TestStartInterruptedWhileUnreachable(t *testing.T) {
	for _, le := range []*LeaderElection{nil, {Namespace: "nodeexec"}} {
		dyn := fakeDynamic(t)
		refusedList(dyn)
		w, err := New(Options{Client: fake.NewClientset(), Dynamic: dyn, CollectInterval: -1, LeaderElection: le})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- w.Start(ctx) }()
		time.Sleep(700 * time.Millisecond) // past the first retry
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("leader election %v: Start = %v, want nil once interrupted", le != nil, err)
			}
		case <-time.After(time.Second):
			t.Fatalf("leader election %v: Start did not return within 1s of its context's end", le != nil)
		}
	}
}

// syncLines collects a logger's lines.
type syncLines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncLines) add(prefix, args string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.WriteString(prefix + " " + args + "\n")
}

func (s *syncLines) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitUntil polls cond every 10ms until it holds (true) or d has passed.
func waitUntil(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}
