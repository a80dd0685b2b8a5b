package resident_test

import (
	"fmt"

	"github.com/nodeexec/nodeexec/nodeexec/resident"
)

// BuildDaemonSet is the agent DaemonSet `nodeexec agent install` creates, a
// pure function of its options (Install fills in their defaults first).
func ExampleBuildDaemonSet() {
	ds := resident.BuildDaemonSet(resident.Options{
		Namespace: "nodeexec-system", Image: "registry.example/nodeexec:v0.1.0",
		ImagePullPolicy: "IfNotPresent", InstallID: "abc12",
	})
	spec := ds.Spec.Template.Spec
	fmt.Println(ds.Namespace+"/"+ds.Name, "selects", resident.Selector())
	fmt.Println("hostPID:", spec.HostPID, "image:", spec.Containers[0].Image)
	// Output:
	// nodeexec-system/nodeexec-agent selects app.kubernetes.io/component=agent,app.kubernetes.io/managed-by=nodeexec
	// hostPID: true image: registry.example/nodeexec:v0.1.0
}
