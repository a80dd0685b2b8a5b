package runtimeexec

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

// AnnotationTarget names the target container, as NAMESPACE/POD/CONTAINER.
const AnnotationTarget = "nodeexec.io/target"

// PodBase is podexec.PodBase, the part every pod spec of nodeexec has (node,
// name, namespace, run ID, image, pull policy and secrets, priority class,
// requests, environment, deadline, command annotation), here so that a
// PodSpec is built with this package alone.
type PodBase = podexec.PodBase

// PodSpec is everything BuildPod needs; it holds no client.
type PodSpec struct {
	// PodBase is the agent pod's node (the target pod's node), name,
	// namespace, run ID, image (the agent image), pull policy and secrets,
	// priority class, requests, deadline and the user's command (recorded
	// in nodeexec.AnnotationCommand). Its Env are the request's variables
	// (-e), for the command in the target container: they go into the
	// agent container's environment as agent.ExecEnvVar, which `agent
	// container-exec --env-from-agent` reads, never onto a command line.
	// SecretEnv must be empty: the command runs with the target
	// container's own environment.
	PodBase
	// Target is NAMESPACE/POD/CONTAINER, recorded in AnnotationTarget.
	Target string
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
	if len(s.SecretEnv) > 0 {
		return nil, errors.New("SecretEnv is set: the command runs with the target container's own environment (plus Env)")
	}
	var env map[string]string
	if len(s.Env) > 0 {
		if err := agent.CheckExecEnv(s.Env); err != nil {
			return nil, fmt.Errorf("Env: %w", err)
		}
		env = map[string]string{agent.ExecEnvVar: agent.EncodeExecEnv(s.Env)}
	}
	base := s.PodBase
	base.Env = env
	pod, err := agent.BuildPod(agent.PodSpec{PodBase: base})
	if err != nil {
		return nil, err
	}
	pod.Annotations[AnnotationTarget] = s.Target
	pod.Spec.Volumes = append(pod.Spec.Volumes, agent.HostRootVolumeSource())
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, agent.HostRootMount())
	return pod, nil
}
