// Package runtimeexec is the nodeexec backend named "runtime": it runs a
// command inside a running container of a pod, with the container's own
// namespaces (mount included, so the container's root filesystem, network,
// hostname and processes), without touching the target pod and without
// needing anything in its image.
//
// Per run: GET the target pod, read its node and the container's ID
// (status.containerStatuses[].containerID; a container that is not running
// is refused), create a privileged hostPID agent pod on that node (BuildPod:
// the node's root filesystem read-only at /host, where the runtime sockets
// are), and run over exec, through the API server,
//
//	/usr/local/bin/nodeexec agent container-exec --container-id ID -- CMD...
//
// which asks the node's container runtime over CRI for the container's PID
// (falling back to a /proc/*/cgroup scan, package cri), enters its
// namespaces (package nsenter) and runs CMD with the container's environment.
// The agent pod is deleted after success, failure, timeout and cancellation
// (podexec). No port is opened anywhere.
//
// # Permissions
//
// RBAC: get on pods in the target's namespace; in Options.Namespace create,
// get, list, watch, delete on pods, create on pods/exec, list, watch on
// events. Pod Security: the agent pod is privileged with hostPID and a
// hostPath volume, so Options.Namespace must be "privileged"; elsewhere the
// create is refused with an error wrapping nodeexec.ErrForbidden. The target
// pod's namespace may have any level.
package runtimeexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nodeexec/preflight"
	"github.com/nodeexec/nodeexec/nsenter"
)

// Name is the backend's name in results and in `nodeexec run --backend`.
const Name = "runtime"

// DefaultNamespace is the namespace of the agent pods when Options.Namespace
// is empty.
const DefaultNamespace = "default"

// Sentinel errors: the run was refused and nothing was created. Returned
// errors wrap them; test with errors.Is. A missing pod or container, a
// container not running and a pod on another node wrap the shared
// nodeexec.ErrPodNotFound, nodeexec.ErrContainerNotFound, ErrContainerNotRunning and
// nodeexec.ErrWrongNode.
var (
	// ErrAgent: the agent ran but could not run the command (the container
	// runtime did not know the container and the /proc scan failed, or
	// entering its namespaces failed); the message is the agent's.
	ErrAgent = errors.New("the agent could not run the command")
)

// Options configure a Backend.
type Options struct {
	// Client talks to the API server. Required.
	Client kubernetes.Interface
	// Config is the client configuration, used for the exec streams. Required
	// unless Streamer is set.
	Config *rest.Config
	// PodNamespace and Pod name the target pod. Pod is required;
	// PodNamespace defaults to Namespace.
	PodNamespace, Pod string
	// Container is the target container. Defaults to the pod's
	// kubectl.kubernetes.io/default-container annotation, else its first container.
	Container string
	// Namespace is where the agent pods are created; its Pod Security level
	// must be "privileged". Defaults to DefaultNamespace.
	Namespace string
	// Namespaces are the Linux namespaces of the container the command
	// enters. Defaults to nsenter.DefaultNamespaces() (mnt, uts, ipc, net, pid).
	Namespaces []nsenter.Namespace
	// RuntimeEndpoints are runtime socket paths on the node, tried before the
	// well-known ones (cri.DefaultEndpoints). Optional.
	RuntimeEndpoints []string
	// NoProcFallback stops the agent from scanning /proc/*/cgroup for the
	// container when no runtime socket answers (the run then fails with
	// ErrAgent).
	NoProcFallback bool
	// Image is the agent image. Defaults to nsenter.DefaultAgentImage.
	Image string
	// ImagePullPolicy defaults to IfNotPresent.
	ImagePullPolicy corev1.PullPolicy
	// ImagePullSecrets names secrets in Namespace for pulling Image. Optional.
	ImagePullSecrets []string
	// PriorityClassName of the agent pods. Optional.
	PriorityClassName string
	// Requests of the agent container. Defaults to 10m CPU, 16Mi memory.
	Requests corev1.ResourceList
	// RunID labels every agent pod (nodeexec.LabelRunID). Defaults to a
	// random 10-character ID.
	RunID string
	// Clock drives timers and timestamps. Defaults to the real clock.
	Clock clock.WithTicker
	// NameSuffix returns the random part of a pod name. Defaults to 5 random
	// lowercase letters and digits.
	NameSuffix func() string
	// Streamer overrides how commands are run in the pod (tests). Defaults to
	// podexec.NewStreamer(Config, Client.CoreV1().RESTClient()).
	Streamer podexec.Streamer
}

// Backend is the runtime backend. It is safe for concurrent use.
type Backend struct {
	o    Options
	exec *podexec.Executor
}

