package watcher_test

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeexec/nodeexec/nodeexec/watcher"
)

// New builds a Watcher from its Options (zero values take the documented
// defaults) without contacting the cluster; Start runs it until its context
// ends. Fake clientsets stand in for the cluster here; a program gives
// kubernetes.NewForConfig's and dynamic.NewForConfig's clients.
func ExampleNew() {
	w, err := watcher.New(watcher.Options{
		Client:  fake.NewClientset(),
		Dynamic: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()),
		Metrics: prometheus.NewRegistry(),
	})
	fmt.Println(w != nil, err)

	_, err = watcher.New(watcher.Options{Client: fake.NewClientset()})
	fmt.Println(err)
	// Output:
	// true <nil>
	// watcher: Options.Dynamic is nil: give a dynamic client (dynamic.NewForConfig)
}
