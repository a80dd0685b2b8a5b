package backends_test

import (
	"fmt"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/nodeexec/nodeexec/nodeexec/backends"
)

// NewNode builds a backend that runs on a node (not in a pod's container)
// from its name and common options: what the NodeScript watcher does with a
// NodeScript's spec.backend. A fake clientset stands in for the cluster.
func ExampleNewNode() {
	for _, name := range backends.NodeNames() {
		b, err := backends.NewNode(backends.NodeOptions{
			Name: name, Client: fake.NewClientset(), Config: &rest.Config{Host: "https://cluster.invalid"},
		})
		if err != nil {
			fmt.Println(err)
			continue
		}
		img, _ := backends.DefaultImage(name)
		fmt.Println(b.Name(), img)
	}
	_, err := backends.NewNode(backends.NodeOptions{Name: "ssh", Client: fake.NewClientset(), Config: &rest.Config{}})
	fmt.Println(err != nil)
	// Output:
	// debugpod busybox:stable
	// nsenter nodeexec.local/agent:0.2.0
	// true
}