var (
	_ nodeexec.Backend     = (*Backend)(nil)
	_ nodeexec.Preflighter = (*Backend)(nil)
)

// New validates o and returns a Backend. Errors name the bad field; the API
// server is not contacted.
func New(o Options) (*Backend, error) {
	if o.Client == nil {
		return nil, errors.New("runtime: Options.Client is nil: give a Kubernetes client")
	}
	if o.Config == nil && o.Streamer == nil {
		return nil, errors.New("runtime: Options.Config is nil: give the rest.Config the client was built from")
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.PodNamespace == "" {
		o.PodNamespace = o.Namespace
	}
	for _, ns := range []string{o.Namespace, o.PodNamespace} {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			return nil, fmt.Errorf("runtime: invalid namespace %q: %s", ns, strings.Join(msgs, "; "))
		}
	}
	if o.Pod == "" {
		return nil, errors.New("runtime: Options.Pod is empty: give the target pod (--pod [NAMESPACE/]NAME)")
	}
	if msgs := validation.IsDNS1123Subdomain(o.Pod); len(msgs) > 0 {
		return nil, fmt.Errorf("runtime: invalid pod name %q: %s", o.Pod, strings.Join(msgs, "; "))
	}
	if o.Namespaces == nil {
		o.Namespaces = nsenter.DefaultNamespaces()
	}
	if len(o.Namespaces) == 0 {
		return nil, errors.New("runtime: Options.Namespaces is empty: give at least one, or nil for the default")
	}
	for _, n := range o.Namespaces {
		if _, err := nsenter.ParseNamespaces(string(n)); err != nil || strings.Contains(string(n), ",") || n == "all" {
			return nil, fmt.Errorf("runtime: Options.Namespaces: unknown namespace %q: %w", n, errors.Join(err, nsenter.ErrUnknownNamespace))
		}
	}
	o.Namespaces = slices.Clone(o.Namespaces)
	for _, ep := range o.RuntimeEndpoints {
		if p := strings.TrimPrefix(ep, "unix://"); !strings.HasPrefix(p, "/") {
			return nil, fmt.Errorf("runtime: runtime endpoint %q: give an absolute socket path on the node", ep)
		}
	}
	if o.Image == "" {
		o.Image = nsenter.DefaultAgentImage
	}
	switch o.ImagePullPolicy {
	case "":
		o.ImagePullPolicy = corev1.PullIfNotPresent
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return nil, fmt.Errorf("runtime: invalid image pull policy %q: want Always, IfNotPresent or Never", o.ImagePullPolicy)
	}
	if o.Requests == nil {
		o.Requests = podexec.DefaultRequests()
	}
	if o.RunID == "" {
		o.RunID = podexec.RandomSuffix(10)
	}
	if msgs := validation.IsValidLabelValue(o.RunID); len(msgs) > 0 {
		return nil, fmt.Errorf("runtime: invalid RunID %q: %s", o.RunID, strings.Join(msgs, "; "))
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.NameSuffix == nil {
		o.NameSuffix = func() string { return podexec.RandomSuffix(5) }
	}
	if o.Streamer == nil {
		o.Streamer = podexec.NewStreamer(o.Config, o.Client.CoreV1().RESTClient())
	}
	lease, err := podexec.NewLease(podexec.LeaseOptions{Client: o.Client, Namespace: o.Namespace, RunID: o.RunID, Clock: o.Clock})
	if err != nil {
		return nil, err
	}
	exec, err := podexec.New(podexec.Options{
		Client:   o.Client,
		Streamer: o.Streamer,
		Tracker:  podexec.NewTracker(o.Client, o.Namespace, nodeexec.LabelRunID+"="+o.RunID),
		Backend:  Name,
		Clock:    o.Clock,
		Lease:    lease,
	})
	if err != nil {
		return nil, err
	}
	return &Backend{o: o, exec: exec}, nil
}

// Name returns "runtime".
func (b *Backend) Name() string { return Name }

// RunID is the value of the run-ID label on this backend's pods.
func (b *Backend) RunID() string { return b.o.RunID }

// Requirements are the privileged Pod Security level of the agent pod in
// the backend's namespace and the RBAC to read the target pod, run an agent
// pod on its node (create, watch, delete, exec), the run's Lease, the
// kubelet's Events, and list nodes.
func (b *Backend) Requirements() nodeexec.Requirements {
	return nodeexec.Requirements{
		Namespace: b.o.Namespace, PodSecurityLevel: preflight.LevelPrivileged,
		Permissions: slices.Concat([]nodeexec.Permission{{Verb: "get", Resource: "pods"}}, preflight.PodLifecycle(), preflight.RunLease(),
			preflight.Exec(), preflight.Events(), preflight.Nodes()),
	}
}

// TargetNode is the node of Target.
func (b *Backend) TargetNode(ctx context.Context) (string, error) {
	node, _, _, err := b.Target(ctx)
	return node, err
}

// Target is what a run would enter: the target pod's node, the container's
// name and its runtime ID ("containerd://..."). It GETs the pod (RBAC: get
// pods in PodNamespace). Errors wrap nodeexec.ErrPodNotFound, nodeexec.ErrContainerNotFound,
// nodeexec.ErrContainerNotRunning or nodeexec.ErrForbidden, or are the API error.
func (b *Backend) Target(ctx context.Context) (node, container, containerID string, err error) {
	ref := b.o.PodNamespace + "/" + b.o.Pod
	pod, err := b.o.Client.CoreV1().Pods(b.o.PodNamespace).Get(ctx, b.o.Pod, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", "", "", fmt.Errorf("%w: pod %s does not exist", nodeexec.ErrPodNotFound, ref)
	case apierrors.IsForbidden(err):
		return "", "", "", fmt.Errorf("%w: getting pod %s: %s (RBAC: get pods)", nodeexec.ErrForbidden, ref, err.Error())
	case err != nil:
		return "", "", "", fmt.Errorf("getting pod %s: %w", ref, err)
	}
	return ContainerTarget(pod, b.o.Container)
}

// ContainerTarget checks that container (default: the
// kubectl.kubernetes.io/default-container annotation, else the first) of pod
// runs and returns the pod's node, the container's name and ID. Errors wrap
// nodeexec.ErrContainerNotFound or nodeexec.ErrContainerNotRunning.
func ContainerTarget(pod *corev1.Pod, container string) (node, name, id string, err error) {
	ref := pod.Namespace + "/" + pod.Name
	if container == "" {
		container = pod.Annotations["kubectl.kubernetes.io/default-container"]
	}
	if container == "" && len(pod.Spec.Containers) > 0 {
		container = pod.Spec.Containers[0].Name
	}
	var names []string
	for _, c := range pod.Spec.Containers {
		names = append(names, c.Name)
	}
	if !slices.Contains(names, container) {
		return "", "", "", fmt.Errorf("%w: pod %s has no container %q (its containers: %s)", nodeexec.ErrContainerNotFound, ref, container, strings.Join(names, ", "))
	}
	if pod.DeletionTimestamp != nil {
		return "", "", "", fmt.Errorf("%w: pod %s is being deleted", nodeexec.ErrContainerNotRunning, ref)
	}
	state := "without a status yet"
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != container {
			continue
		}
		switch s := cs.State; {
		case s.Running != nil && cs.ContainerID != "" && pod.Spec.NodeName != "":
			return pod.Spec.NodeName, container, cs.ContainerID, nil
		case s.Terminated != nil:
			state = fmt.Sprintf("terminated (%s, exit code %d)", s.Terminated.Reason, s.Terminated.ExitCode)
		case s.Waiting != nil:
			state = fmt.Sprintf("waiting (%s)", s.Waiting.Reason)
		}
	}
	return "", "", "", fmt.Errorf("%w: container %q of pod %s (phase %s) is %s", nodeexec.ErrContainerNotRunning, container, ref, pod.Status.Phase, state)
}

