package nsenterpod_test

import (
	"errors"
	"fmt"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/nodeexec/nodeexec/nodeexec/nsenterpod"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nsenter"
)

// New checks the options and fills in their defaults; nothing is contacted
// until a Run. A fake clientset stands in for the cluster here; a program
// gives the clientset and the rest.Config it was built from.
func ExampleNew() {
	b, err := nsenterpod.New(nsenterpod.Options{
		PodOptions: podexec.PodOptions{Client: fake.NewClientset(), Config: &rest.Config{Host: "https://cluster.invalid"}},
		Namespaces: []nsenter.Namespace{"mnt", "pid"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	req := b.Requirements()
	fmt.Println(b.Name(), "pods in", req.Namespace, "need Pod Security level", req.PodSecurityLevel)

	_, err = nsenterpod.New(nsenterpod.Options{
		PodOptions: podexec.PodOptions{Client: fake.NewClientset(), Config: &rest.Config{}},
		Namespaces: []nsenter.Namespace{"mnt", "time"},
	})
	fmt.Println(errors.Is(err, nsenter.ErrUnknownNamespace))
	// Output:
	// nsenter pods in default need Pod Security level privileged
	// true
}
