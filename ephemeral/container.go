package ephemeral

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
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/kubectl/pkg/cmd/debug"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

// Profiles returns kubectl debug's profiles (a new slice each call). For
// an ephemeral container they change only the container's security
// context: general adds SYS_PTRACE, netadmin adds NET_ADMIN and NET_RAW,
// sysadmin makes it privileged, baseline clears it, restricted runs as
// non-root with every capability dropped, legacy leaves it as is.
func Profiles() []string {
	return []string{
		debug.ProfileLegacy, debug.ProfileGeneral, debug.ProfileBaseline,
		debug.ProfileRestricted, debug.ProfileNetadmin, debug.ProfileSysadmin,
	}
}

// NamePrefix starts the name of every ephemeral container this backend adds;
// Options.MaxEphemeralContainers counts the pod's containers with this prefix.
const NamePrefix = "nodeexec-"

// GateArg0 is $0 of the gate script: it names the gate in `ps` output.
const GateArg0 = "nodeexec-gate"

// PIDFile is where the gate records, inside the ephemeral container's own
// root filesystem, the PID (in the target's PID namespace) of the process
// that becomes the command, so that a cancelled run can kill exactly it.
const PIDFile = "/tmp/nodeexec.pid"

// GateExitCode is the exit status of the gate when its standard input closes
// before the start signal (a newline) arrives: the command was not run.
const GateExitCode = 125

// gateScript runs as `sh -c gateScript nodeexec-gate ARGV...`. It records its
// PID (which the command keeps, thanks to exec), waits for one line on
// standard input (the start signal the backend sends once its attach
// session is connected), and replaces itself with ARGV. The kubelet expands
// $(VAR) and turns $$ into $ in a container's command, so the shell's $$ is
// written $$$$ here.
var gateScript = `echo $$$$ >` + PIDFile + ` 2>/dev/null; ` +
	`read -r _ || { echo "nodeexec: standard input closed before the start signal; the command was not run" >&2; exit ` + strconv.Itoa(GateExitCode) + `; }; ` +
	`exec "$@"`

// Environment variables set on every ephemeral container this backend adds.
// Ephemeral containers have no labels or annotations of their own, and
// nodeexec does not modify the metadata of a pod it does not own, so the
// run's identity and deadline are recorded here (visible in the pod spec).
const (
	EnvRunID    = "NODEEXEC_RUN_ID"
	EnvDeadline = "NODEEXEC_DEADLINE"
)

// ContainerSpec is everything BuildContainer needs; it holds no client.
type ContainerSpec struct {
	// Pod is the running target pod. It is not modified.
	Pod *corev1.Pod
	// Target is the name of the container (in Pod.Spec.Containers) whose
	// process namespace the ephemeral container joins (targetContainerName).
	Target string
	// Name of the ephemeral container; it must start with NamePrefix and be
	// unique in the pod.
	Name string
	// Profile is one of Profiles.
	Profile string
	// Image and ImagePullPolicy of the ephemeral container. The image must
	// contain `sh` and `timeout` (busybox or coreutils): see BuildContainer.
	Image           string
	ImagePullPolicy corev1.PullPolicy
	// RunID is recorded in the EnvRunID variable.
	RunID string
	// Env is set on the container (and so seen by the command).
	Env map[string]string
	// SecretEnv adds variables from Secrets in the pod's namespace
	// (nodeexec.SecretEnvVars).
	SecretEnv []nodeexec.SecretEnv
	// Now and Deadline: the command is killed (SIGKILL, by `timeout`) when
	// Deadline-Now (rounded up to whole seconds) has passed since the
	// container started; Deadline is recorded in EnvDeadline (RFC 3339).
	Now, Deadline time.Time
	// Command is the argv to run.
	Command []string
}

