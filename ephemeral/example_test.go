package ephemeral_test

import (
	"fmt"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/nodeexec/nodeexec/ephemeral"
)

// New checks the options and fills in their defaults; nothing is contacted
// until a Run adds an ephemeral container to the pod (Pod, Namespace)
// targeting Container. A fake clientset stands in for the cluster here.
func ExampleNew() {
	b, err := ephemeral.New(ephemeral.Options{
		Client: fake.NewClientset(), Config: &rest.Config{Host: "https://cluster.invalid"},
		Pod: "web-0", Namespace: "shop", Container: "nginx",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	req := b.Requirements()
	fmt.Println(b.Name(), "adds a container to a pod in namespace", req.Namespace)
	fmt.Println("profiles:", ephemeral.Profiles())
	// Output:
	// ephemeral adds a container to a pod in namespace shop
	// profiles: [legacy general baseline restricted netadmin sysadmin]
}