// AgentCommand returns the node to run on and the agent command line that
// runs req inside the target container. It GETs the target pod (see Target).
// A resident agent (package resident) runs the same command line.
func (b *Backend) AgentCommand(ctx context.Context, req nodeexec.Request) (node string, argv []string, err error) {
	if err := noSecretEnv(req); err != nil {
		return "", nil, err
	}
	node, _, id, err := b.Target(ctx)
	if err != nil {
		return "", nil, err
	}
	if req.Node != "" && req.Node != node {
		return "", nil, fmt.Errorf("%w: pod %s/%s runs on node %q, not %q", nodeexec.ErrWrongNode, b.o.PodNamespace, b.o.Pod, node, req.Node)
	}
	return node, b.agentArgv(id, req), nil
}

func (b *Backend) agentArgv(id string, req nodeexec.Request) []string {
	return AgentArgv(AgentArgs{ContainerID: id, Endpoints: b.o.RuntimeEndpoints, Namespaces: b.o.Namespaces, NoProcFallback: b.o.NoProcFallback, Env: req.Env, Argv: req.Argv()})
}

// Pod builds the agent pod Run would create on node for req, without creating it.
func (b *Backend) Pod(node, container string, req nodeexec.Request) (*corev1.Pod, error) {
	now := b.o.Clock.Now()
	return BuildPod(PodSpec{
		Node:              node,
		Name:              podexec.PodName(node, b.o.NameSuffix()),
		Namespace:         b.o.Namespace,
		RunID:             b.o.RunID,
		Image:             b.o.Image,
		ImagePullPolicy:   b.o.ImagePullPolicy,
		ImagePullSecrets:  b.o.ImagePullSecrets,
		PriorityClassName: b.o.PriorityClassName,
		Requests:          b.o.Requests,
		Target:            b.o.PodNamespace + "/" + b.o.Pod + "/" + container,
		Now:               now,
		Deadline:          deadline(now, req.EffectiveTimeout()),
		Command:           req.Argv(),
	})
}

