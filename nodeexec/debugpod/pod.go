package debugpod

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/kubectl/pkg/cmd/debug"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// Profiles are kubectl debug's profiles, in kubectl's words: what the
// debugging container may do on the node.
var Profiles = []string{
	debug.ProfileLegacy, debug.ProfileGeneral, debug.ProfileBaseline,
	debug.ProfileRestricted, debug.ProfileNetadmin, debug.ProfileSysadmin,
}

// ContainerName is the name of the container in the pod, as kubectl debug names it.
const ContainerName = "debugger"

// HostRoot is where profiles that mount the node's root filesystem put it.
const HostRoot = "/host"

// DeadlineSlack is added to a request's timeout to give the pod's
// activeDeadlineSeconds: the server-side backstop that ends the pod if the
// client never deletes it.
const DeadlineSlack = 30 * time.Second

// PodSpec is everything BuildPod needs; it holds no client.
type PodSpec struct {
	// Node is the node to pin the pod to (spec.nodeName, as kubectl debug does).
	Node string
	// Name and Namespace of the pod.
	Name, Namespace string
	// RunID is the value of the nodeexec.LabelRunID label.
	RunID string
	// Profile is one of Profiles.
	Profile string
	// Image, ImagePullPolicy, ImagePullSecrets, PriorityClassName and
	// Requests are copied into the pod.
	Image             string
	ImagePullPolicy   corev1.PullPolicy
	ImagePullSecrets  []string
	PriorityClassName string
	Requests          corev1.ResourceList
	// Env is set on the container (and so seen by the command run in it).
	Env map[string]string
	// Deadline is when the pod must be gone; it sets activeDeadlineSeconds
	// (counted from Now, rounded up) and the nodeexec.AnnotationDeadline annotation.
	Now, Deadline time.Time
	// Command is recorded in the nodeexec.AnnotationCommand annotation.
	Command []string
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
	if err := validateSpec(s); err != nil {
		return nil, err
	}
	applier, err := debug.NewProfileApplier(s.Profile, debug.KeepFlags{})
	if err != nil {
		return nil, fmt.Errorf("unknown profile %q: want one of %s", s.Profile, strings.Join(Profiles, ", "))
	}
	active := int64(math.Ceil(s.Deadline.Sub(s.Now).Seconds()))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      s.Name,
			Namespace: s.Namespace,
			Labels: map[string]string{
				nodeexec.LabelManagedBy: nodeexec.ManagedByValue,
				nodeexec.LabelRunID:     s.RunID,
			},
			Annotations: map[string]string{
				nodeexec.AnnotationNode:     s.Node,
				nodeexec.AnnotationDeadline: s.Deadline.UTC().Format(time.RFC3339),
				nodeexec.AnnotationCommand:  commandAnnotation(s.Command),
			},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:                     ContainerName,
				Image:                    s.Image,
				ImagePullPolicy:          s.ImagePullPolicy,
				Command:                  []string{"sleep", strconv.FormatInt(active, 10)},
				Env:                      envVars(s.Env),
				Stdin:                    s.Stdin,
				TTY:                      s.TTY,
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				Resources:                corev1.ResourceRequirements{Requests: s.Requests},
			}},
			NodeName:              s.Node,
			RestartPolicy:         corev1.RestartPolicyNever,
			Tolerations:           []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			ActiveDeadlineSeconds: &active,
			PriorityClassName:     s.PriorityClassName,
			// The command needs no API credentials; a privileged pod should
			// not carry a token, and the kubelet then has no token to request.
			AutomountServiceAccountToken: ptr.To(false),
		},
	}
	for _, name := range s.ImagePullSecrets {
		pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: name})
	}
	if err := applier.Apply(pod, ContainerName, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.Node}}); err != nil {
		return nil, fmt.Errorf("applying profile %q: %w", s.Profile, err)
	}
	return pod, nil
}

func validateSpec(s PodSpec) error {
	var errs []error
	if s.Node == "" {
		errs = append(errs, errors.New("Node is empty"))
	}
	if s.Image == "" {
		errs = append(errs, errors.New("Image is empty"))
	}
	if s.Name == "" || s.Namespace == "" || s.RunID == "" {
		errs = append(errs, errors.New("Name, Namespace and RunID must be set"))
	}
	if !s.Deadline.After(s.Now) {
		errs = append(errs, errors.New("Deadline must be after Now"))
	}
	for _, name := range s.ImagePullSecrets {
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("image pull secret %q is not a valid secret name: %s", name, strings.Join(msgs, "; ")))
		}
	}
	return errors.Join(errs...)
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

// PodName is "nodeexec-<node>-<suffix>", with the node part shortened and
// dots replaced so the result is a valid DNS label of at most 63 characters
// (pod names are used as hostnames).
func PodName(node, suffix string) string {
	const prefix = "nodeexec-"
	part := strings.ToLower(strings.ReplaceAll(node, ".", "-"))
	if max := 63 - len(prefix) - 1 - len(suffix); len(part) > max {
		part = part[:max]
	}
	part = strings.Trim(part, "-")
	return prefix + part + "-" + suffix
}

func envVars(env map[string]string) []corev1.EnvVar {
	var out []corev1.EnvVar
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, corev1.EnvVar{Name: k, Value: env[k]})
	}
	return out
}

func commandAnnotation(argv []string) string {
	b, _ := json.Marshal(argv)
	const max = 1024
	if len(b) > max {
		return string(b[:max-3]) + "..."
	}
	return string(b)
}

// DefaultRequests are the resource requests of the pod when Options.Requests
// is nil: small, and explicit so that a namespace's LimitRange defaults do not
// make the kubelet reject the pod (OutOfcpu) on a full node.
func DefaultRequests() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("10m"),
		corev1.ResourceMemory: resource.MustParse("16Mi"),
	}
}
