package nsenter

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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// AgentContainerName is the name of the container in the backend's pods.
const AgentContainerName = "agent"

// AgentPath is where the agent image holds the nodeexec binary.
const AgentPath = "/usr/local/bin/nodeexec"

// AgentTarget is the PID whose namespaces the agent enters: PID 1 of the
// node, which a hostPID pod sees as PID 1 (the node's init).
const AgentTarget = 1

// PodSpec is everything BuildPod needs; it holds no client.
type PodSpec struct {
	// Node is the node to pin the pod to (spec.nodeName).
	Node string
	// Name and Namespace of the pod.
	Name, Namespace string
	// RunID is the value of the nodeexec.LabelRunID label.
	RunID string
	// Image is the agent image (nodeexec at AgentPath, busybox's sleep on PATH).
	Image           string
	ImagePullPolicy corev1.PullPolicy
	// ImagePullSecrets, PriorityClassName and Requests are copied into the pod.
	ImagePullSecrets  []string
	PriorityClassName string
	Requests          corev1.ResourceList
	// HostNetwork and HostIPC put the pod in the node's network and IPC
	// namespaces (hostPID is always set). They matter only for the namespaces
	// the agent does not enter.
	HostNetwork, HostIPC bool
	// Env is set on the container; the agent passes it on to the command.
	Env map[string]string
	// Deadline is when the pod must be gone; it sets activeDeadlineSeconds
	// (counted from Now, rounded up) and the nodeexec.AnnotationDeadline annotation.
	Now, Deadline time.Time
	// Command is recorded in the nodeexec.AnnotationCommand annotation.
	Command []string
}

// BuildPod returns the agent pod, as kubectl-node-shell builds its pod:
// pinned to the node with spec.nodeName, tolerating every taint, hostPID,
// privileged (setns needs CAP_SYS_ADMIN and access to /proc/1/ns), and
// hostNetwork/hostIPC as s says; plus the managed-by and run-ID labels, the
// node, deadline and command annotations, activeDeadlineSeconds, no service
// account token, small requests, and a holder process (sleep until the
// deadline) in place of the command, which is run over exec with AgentArgv.
// It is a pure function; errors name the invalid fields.
func BuildPod(s PodSpec) (*corev1.Pod, error) {
	if err := validateSpec(s); err != nil {
		return nil, err
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
				Name:                     AgentContainerName,
				Image:                    s.Image,
				ImagePullPolicy:          s.ImagePullPolicy,
				Command:                  []string{"sleep", strconv.FormatInt(active, 10)},
				Env:                      envVars(s.Env),
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				Resources:                corev1.ResourceRequirements{Requests: s.Requests},
				SecurityContext:          &corev1.SecurityContext{Privileged: ptr.To(true)},
			}},
			NodeName:              s.Node,
			HostPID:               true,
			HostNetwork:           s.HostNetwork,
			HostIPC:               s.HostIPC,
			RestartPolicy:         corev1.RestartPolicyNever,
			Tolerations:           []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			ActiveDeadlineSeconds: &active,
			PriorityClassName:     s.PriorityClassName,
			// The command needs no API credentials; a privileged pod should
			// not carry a token.
			AutomountServiceAccountToken: ptr.To(false),
		},
	}
	for _, name := range s.ImagePullSecrets {
		pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: name})
	}
	return pod, nil
}

// AgentArgv is what runs in the agent container over exec: the agent, which
// enters the namespaces of the node's PID 1 and runs argv there:
//
//	/usr/local/bin/nodeexec agent nsenter --target 1 --namespaces mnt,uts,... -- argv...
func AgentArgv(namespaces []Namespace, argv []string) []string {
	return append([]string{AgentPath, "agent", "nsenter",
		"--target", strconv.Itoa(AgentTarget),
		"--namespaces", joinNamespaces(namespaces),
		"--"}, argv...)
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
