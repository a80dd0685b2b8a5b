package runtimeexec_test

import (
	"fmt"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nodeexec/runtimeexec"
)

// New checks the options and fills in their defaults; nothing is contacted
// until a Run, which finds the target container (Pod, Container), creates
// an agent pod on its node and runs the command in the container's
// namespaces. A fake clientset stands in for the cluster here.
func ExampleNew() {
	b, err := runtimeexec.New(runtimeexec.Options{
		PodOptions: podexec.PodOptions{Client: fake.NewClientset(), Config: &rest.Config{Host: "https://cluster.invalid"}},
		Pod:        "web-0", PodNamespace: "shop", Container: "nginx",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	req := b.Requirements()
	fmt.Println(b.Name(), "agent pods in", req.Namespace, "need Pod Security level", req.PodSecurityLevel)
	// Output:
	// runtime agent pods in default need Pod Security level privileged
}
