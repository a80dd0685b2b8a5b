package watcher

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/backends"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// Defaults of a NodeScript's backend and timeout.
const (
	defaultTimeout = v1alpha1.DefaultTimeout
)

// Defaults of spec.reboot's fields.
const (
	defaultRebootCommand = v1alpha1.DefaultRebootCommand
	defaultRebootTimeout = v1alpha1.DefaultRebootTimeout
)

// rebootSentinelWrap is script run so that, when it exits 0 and the file
// $NODESCRIPT_REBOOT_SENTINEL exists, the run exits
// v1alpha1.ExitRebootRequired instead (spec.reboot: IfRequired). The script
// runs in a subshell, on lines of its own, so that its own exit, a trailing
// comment or a here-document end where they would alone.
func rebootSentinelWrap(script string) string {
	return "(\n" + script + "\n)\nrc=$?\nif [ \"$rc\" -eq 0 ] && [ -e \"$" + v1alpha1.EnvRebootSentinel + "\" ]; then exit " +
		strconv.Itoa(v1alpha1.ExitRebootRequired) + "; fi\nexit \"$rc\"\n"
}

// runPodName is the name of the pod of attempt of action on node for the
// NodeScript name at spec hash: podexec.PodName with a suffix hashed from
// all five, so it is the same for the same run and differs between runs.
func runPodName(name, hash, node, action string, attempt int) string {
	sum := sha256.Sum256([]byte(name + "/" + hash + "/" + node + "/" + action + "/" + strconv.Itoa(attempt)))
	return podexec.PodName(node, hex.EncodeToString(sum[:])[:10])
}

// runPodSpec says which pod RunPod builds.
type runPodSpec struct {
	// NodeScript is the validated NodeScript; its scripts, timeout and
	// secretEnv are used.
	NodeScript *v1alpha1.NodeScript
	// Backend builds the pod: the backend the NodeScript's spec.backend
	// names (NodeBackend), which must implement
	// nodeexec.CompletionPodBuilder. Required.
	Backend nodeexec.Backend
	// Node to run on; Action is ActionCheck, ActionRun, ActionVerify or
	// ActionRollback;
	// Attempt numbers the run (1 for the first).
	Node, Action string
	Attempt      int
	// BootID is the node's status.nodeInfo.bootID, kept on the pod as
	// AnnotationBootID; empty leaves the annotation out.
	BootID string
	// Now is the creation time (deadline annotation, activeDeadlineSeconds).
	Now time.Time
	// Place is the node's place in the rollout, in the environment of
	// check, run and verify pods (placeEnv: NODESCRIPT_ORDINAL,
	// NODESCRIPT_CANARY, NODESCRIPT_ATTEMPT, NODESCRIPT_BOOT_ID); nil
	// leaves them out.
	Place *rolloutPlace
}

// runImage is the image a NodeScript's run pods run: spec.backend.image,
// or, when it is empty, the default of the backend spec.backend.name names
// (backends.DefaultImage: busybox:stable for debugpod, the agent image
// for nsenter). deploy/policy's admission policy computes the same image
// and checks it against its allowed prefixes (a test pins the two
// together); the watcher runs no other (see Options.Backends). It fails
// for a backend name that package backends does not know.
func runImage(spec *v1alpha1.NodeScriptSpec) (string, error) {
	if spec.Backend.Image != "" {
		return spec.Backend.Image, nil
	}
	img, err := backends.DefaultImage(spec.Backend.Name)
	if err != nil {
		return "", fmt.Errorf("spec.backend.name: %w", err)
	}
	return img, nil
}

// nodeBackendOptions are the options of the backend that NodeScript ns's
// spec.backend names (package backends): its name, the run namespace
// (RunNamespace), the spec hash as the run ID, the image (RunImage: the
// default is resolved here, not left to the backend), pull secrets,
// profile and namespaces. The nsenter backend's run pods stay in the pod
// network (no hostNetwork, no hostIPC): the agent enters the node's
// namespaces itself. Client is left for the caller to set.
func nodeBackendOptions(ns *v1alpha1.NodeScript) backends.NodeOptions {
	spec := &ns.Spec
	img, err := runImage(spec)
	if err != nil {
		img = spec.Backend.Image // an unknown backend: backends.NewNode refuses it, naming it
	}
	o := backends.NodeOptions{
		Name: spec.Backend.Name, Namespace: nodescript.RunNamespace(spec), RunID: v1alpha1.SpecHash(spec),
		Image: img, Profile: spec.Backend.Profile, Namespaces: spec.Backend.Namespaces,
		HostNetwork: ptr.To(false), HostIPC: ptr.To(false),
	}
	for _, r := range spec.Backend.ImagePullSecrets {
		o.ImagePullSecrets = append(o.ImagePullSecrets, r.Name)
	}
	return o
}

