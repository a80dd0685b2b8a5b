package podexec

import (
	"crypto/rand"
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
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// DeadlineSlack is added to a run's timeout to give its pod's
// activeDeadlineSeconds: the server-side backstop that ends the pod if no
// client deletes it. Every pod backend and the watcher use it.
const DeadlineSlack = 30 * time.Second

// DefaultRequests are the resource requests of a run's pod when its
// backend's Options.Requests is nil: 10m CPU and 16Mi memory, small and
// explicit so that a namespace's LimitRange defaults do not make the
// kubelet reject the pod (OutOfcpu) on a full node. A new list each call.
func DefaultRequests() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("10m"),
		corev1.ResourceMemory: resource.MustParse("16Mi"),
	}
}

// PodBase is what every pod a backend builds (debugpod.PodSpec,
// agent.PodSpec, runtimeexec.PodSpec, HolderPodSpec) has in common; each
// of those specs embeds it, and NewPodBase fills it in from a backend's
// PodOptions and a Request.
type PodBase struct {
	// Node is the node to pin the pod to (spec.nodeName: no scheduler).
	Node string
	// Name and Namespace of the pod.
	Name, Namespace string
	// RunID is the value of the nodeexec.LabelRunID label.
	RunID string
	// Image, ImagePullPolicy, ImagePullSecrets, PriorityClassName and
	// Requests are copied into the pod.
	Image             string
	ImagePullPolicy   corev1.PullPolicy
	ImagePullSecrets  []string
	PriorityClassName string
	Requests          corev1.ResourceList
	// Env is set on the container, and so seen by commands run in it; the
	// values as given (EscapeExpansion keeps the kubelet from expanding them).
	Env map[string]string
	// SecretEnv adds variables from Secrets in Namespace (nodeexec.SecretEnvVars).
	SecretEnv []nodeexec.SecretEnv
	// Deadline is when the pod must be gone: it sets activeDeadlineSeconds
	// (counted from Now, rounded up), the holder's sleep and the
	// nodeexec.AnnotationDeadline annotation.
	Now, Deadline time.Time
	// Command is recorded in the nodeexec.AnnotationCommand annotation (1 KiB at most).
	Command []string
}

// NewPodBase is the PodBase of req's pod for a backend whose completed
// options are o: on req.Node, named name, created at now and gone by now +
// req.EffectiveTimeout() + DeadlineSlack, with req's Env and SecretEnv,
// recording command (the command line run in the pod) in its annotation.
func NewPodBase(o *PodOptions, req nodeexec.Request, name string, now time.Time, command []string) PodBase {
	return PodBase{
		Node:              req.Node,
		Name:              name,
		Namespace:         o.Namespace,
		RunID:             o.RunID,
		Image:             o.Image,
		ImagePullPolicy:   o.ImagePullPolicy,
		ImagePullSecrets:  o.ImagePullSecrets,
		PriorityClassName: o.PriorityClassName,
		Requests:          o.Requests,
		Env:               req.Env,
		SecretEnv:         req.SecretEnv,
		Now:               now,
		Deadline:          now.Add(req.EffectiveTimeout() + DeadlineSlack),
		Command:           command,
	}
}

// HolderPodSpec is what HolderPod needs: the PodBase every pod an executor
// runs commands in has, its container's name, and its stdin and tty.
type HolderPodSpec struct {
	PodBase
	// Container names the pod's one container.
	Container string
	// Stdin and TTY set the container's stdin and tty.
	Stdin, TTY bool
}

// HolderPod returns a pod pinned to s.Node, tolerating every taint, never
// restarted, whose one container holds `sleep <deadline>` for commands to be
// run in over exec; labelled managed-by=nodeexec and with the run ID,
// annotated with node, deadline and command, with activeDeadlineSeconds and
// no service account token. It is a pure function; errors name the field.
func HolderPod(s HolderPodSpec) (*corev1.Pod, error) {
	if err := validateHolder(s); err != nil {
		return nil, err
	}
	active := int64(math.Ceil(s.Deadline.Sub(s.Now).Seconds()))
	secretVars, secretFrom := nodeexec.SecretEnvVars(s.SecretEnv)
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
				Name:                     s.Container,
				Image:                    s.Image,
				ImagePullPolicy:          s.ImagePullPolicy,
				Command:                  []string{"sleep", strconv.FormatInt(active, 10)},
				Env:                      append(envVars(s.Env), secretVars...),
				EnvFrom:                  secretFrom,
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
	return pod, nil
}

func validateHolder(s HolderPodSpec) error {
	var errs []error
	if s.Node == "" {
		errs = append(errs, errors.New("Node is empty"))
	}
	if s.Image == "" {
		errs = append(errs, errors.New("Image is empty"))
	}
	if s.Name == "" || s.Namespace == "" || s.RunID == "" || s.Container == "" {
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

// RandomSuffix returns n random characters from the alphabet of
// k8s.io/apimachinery/pkg/util/rand (lowercase consonants and digits with no
// look-alikes), from crypto/rand.
func RandomSuffix(n int) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

func envVars(env map[string]string) []corev1.EnvVar {
	var out []corev1.EnvVar
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, corev1.EnvVar{Name: k, Value: EscapeExpansion(env[k])})
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
