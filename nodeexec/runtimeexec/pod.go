package runtimeexec

import (
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeexec/nodeexec/nodeexec/agent"
)

// AnnotationTarget names the target container, as NAMESPACE/POD/CONTAINER.
const AnnotationTarget = "nodeexec.io/target"

// PodSpec is everything BuildPod needs; it holds no client.
type PodSpec struct {
	// Node is the target pod's node (spec.nodeName of the agent pod).
	Node string
	// Name and Namespace of the agent pod.
	Name, Namespace string
	// RunID is the value of the nodeexec.LabelRunID label.
	RunID string
	// Image is the agent image; ImagePullPolicy, ImagePullSecrets,
	// PriorityClassName and Requests are copied into the pod.
	Image             string
	ImagePullPolicy   corev1.PullPolicy
	ImagePullSecrets  []string
	PriorityClassName string
	Requests          corev1.ResourceList
	// Target is NAMESPACE/POD/CONTAINER, recorded in AnnotationTarget.
	Target string
	// Now and Deadline set activeDeadlineSeconds and nodeexec.AnnotationDeadline.
	Now, Deadline time.Time
	// Command is the user's command, recorded in nodeexec.AnnotationCommand.
	Command []string
	// Env are the request's variables (-e), for the command in the target
	// container: they go into the agent container's environment as
	// agent.ExecEnvVar, which `agent container-exec --env-from-agent`
	// reads, never onto a command line. Optional.
	Env map[string]string
}

// BuildPod returns the agent pod: agent.BuildPod's privileged hostPID pod
// pinned to the node (tolerating every taint, holder `nodeexec agent hold --duration <deadline>`,
// managed-by and run-ID labels, node/deadline/command annotations,
// activeDeadlineSeconds, no service account token), in the pod network (no
// hostNetwork, no hostIPC: the command enters the target's namespaces, not
// the node's), plus the node's root filesystem read-only at HostRoot, where
// the agent finds the runtime sockets, and the AnnotationTarget annotation.
// The container's environment holds only agent.ExecEnvVar, when Env is set
// (agent.EncodeExecEnv): the command gets the target container's own
// environment plus Env. It is a pure function; errors name the invalid
// fields.
func BuildPod(s PodSpec) (*corev1.Pod, error) {
	if s.Target == "" {
		return nil, errors.New("Target is empty")
	}
	var env map[string]string
	if len(s.Env) > 0 {
		if err := agent.CheckExecEnv(s.Env); err != nil {
			return nil, fmt.Errorf("Env: %w", err)
		}
		env = map[string]string{agent.ExecEnvVar: agent.EncodeExecEnv(s.Env)}
	}
	pod, err := agent.BuildPod(agent.PodSpec{
		Node:              s.Node,
		Name:              s.Name,
		Namespace:         s.Namespace,
		RunID:             s.RunID,
		Image:             s.Image,
		ImagePullPolicy:   s.ImagePullPolicy,
		ImagePullSecrets:  s.ImagePullSecrets,
		PriorityClassName: s.PriorityClassName,
		Requests:          s.Requests,
		Now:               s.Now,
		Deadline:          s.Deadline,
		Command:           s.Command,
		Env:               env,
	})
	if err != nil {
		return nil, err
	}
	pod.Annotations[AnnotationTarget] = s.Target
	pod.Spec.Volumes = append(pod.Spec.Volumes, agent.HostRootVolumeSource())
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, agent.HostRootMount())
	return pod, nil
}
