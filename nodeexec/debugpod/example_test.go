package debugpod_test

import (
	"fmt"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

// BuildPod is a pure function: the pod `kubectl debug node/NODE
// --profile=sysadmin` would create, plus nodeexec's labels, deadline and
// requests. The backend creates it, execs the command in it and deletes it;
// `nodeexec run --explain` prints it.
func ExampleBuildPod() {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	pod, err := debugpod.BuildPod(debugpod.PodSpec{
		PodBase: debugpod.PodBase{
			Node:      "node-a",
			Name:      "nodeexec-node-a-x2x2x",
			Namespace: "default",
			RunID:     "run1",
			Image:     debugpod.DefaultImage,
			Requests:  podexec.DefaultRequests(),
			Now:       now,
			Deadline:  now.Add(10*time.Minute + podexec.DeadlineSlack),
			Command:   []string{"chroot", "/host", "sh", "-c", "hostname"},
		},
		Profile: "sysadmin",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	c := pod.Spec.Containers[0]
	fmt.Println("pod:", pod.Name, "on", pod.Spec.NodeName)
	fmt.Println("hostPID:", pod.Spec.HostPID, "hostNetwork:", pod.Spec.HostNetwork)
	fmt.Println("privileged:", *c.SecurityContext.Privileged)
	fmt.Println("node's root at:", c.VolumeMounts[0].MountPath)
	fmt.Println("activeDeadlineSeconds:", *pod.Spec.ActiveDeadlineSeconds)
	fmt.Println("managed-by:", pod.Labels["app.kubernetes.io/managed-by"])
	// Output:
	// pod: nodeexec-node-a-x2x2x on node-a
	// hostPID: true hostNetwork: true
	// privileged: true
	// node's root at: /host
	// activeDeadlineSeconds: 630
	// managed-by: nodeexec
}
