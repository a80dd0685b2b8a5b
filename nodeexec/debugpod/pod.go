package debugpod

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubectl/pkg/cmd/debug"

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
}

// BuildPod returns the pod that `kubectl debug node/NODE --profile=PROFILE
// --image=IMAGE` creates, with what kubectl lacks added: the managed-by and
// run-ID labels, node, deadline and command annotations, activeDeadlineSeconds,
// image pull secrets, priority class, resource requests, no service account
// token, and a holder process
// (sleep until the deadline) in place of the command, which is run over exec.
// It is a pure function.
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
	return pod, nil
}

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
