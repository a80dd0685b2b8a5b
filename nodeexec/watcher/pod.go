package watcher

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
	"github.com/nodeexec/nodeexec/nsenter"
)

// Labels and annotations of the watcher's pods, besides nodeexec's own
// (managed-by, run ID = the spec hash, node, deadline, command).
const (
	// LabelNodeScript names the NodeScript a pod runs for.
	LabelNodeScript = "nodeexec.io/nodescript"
	// LabelAction is ActionRun, ActionVerify or ActionRollback.
	LabelAction = "nodeexec.io/action"
	// AnnotationAttempt is the attempt number of the run (1 for the first).
	AnnotationAttempt = "nodeexec.io/attempt"
)

// Actions: which of a NodeScript's scripts a pod runs.
const (
	ActionRun      = "run"
	ActionVerify   = "verify"
	ActionRollback = "rollback"
)

// Defaults of a NodeScript's backend and timeout.
const (
	DefaultNamespace = "nodeexec-system"
	DefaultTimeout   = 10 * time.Minute
)

// Environment variables the scripts see.
const (
	// EnvNode is the name of the node the script runs on.
	EnvNode = "NODE_NAME"
	// EnvNodeScript is the name of the NodeScript.
	EnvNodeScript = "NODESCRIPT"
)

// RunPodName is the name of the pod of attempt of action on node for the
// NodeScript name at spec hash: podexec.PodName with a suffix hashed from
// all five, so it is the same for the same run and differs between runs.
func RunPodName(name, hash, node, action string, attempt int) string {
	sum := sha256.Sum256([]byte(name + "/" + hash + "/" + node + "/" + action + "/" + strconv.Itoa(attempt)))
	return podexec.PodName(node, hex.EncodeToString(sum[:])[:10])
}

// RunPodSpec says which pod RunPod builds.
type RunPodSpec struct {
	// NodeScript is the validated NodeScript; its backend, scripts and timeout are used.
	NodeScript *v1alpha1.NodeScript
	// Node to run on; Action is ActionRun, ActionVerify or ActionRollback;
	// Attempt numbers the run (1 for the first).
	Node, Action string
	Attempt      int
	// Now is the creation time (deadline annotation, activeDeadlineSeconds).
	Now time.Time
}

// RunPod returns the pod that runs one of a NodeScript's scripts on a node
// to completion: the pod the backend (debugpod or nsenter) builds for the
// same command, with the script as the container's own process instead of
// an exec'd command, so that its exit code and output tail are kept in the
// pod's status (terminationMessagePolicy FallbackToLogsOnError) whether or
// not the watcher is running. The name is derived from the NodeScript, spec
// hash, node, action and attempt, so a restarted watcher finds the pod it
// created and two watchers cannot both create it. It is a pure function.
//
// Backends: debugpod (the profile's pod; the script runs in `chroot /host`
// for profiles that mount the node's root) and nsenter (a privileged
// hostPID pod whose agent enters PID 1's namespaces). runtime and ephemeral
// target a container, not a node, and are refused with an error naming
// spec.backend.name.
func RunPod(s RunPodSpec) (*corev1.Pod, error) {
	ns := s.NodeScript
	spec := &ns.Spec
	hash := v1alpha1.SpecHash(spec)
	script := spec.Script
	switch s.Action {
	case ActionRun:
	case ActionVerify:
		script = spec.VerifyScript
	case ActionRollback:
		script = spec.RollbackScript
	default:
		return nil, fmt.Errorf("unknown action %q", s.Action)
	}
	timeout := DefaultTimeout
	if spec.Timeout != nil {
		timeout = spec.Timeout.Duration
	}
	namespace := RunNamespace(spec)
	name := RunPodName(ns.Name, hash, s.Node, s.Action, s.Attempt)
	deadline := s.Now.Add(timeout + podexec.DeadlineSlack)
	env := map[string]string{EnvNode: s.Node, EnvNodeScript: ns.Name}
	var secretEnv []nodeexec.SecretEnv
	for _, e := range spec.SecretEnv {
		secretEnv = append(secretEnv, nodeexec.SecretEnv{Secret: e.Secret, Key: e.Key})
	}
	requests := podexec.DefaultRequests()

	var (
		pod  *corev1.Pod
		argv []string
		err  error
	)
	var pullSecrets []string
	for _, r := range spec.Backend.ImagePullSecrets {
		pullSecrets = append(pullSecrets, r.Name)
	}
	switch b := spec.Backend.Name; b {
	case "", debugpod.Name:
		profile := spec.Backend.Profile
		if profile == "" {
			profile = debugpod.DefaultProfile
		}
		image := spec.Backend.Image
		if image == "" {
			image = debugpod.DefaultImage
		}
		argv = []string{"sh", "-c", script}
		if debugpod.MountsHostRoot(profile) {
			argv = append([]string{"chroot", debugpod.HostRoot}, argv...)
		}
		pod, err = debugpod.BuildPod(debugpod.PodSpec{
			Node: s.Node, Name: name, Namespace: namespace, RunID: hash, Profile: profile,
			Image: image, ImagePullPolicy: corev1.PullIfNotPresent, ImagePullSecrets: pullSecrets, Requests: requests,
			Env: env, SecretEnv: secretEnv, Now: s.Now, Deadline: deadline, Command: argv,
		})
	case nsenter.Name:
		image := spec.Backend.Image
		if image == "" {
			image = nsenter.DefaultAgentImage
		}
		nss := nsenter.DefaultNamespaces()
		if len(spec.Backend.Namespaces) > 0 {
			nss = nil
			for _, n := range spec.Backend.Namespaces {
				nss = append(nss, nsenter.Namespace(n))
			}
		}
		argv = nsenter.AgentArgv(nss, []string{"sh", "-c", script})
		pod, err = nsenter.BuildPod(nsenter.PodSpec{
			Node: s.Node, Name: name, Namespace: namespace, RunID: hash,
			Image: image, ImagePullPolicy: corev1.PullIfNotPresent, ImagePullSecrets: pullSecrets, Requests: requests,
			Env: env, SecretEnv: secretEnv, Now: s.Now, Deadline: deadline, Command: argv,
		})
	default:
		return nil, fmt.Errorf("spec.backend.name %q: a NodeScript runs on nodes; use debugpod or nsenter (%s targets a container)", b, b)
	}
	if err != nil {
		return nil, fmt.Errorf("spec.backend: %w", err)
	}
	c := &pod.Spec.Containers[0]
	// The script runs as written: the kubelet would expand $(VAR) and $$.
	c.Command, c.Args = podexec.EscapeExpansionAll(argv), nil
	c.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	if ns.UID != "" {
		// Deleting the NodeScript deletes its run pods (the garbage
		// collector); a cluster-scoped owner may own namespaced pods.
		pod.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeScript", Name: ns.Name, UID: ns.UID, Controller: ptr.To(true),
		}}
	}
	pod.Labels[LabelNodeScript] = ns.Name
	pod.Labels[LabelAction] = s.Action
	pod.Annotations[AnnotationAttempt] = strconv.Itoa(s.Attempt)
	return pod, nil
}