// BuildContainer returns a copy of s.Pod with the ephemeral container
// appended to spec.ephemeralContainers, and that container, exactly as
// `kubectl debug POD --target=TARGET --profile=PROFILE --image=IMAGE -i -- ...`
// builds it (kubectl's generateDebugContainer: the profile is applied with
// debug.NewProfileApplier to a copy of the pod holding the new container,
// with the pod itself as the target), with one difference: the container's
// command is
//
//	timeout -s KILL SECONDS sh -c GATE nodeexec-gate ARGV...
//
// where GATE waits for one line on standard input before it execs ARGV.
// The backend attaches to the container and sends that line only once the
// attach session is connected, so no output can be written before someone
// reads it (kubectl's attach misses the output of a command that ends
// before the attach connects). `timeout` kills the command at the deadline
// even if the client is gone: an ephemeral container cannot be removed, but
// its process must end. Hence the image needs `sh` and `timeout`.
//
// Every `$` in ARGV and in Env values is doubled, because the kubelet
// expands $(VAR) references in a container's command and environment;
// ARGV therefore reaches the command exactly as given. It is a pure function.
func BuildContainer(s ContainerSpec) (*corev1.Pod, *corev1.EphemeralContainer, error) {
	if err := validateSpec(s); err != nil {
		return nil, nil, err
	}
	applier, err := debug.NewProfileApplier(s.Profile, debug.KeepFlags{})
	if err != nil {
		return nil, nil, fmt.Errorf("unknown profile %q: want one of %s", s.Profile, strings.Join(Profiles(), ", "))
	}
	secs := int64(math.Ceil(s.Deadline.Sub(s.Now).Seconds()))
	command := []string{"timeout", "-s", "KILL", strconv.FormatInt(secs, 10), "sh", "-c", gateScript, GateArg0}
	command = append(command, podexec.EscapeExpansionAll(s.Command)...)
	env := []corev1.EnvVar{
		{Name: EnvRunID, Value: s.RunID},
		{Name: EnvDeadline, Value: s.Deadline.UTC().Format(time.RFC3339)},
	}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		if k == EnvRunID || k == EnvDeadline {
			continue
		}
		env = append(env, corev1.EnvVar{Name: k, Value: podexec.EscapeExpansion(s.Env[k])})
	}
	fromSecrets, envFrom := nodeexec.SecretEnvVars(s.SecretEnv)
	env = append(env, fromSecrets...)
	ec := corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name:                     s.Name,
			Image:                    s.Image,
			ImagePullPolicy:          s.ImagePullPolicy,
			Command:                  command,
			Env:                      env,
			EnvFrom:                  envFrom,
			Stdin:                    true,
			StdinOnce:                true,
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		},
		TargetContainerName: s.Target,
	}
	copied := s.Pod.DeepCopy()
	copied.Spec.EphemeralContainers = append(copied.Spec.EphemeralContainers, ec)
	// The pod itself as the target: kubectl's "ephemeral" debug style.
	if err := applier.Apply(copied, s.Name, copied); err != nil {
		return nil, nil, fmt.Errorf("applying profile %q: %w", s.Profile, err)
	}
	return copied, &copied.Spec.EphemeralContainers[len(copied.Spec.EphemeralContainers)-1], nil
}

func validateSpec(s ContainerSpec) error {
	var errs []error
	if s.Pod == nil {
		return errors.New("Pod is nil")
	}
	if !strings.HasPrefix(s.Name, NamePrefix) {
		errs = append(errs, fmt.Errorf("Name %q does not start with %q", s.Name, NamePrefix))
	} else if msgs := validation.IsDNS1123Label(s.Name); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("Name %q: %s", s.Name, strings.Join(msgs, "; ")))
	}
	if HasContainer(s.Pod, s.Name) {
		errs = append(errs, fmt.Errorf("pod %s/%s already has a container named %q", s.Pod.Namespace, s.Pod.Name, s.Name))
	}
	if !slices.ContainsFunc(s.Pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == s.Target }) {
		errs = append(errs, fmt.Errorf("pod %s/%s has no container %q", s.Pod.Namespace, s.Pod.Name, s.Target))
	}
	if s.Image == "" {
		errs = append(errs, errors.New("Image is empty"))
	}
	if s.RunID == "" {
		errs = append(errs, errors.New("RunID is empty"))
	}
	if len(s.Command) == 0 || s.Command[0] == "" {
		errs = append(errs, errors.New("Command is empty"))
	}
	if !s.Deadline.After(s.Now) {
		errs = append(errs, errors.New("Deadline must be after Now"))
	}
	return errors.Join(errs...)
}

// HasContainer reports whether the pod has a container, init container or
// ephemeral container of that name (they share one name space).
func HasContainer(pod *corev1.Pod, name string) bool {
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return true
		}
	}
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			return true
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if c.Name == name {
			return true
		}
	}
	return false
}

// CountOurs is how many of the pod's ephemeral containers this backend added
// (named with NamePrefix), whatever their state: they all stay in the pod's
// spec and status until the pod is deleted.
func CountOurs(pod *corev1.Pod) int {
	n := 0
	for _, c := range pod.Spec.EphemeralContainers {
		if strings.HasPrefix(c.Name, NamePrefix) {
			n++
		}
	}
	return n
}

// DefaultTarget is the container an ephemeral container targets when none is
// named: the one the kubectl.kubernetes.io/default-container annotation
// names, as kubectl chooses it, else the pod's first container.
func DefaultTarget(pod *corev1.Pod) string {
	if name := pod.Annotations["kubectl.kubernetes.io/default-container"]; name != "" {
		return name
	}
	if len(pod.Spec.Containers) > 0 {
		return pod.Spec.Containers[0].Name
	}
	return ""
}

// Patch is the strategic merge patch of the pods/ephemeralcontainers
// subresource that turns pod into updated (BuildContainer's result), as
// kubectl debug computes it, with pod's resourceVersion added as a
// precondition: the API server refuses it with a conflict if the pod changed
// since it was read. It is a pure function.
func Patch(pod, updated *corev1.Pod) ([]byte, error) {
	oldJS, err := json.Marshal(pod)
	if err != nil {
		return nil, err
	}
	newJS, err := json.Marshal(updated)
	if err != nil {
		return nil, err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldJS, newJS, pod)
	if err != nil {
		return nil, fmt.Errorf("creating the patch that adds the ephemeral container: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(patch, &m); err != nil {
		return nil, err
	}
	meta, _ := m["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	meta["resourceVersion"] = pod.ResourceVersion
	m["metadata"] = meta
	return json.Marshal(m)
}