// Run runs req inside the target container and deletes the agent pod. The
// target is looked up first (errors of Target, nothing created then);
// req.Node, when set, must be the pod's node (nodeexec.ErrWrongNode). Other errors
// are nodeexec.Backend's, plus ErrAgent when the agent could not find the
// container or enter it.
func (b *Backend) Run(ctx context.Context, req nodeexec.Request) (nodeexec.Result, error) {
	fail := func(err error) (nodeexec.Result, error) {
		now := b.o.Clock.Now()
		return nodeexec.Result{Node: req.Node, ExitCode: -1, Backend: Name, Started: now, Finished: now}, err
	}
	if err := req.Validate(); err != nil {
		return fail(err)
	}
	if err := noSecretEnv(req); err != nil {
		return fail(err)
	}
	node, container, id, err := b.Target(ctx)
	if err != nil {
		return fail(err)
	}
	if req.Node != "" && req.Node != node {
		return fail(fmt.Errorf("%w: pod %s/%s runs on node %q, not %q", nodeexec.ErrWrongNode, b.o.PodNamespace, b.o.Pod, node, req.Node))
	}
	req.Node = node
	pod, err := b.Pod(node, container, req)
	if err != nil {
		return fail(err)
	}
	argv, resume := nsenter.SpoolFor(b.agentArgv(id, req), pod.Name, req)
	tail := &TailWriter{W: req.Stderr}
	req.Stderr = tail
	res, err := b.exec.RunResumable(ctx, pod, nsenter.AgentContainerName, argv, req, resume)
	return res, AgentError(err, tail)
}

// AgentError turns the agent's AgentErrorExitCode into an error wrapping
// ErrAgent with the agent's message (the last line of its stderr, from
// tail); other errors are returned unchanged.
func AgentError(err error, tail *TailWriter) error {
	var ee *nodeexec.ExitError
	if !errors.As(err, &ee) || ee.Code != AgentErrorExitCode {
		return err
	}
	msg := tail.LastLine()
	if msg == "" {
		msg = fmt.Sprintf("exit code %d and no message", AgentErrorExitCode)
	}
	return fmt.Errorf("%w on node %q: %s", ErrAgent, ee.Node, msg)
}

// TailWriter passes writes to W (when non-nil) and keeps the last 4 KiB.
type TailWriter struct {
	W   io.Writer
	mu  sync.Mutex
	buf []byte
}

// Write implements io.Writer.
func (t *TailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 4096 {
		t.buf = t.buf[len(t.buf)-4096:]
	}
	t.mu.Unlock()
	if t.W == nil {
		return len(p), nil
	}
	return t.W.Write(p)
}

// LastLine is the last non-empty line written.
func (t *TailWriter) LastLine() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimRight(string(t.buf), "\n"), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// Preflight looks the target up (errors of Target) and asks the API server
// to admit the agent pod for it without creating it (a server-side dry-run
// create), so that an RBAC refusal or a Pod Security rejection (the agent
// pod needs "privileged") is reported before any pod exists. Errors wrap
// nodeexec.ErrForbidden for those. node, when set, must be the pod's node.
func (b *Backend) Preflight(ctx context.Context, node string) error {
	pnode, container, _, err := b.Target(ctx)
	if err != nil {
		return err
	}
	if node != "" && node != pnode {
		return fmt.Errorf("%w: pod %s/%s runs on node %q, not %q", nodeexec.ErrWrongNode, b.o.PodNamespace, b.o.Pod, pnode, node)
	}
	pod, err := b.Pod(pnode, container, nodeexec.Request{Node: pnode, Command: []string{"true"}})
	if err != nil {
		return err
	}
	_, err = b.o.Client.CoreV1().Pods(b.o.Namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return podexec.CreateError(pod, err)
	}
	return nil
}

// noSecretEnv refuses Request.SecretEnv: the command runs in the target
// container's own environment, through the agent, and no pod of ours holds
// the variables.
func noSecretEnv(req nodeexec.Request) error {
	if len(req.SecretEnv) > 0 {
		return errors.New("the runtime backend does not support SecretEnv (--env-from-secret): the command runs with the target container's own environment (plus Env, -e); use the ephemeral backend to run beside the container with variables from a Secret")
	}
	return nil
}