// nodeBackend returns the backend NodeScript ns's spec.backend names, built
// by backends.NewNode from NodeBackendOptions(ns) with client: what the
// watcher runs ns with by default. It makes no API call.
func nodeBackend(ns *v1alpha1.NodeScript, client kubernetes.Interface) (nodeexec.Backend, error) {
	o := nodeBackendOptions(ns)
	o.Client = client
	return backends.NewNode(o)
}

// runPod is RunPod with the backend spec.backend names, built by
// Options.Backends. A pod with a container whose image is not
// RunImage(spec), the image the admission policy admitted, is refused:
// whatever Options.Backends does, the watcher runs only that image.
func (w *Watcher) runPod(s runPodSpec) (*corev1.Pod, error) {
	o := nodeBackendOptions(s.NodeScript)
	o.Client = w.o.Client
	b, err := w.o.Backends(o)
	if err != nil {
		return nil, fmt.Errorf("spec.backend: %w", err)
	}
	s.Backend = b
	pod, err := buildRunPod(s)
	if err != nil {
		return nil, err
	}
	want, err := runImage(&s.NodeScript.Spec)
	if err != nil {
		return nil, err
	}
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		if c.Image != want {
			return nil, fmt.Errorf("spec.backend: the %s backend built a pod whose container %s runs %s, not %s (spec.backend.image, or the backend's default when it is empty): refused, the watcher runs no image but that one", b.Name(), c.Name, c.Image, want)
		}
	}
	return pod, nil
}

