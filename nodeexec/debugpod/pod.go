package debugpod

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubectl/pkg/cmd/debug"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

// Profiles returns kubectl debug's profiles, in kubectl's words: what the
// debugging container may do on the node (a new slice each call).
func Profiles() []string {
	return []string{
		debug.ProfileLegacy, debug.ProfileGeneral, debug.ProfileBaseline,
		debug.ProfileRestricted, debug.ProfileNetadmin, debug.ProfileSysadmin,
	}
}

// ContainerName is the name of the container in the pod, as kubectl debug names it.
const ContainerName = "debugger"

// HostRoot is where profiles that mount the node's root filesystem put it.
const HostRoot = "/host"

// PodBase is podexec.PodBase, the part every pod spec of nodeexec has (node,
// name, namespace, run ID, image, pull policy and secrets, priority class,
// requests, environment, deadline, command annotation), here so that a
// PodSpec is built with this package alone.
type PodBase = podexec.PodBase

// PodSpec is everything BuildPod needs; it holds no client.
type PodSpec struct {
	// PodBase is the pod's node (spec.nodeName, as kubectl debug does),
	// name, namespace, run ID, image, pull policy and secrets, priority
	// class, requests, environment (seen by the command), deadline and
	// command annotation.
	PodBase
	// Profile is one of Profiles.
	Profile string
	// Stdin and TTY set the container's stdin/tty, as kubectl debug's -i/-t.
	Stdin, TTY bool
	// AgentImage, when set, adds the agent container (AgentContainerName,
	// first) of that image, which copies nodeexec's static binary into an
	// emptyDir volume the debugging container mounts read-only at
	// agent.CopiedDir, so that the command can run under nodeexec's agent
	// (agent.RunArgv) in the user's image; see BuildPod. Empty: the pod is
	// kubectl debug's, plus nodeexec's labels, annotations and limits.
	AgentImage string
	// AgentImageVolume, with AgentImage: no agent container; AgentImage
	// is mounted read-only at agent.CopiedDir as an image volume (the
	// binary at agent.ImageVolumePath), which needs the ImageVolume
	// feature (Kubernetes 1.35 and later, GA in 1.36) and a container
	// runtime that implements it (containerd 2.1 or later, CRI-O 1.31 or
	// later) on the node.
	AgentImageVolume bool
}

// AgentContainerName names the agent container BuildPod adds for
// PodSpec.AgentImage; AgentVolumeName names its emptyDir volume.
const (
	AgentContainerName = "nodeexec-agent"
	AgentVolumeName    = "nodeexec-agent"
)

// agentUser is the user the agent container runs as: not root, so that it
// fits every Pod Security level (it only reads its image's binary, mode
// 0755, and writes to the emptyDir, mode 0777).
const agentUser = 65532

// BuildPod returns the pod that `kubectl debug node/NODE --profile=PROFILE
// --image=IMAGE` creates, with what kubectl lacks added: the managed-by and
// run-ID labels, node, deadline and command annotations, activeDeadlineSeconds,
// image pull secrets, priority class, resource requests, no service account
// token, and a holder process
// (sleep until the deadline) in place of the command, which is run over exec.
// With s.AgentImage, the pod also has the agent container, first (so that
// the kubelet starts it first), running agent.CopyArgv as user 65532 with
// no privilege, capability or writable root (it fits the "restricted" Pod
// Security level), with the debugging container's requests; the emptyDir
// volume it writes, mounted read-only in the debugging container at
// agent.CopiedDir; and the kubectl.kubernetes.io/default-container
// annotation naming the debugging container. With s.AgentImageVolume it
// has, instead of the agent container and its emptyDir, an image volume of
// s.AgentImage (pull policy s.ImagePullPolicy) mounted read-only at
// agent.CopiedDir. It is a pure function.
func BuildPod(s PodSpec) (*corev1.Pod, error) {
	pod, err := podexec.HolderPod(podexec.HolderPodSpec{PodBase: s.PodBase, Container: ContainerName, Stdin: s.Stdin, TTY: s.TTY})
	if err != nil {
		return nil, err
	}
	applier, err := debug.NewProfileApplier(s.Profile, debug.KeepFlags{})
	if err != nil {
		return nil, fmt.Errorf("unknown profile %q: want one of %s", s.Profile, strings.Join(Profiles(), ", "))
	}
	if err := applier.Apply(pod, ContainerName, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.Node}}); err != nil {
		return nil, fmt.Errorf("applying profile %q: %w", s.Profile, err)
	}
	if s.AgentImage != "" {
		addAgent(pod, s)
	}
	return pod, nil
}

// addAgent adds the agent container and its volume, or the agent image's
// volume, to pod (BuildPod).
func addAgent(pod *corev1.Pod, s PodSpec) {
	source := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
	if s.AgentImageVolume {
		source = corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: s.AgentImage, PullPolicy: s.ImagePullPolicy}}
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: AgentVolumeName, VolumeSource: source})
	for i := range pod.Spec.Containers {
		if c := &pod.Spec.Containers[i]; c.Name == ContainerName {
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: AgentVolumeName, MountPath: agent.CopiedDir, ReadOnly: true})
		}
	}
	if s.AgentImageVolume {
		return
	}
	pod.Annotations[defaultContainerAnnotation] = ContainerName
	a := corev1.Container{
		Name:                     AgentContainerName,
		Image:                    s.AgentImage,
		ImagePullPolicy:          s.ImagePullPolicy,
		Command:                  agent.CopyArgv(agent.CopiedPath),
		Resources:                corev1.ResourceRequirements{Requests: s.Requests},
		VolumeMounts:             []corev1.VolumeMount{{Name: AgentVolumeName, MountPath: agent.CopiedDir}},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                ptr.To[int64](agentUser),
			RunAsNonRoot:             ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
	pod.Spec.Containers = append([]corev1.Container{a}, pod.Spec.Containers...)
}

// defaultContainerAnnotation names the container kubectl exec, logs and
// attach pick when none is given.
const defaultContainerAnnotation = "kubectl.kubernetes.io/default-container"

// MountsHostRoot reports whether the profile mounts the node's root
// filesystem at HostRoot (legacy, general, sysadmin), so that a script can be
// run there with chroot.
func MountsHostRoot(profile string) bool {
	switch profile {
	case debug.ProfileLegacy, debug.ProfileGeneral, debug.ProfileSysadmin:
		return true
	}
	return false
}
