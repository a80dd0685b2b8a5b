package runtimeexec

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nsenter"
)

// HostRoot is where the agent pod mounts the node's root filesystem
// (hostPath "/", read-only): the agent dials runtime sockets under it.
const HostRoot = "/host"

// HostRootVolume is the name of that volume.
const HostRootVolume = "host-root"

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
}

// BuildPod returns the agent pod: nsenter.BuildPod's privileged hostPID pod
// pinned to the node (tolerating every taint, holder `nodeexec agent hold --duration <deadline>`,
// managed-by and run-ID labels, node/deadline/command annotations,
// activeDeadlineSeconds, no service account token), in the pod network (no
// hostNetwork, no hostIPC: the command enters the target's namespaces, not
// the node's), plus the node's root filesystem read-only at HostRoot, where
// the agent finds the runtime sockets, and the AnnotationTarget annotation.
// The container's environment is left empty: the command gets the target
// container's own environment. It is a pure function; errors name the
// invalid fields.
func BuildPod(s PodSpec) (*corev1.Pod, error) {
	if s.Target == "" {
		return nil, errors.New("Target is empty")
	}
	pod, err := nsenter.BuildPod(nsenter.PodSpec{
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
	})
	if err != nil {
		return nil, err
	}
	pod.Annotations[AnnotationTarget] = s.Target
	pod.Spec.Volumes = append(pod.Spec.Volumes, HostRootVolumeSource())
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, HostRootMount())
	return pod, nil
}

// HostRootVolumeSource is the hostPath volume of the node's root ("/").
func HostRootVolumeSource() corev1.Volume {
	return corev1.Volume{Name: HostRootVolume, VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: "/", Type: ptr.To(corev1.HostPathDirectory)},
	}}
}

// HostRootMount mounts HostRootVolume read-only at HostRoot. The bind is
// recursive, so sockets in /run (a tmpfs of its own) are seen, also ones
// created after the start (a restarted runtime). There is no mount
// propagation: HostToContainer would require "/" to be a shared or slave
// mount on the node, which it is not everywhere.
func HostRootMount() corev1.VolumeMount {
	return corev1.VolumeMount{
		Name:      HostRootVolume,
		MountPath: HostRoot,
		ReadOnly:  true,
	}
}

// AgentArgs are the parts of the agent's command line.
type AgentArgs struct {
	// ContainerID is the target's runtime ID ("containerd://...").
	ContainerID string
	// Endpoints are extra runtime sockets (host paths).
	Endpoints []string
	// Namespaces to enter.
	Namespaces []nsenter.Namespace
	// NoProcFallback turns off the agent's /proc/*/cgroup scan.
	NoProcFallback bool
	// Env is set on top of the target container's environment.
	Env map[string]string
	// Argv is the command.
	Argv []string
}

// AgentArgv is what runs in the agent container over exec:
//
//	/usr/local/bin/nodeexec agent container-exec --container-id ID
//	    [--runtime-endpoint PATH]... --namespaces LIST [--no-proc-fallback]
//	    [-e KEY=VALUE]... -- argv...
//
// with the -e flags sorted by name.
func AgentArgv(a AgentArgs) []string {
	out := []string{nsenter.AgentPath, "agent", "container-exec", "--container-id", a.ContainerID}
	for _, ep := range a.Endpoints {
		out = append(out, "--runtime-endpoint", ep)
	}
	nss := make([]string, len(a.Namespaces))
	for i, n := range a.Namespaces {
		nss[i] = string(n)
	}
	out = append(out, "--namespaces", strings.Join(nss, ","))
	if a.NoProcFallback {
		out = append(out, "--no-proc-fallback")
	}
	for _, k := range sortedKeys(a.Env) {
		out = append(out, "-e", k+"="+a.Env[k])
	}
	return append(append(out, "--"), a.Argv...)
}

// AgentErrorExitCode is the agent's exit status when it could not run the
// command at all (container lookup or namespace entry failed), as docker
// run's 125; the reason is on its stderr. 126 and 127 keep their shell
// meanings (not executable, not found).
const AgentErrorExitCode = 125

// deadline is now + timeout + podexec.DeadlineSlack.
func deadline(now time.Time, timeout time.Duration) time.Time {
	return now.Add(timeout + podexec.DeadlineSlack)
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