// buildRunPod returns the pod that runs one of a NodeScript's scripts on a node
// to completion: the backend's CompletionPod (nodeexec.CompletionPodBuilder)
// for the script, so that the script is the container's own process and its
// exit code and output tail are kept in the pod's status
// (terminationMessagePolicy FallbackToLogsOnError) whether or not the
// watcher is running, plus the NodeScript's owner reference, labels and
// attempt annotation. The name is derived from the NodeScript, spec hash,
// node, action and attempt, so a restarted watcher finds the pod it created
// and two watchers cannot both create it. It makes no API call.
//
// The node backends build such pods: debugpod (the profile's pod; the
// script runs in `chroot /host` for profiles that mount the node's root)
// and nsenter (a privileged hostPID pod whose agent enters PID 1's
// namespaces). A backend without CompletionPod is refused with an error
// naming spec.backend.name.
func buildRunPod(s runPodSpec) (*corev1.Pod, error) {
	ns := s.NodeScript
	spec := &ns.Spec
	hash := v1alpha1.SpecHash(spec)
	script := spec.Script
	switch s.Action {
	case v1alpha1.ActionRun:
		if f := spec.ScriptFrom; f != nil && f.SecretKeyRef != nil {
			script = `eval "$` + v1alpha1.EnvScript + `"`
		}
		if spec.Reboot == v1alpha1.RebootIfRequired {
			script = rebootSentinelWrap(script)
		}
	case v1alpha1.ActionReboot:
		script = spec.RebootCommand
		if script == "" {
			script = defaultRebootCommand
		}
	case v1alpha1.ActionCheck:
		script = spec.CheckScript
	case v1alpha1.ActionVerify:
		script = spec.VerifyScript
	case v1alpha1.ActionRollback:
		script = spec.RollbackScript
	case v1alpha1.ActionUninstall:
		script = spec.UninstallScript
	default:
		return nil, fmt.Errorf("unknown action %q: want %s, %s, %s, %s or %s", s.Action, v1alpha1.ActionCheck, v1alpha1.ActionRun, v1alpha1.ActionVerify, v1alpha1.ActionRollback, v1alpha1.ActionReboot)
	}
	if script == "" {
		return nil, fmt.Errorf("NodeScript %s has no %s script: no %s pod to build", ns.Name, s.Action, s.Action)
	}
	if s.Backend == nil {
		return nil, errors.New("RunPodSpec.Backend is nil: give the backend spec.backend names (NodeBackend)")
	}
	builder, ok := nodeexec.As[nodeexec.CompletionPodBuilder](s.Backend)
	if !ok {
		return nil, fmt.Errorf("spec.backend.name %q: the %s backend cannot run a script to completion in a pod of its own; use one of %s", spec.Backend.Name, s.Backend.Name(), strings.Join(backends.NodeNames(), ", "))
	}
	timeout := defaultTimeout
	if spec.Timeout != nil {
		timeout = spec.Timeout.Duration
	}
	var secretEnv []nodeexec.SecretEnv
	for _, e := range spec.SecretEnv {
		secretEnv = append(secretEnv, nodeexec.SecretEnv{Secret: e.Secret, Key: e.Key})
	}
	if f := spec.ScriptFrom; s.Action == v1alpha1.ActionRun && f != nil && f.SecretKeyRef != nil {
		secretEnv = append(secretEnv, nodeexec.SecretEnv{Secret: f.SecretKeyRef.Name, Key: f.SecretKeyRef.Key, Name: v1alpha1.EnvScript})
	}
	env := map[string]string{v1alpha1.EnvNode: s.Node, v1alpha1.EnvNodeScript: ns.Name}
	if s.Action == v1alpha1.ActionRun && spec.Reboot == v1alpha1.RebootIfRequired {
		env[v1alpha1.EnvRebootSentinel] = nodescript.RebootSentinel(spec)
	}
	placeEnv(env, s) // annotations_env.go
	req := nodeexec.Request{Node: s.Node, Script: script, Timeout: timeout, SecretEnv: secretEnv, Env: env}
	name := runPodName(ns.Name, hash, s.Node, s.Action, s.Attempt)
	var pod *corev1.Pod
	var err error
	if s.Action == v1alpha1.ActionCheck && !spec.CheckPrivileged() {
		pod, err = unprivilegedCheckPod(spec, req, name, s.Now) // spec.check.privileged: false (detector.go)
	} else if pod, err = builder.CompletionPod(req, name, s.Now); err != nil {
		err = fmt.Errorf("spec.backend: %w", err)
	}
	if err != nil {
		return nil, err
	}
	if ns.UID != "" && s.Action != v1alpha1.ActionUninstall {
		// (An uninstall pod is not owned: a foreground deletion of the
		// NodeScript would have the garbage collector delete it at once;
		// the watcher deletes it once recorded.)
		// Deleting the NodeScript deletes its run pods (the garbage
		// collector); a cluster-scoped owner may own namespaced pods.
		pod.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeScript", Name: ns.Name, UID: ns.UID, Controller: ptr.To(true),
		}}
	}
	cmVars, cmFrom := configMapEnv(spec.ConfigMapEnv)
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		c.Env, c.EnvFrom = append(c.Env, cmVars...), append(c.EnvFrom, cmFrom...)
	}
	pod.Labels[v1alpha1.LabelNodeScript] = ns.Name
	pod.Labels[v1alpha1.LabelAction] = s.Action
	pod.Annotations[v1alpha1.AnnotationAttempt] = strconv.Itoa(s.Attempt)
	if s.BootID != "" {
		pod.Annotations[v1alpha1.AnnotationBootID] = s.BootID
	}
	return pod, nil
}

// configMapEnv is spec.configMapEnv as container environment: one
// configMapKeyRef variable per entry with a key, and the envFrom sources of
// the others, in order.
func configMapEnv(sources []v1alpha1.ConfigMapEnvSource) ([]corev1.EnvVar, []corev1.EnvFromSource) {
	var env []corev1.EnvVar
	var from []corev1.EnvFromSource
	for _, e := range sources {
		ref := corev1.LocalObjectReference{Name: e.ConfigMap}
		if e.Key == "" {
			from = append(from, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: ref}})
			continue
		}
		env = append(env, corev1.EnvVar{Name: e.Key, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: ref, Key: e.Key}}})
	}
	return env, from
}
