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
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nodeexec/preflight"
	"github.com/nodeexec/nodeexec/nsenter"
)

// Name is the backend's name in results and in `nodeexec run --backend`.
const Name = "runtime"

// DefaultNamespace is the namespace of the agent pods when Options.Namespace
// is empty.
const DefaultNamespace = podexec.DefaultNamespace

// PodOptions are the options every pod backend has (podexec.PodOptions):
// the client, the namespace of the pods, the image, its pull policy,
// secrets, priority class and requests, the run ID and the test hooks, each
// field with its default. Options embeds them.
type PodOptions = podexec.PodOptions

// Options configure a Backend.
//
//	runtimeexec.Options{PodOptions: runtimeexec.PodOptions{Client: client, Config: cfg}, PodNamespace: "shop", Pod: "web-0"}
type Options struct {
	// PodOptions are the client, the namespace where the agent pods are
	// created (default DefaultNamespace; its Pod Security level must be
	// "privileged"), the agent image (default agent.DefaultImage), its pull
	// policy, secrets, priority class and requests, the run ID and the test
	// hooks; see PodOptions for each field's default.
	PodOptions
	// PodNamespace and Pod name the target pod. Pod is required;
	// PodNamespace defaults to Namespace.
	PodNamespace, Pod string
	// Container is the target container. Defaults to the pod's
	// kubectl.kubernetes.io/default-container annotation, else its first container.
	Container string
	// Namespaces are the Linux namespaces of the container the command
	// enters. Defaults to nsenter.DefaultNamespaces() (mnt, uts, ipc, net, pid).
	Namespaces []nsenter.Namespace
	// RuntimeEndpoints are runtime socket paths on the node, tried before the
	// well-known ones (cri.DefaultEndpoints). Optional.
	RuntimeEndpoints []string
	// NoProcFallback stops the agent from scanning /proc/*/cgroup for the
	// container when no runtime socket answers (the run then fails with
	// agent.ErrNotRun).
	NoProcFallback bool
}

// Backend is the runtime backend. It is safe for concurrent use. RunID is
// the value of the run-ID label on its agent pods.
type Backend struct {
	*podBackend
	o Options

	mu        sync.Mutex
	container string // the target container Target last found, for Pod
}

// podBackend is embedded unexported: Backend gets its RunID.
type podBackend = podexec.PodBackend

// The optional interfaces of package nodeexec the backend implements.
var (
	_ nodeexec.Backend        = (*Backend)(nil)
	_ nodeexec.Preflighter    = (*Backend)(nil)
	_ nodeexec.PodDescriber   = (*Backend)(nil)
	_ nodeexec.Requirer       = (*Backend)(nil)
	_ nodeexec.TargetResolver = (*Backend)(nil)
)

// New validates o and returns a Backend. Errors name the bad field; the API
// server is not contacted.
func New(o Options) (*Backend, error) {
	base, err := podexec.NewPodBackend(Name, agent.DefaultImage, &o.PodOptions)
	if err != nil {
		return nil, err
	}
	if o.PodNamespace == "" {
		o.PodNamespace = o.Namespace
	}
	if msgs := validation.IsDNS1123Label(o.PodNamespace); len(msgs) > 0 {
		return nil, fmt.Errorf("runtime: invalid namespace %q: %s", o.PodNamespace, strings.Join(msgs, "; "))
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
	return &Backend{podBackend: base, o: o}, nil
}

// Name returns "runtime".
func (b *Backend) Name() string { return Name }

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
	node, container, containerID, err = ContainerTarget(pod, b.o.Container)
	if err == nil {
		b.mu.Lock()
		b.container = container
		b.mu.Unlock()
	}
	return node, container, containerID, err
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
	node, _, id, err := b.targetOn(ctx, req.Node)
	if err != nil {
		return "", nil, err
	}
	return node, b.agentArgv(id, req), nil
}

// targetOn is Target, refused with nodeexec.ErrWrongNode when node is set
// and is not the target pod's node.
func (b *Backend) targetOn(ctx context.Context, node string) (pnode, container, containerID string, err error) {
	pnode, container, containerID, err = b.Target(ctx)
	if err == nil && node != "" && node != pnode {
		err = fmt.Errorf("%w: pod %s/%s runs on node %q, not %q", nodeexec.ErrWrongNode, b.o.PodNamespace, b.o.Pod, pnode, node)
	}
	return pnode, container, containerID, err
}

func (b *Backend) agentArgv(id string, req nodeexec.Request) []string {
	return agent.ContainerExecArgv(agent.ContainerExecArgs{ContainerID: id, Endpoints: b.o.RuntimeEndpoints, Namespaces: b.o.Namespaces, NoProcFallback: b.o.NoProcFallback, Env: req.Env, Argv: req.Argv()})
}

// Pod builds the agent pod Run would create on req.Node for req, without
// creating it or contacting the API server (nodeexec.PodDescriber, what
// --explain prints). req.Node is the target pod's node (TargetNode). The
// target container it records is Options.Container, else the one Target
// (or TargetNode) last found; with neither, Pod returns an error saying so.
func (b *Backend) Pod(req nodeexec.Request) (*corev1.Pod, error) {
	container := b.o.Container
	if container == "" {
		b.mu.Lock()
		container = b.container
		b.mu.Unlock()
	}
	if container == "" {
		return nil, fmt.Errorf("runtime: the target container of pod %s/%s is not known yet: set Options.Container, or call TargetNode first", b.o.PodNamespace, b.o.Pod)
	}
	return b.pod(container, req)
}

// pod is the agent pod on req.Node for req, entering container.
func (b *Backend) pod(container string, req nodeexec.Request) (*corev1.Pod, error) {
	now := b.o.Clock.Now()
	return BuildPod(PodSpec{
		PodBase: podexec.NewPodBase(&b.o.PodOptions, req, podexec.PodName(req.Node, b.o.NameSuffix()), now, req.Argv()),
		Target:  b.o.PodNamespace + "/" + b.o.Pod + "/" + container,
	})
}

// launch is the agent pod on req.Node for the target container and the
// agent command line that enters the container of ID id, resumable through
// the agent's spool (agent.SpoolFor).
func (b *Backend) launch(container, id string, req nodeexec.Request) (podexec.Launch, error) {
	pod, err := b.pod(container, req)
	if err != nil {
		return podexec.Launch{}, err
	}
	argv, resume := agent.SpoolFor(b.agentArgv(id, req), pod.Name, req)
	return podexec.Launch{Pod: pod, Container: agent.ContainerName, Argv: argv, Resume: resume}, nil
}

// Run runs req inside the target container and deletes the agent pod. The
// target is looked up first (errors of Target, nothing created then);
// req.Node, when set, must be the pod's node (nodeexec.ErrWrongNode). Other errors
// are nodeexec.Backend's, plus agent.ErrNotRun when the agent could not find the
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
	node, container, id, err := b.targetOn(ctx, req.Node)
	if err != nil {
		return fail(err)
	}
	req.Node = node
	tail := &agent.TailWriter{W: req.Stderr}
	req.Stderr = tail
	res, err := b.podBackend.Run(ctx, req, func(req nodeexec.Request) (podexec.Launch, error) { return b.launch(container, id, req) })
	return res, agent.NotRunError(err, tail)
}

// Preflight looks the target up (errors of Target) and asks the API server
// to admit the agent pod for it without creating it (a server-side dry-run
// create), so that an RBAC refusal or a Pod Security rejection (the agent
// pod needs "privileged") is reported before any pod exists. Errors wrap
// nodeexec.ErrForbidden for those. node, when set, must be the pod's node.
func (b *Backend) Preflight(ctx context.Context, node string) error {
	node, container, id, err := b.targetOn(ctx, node)
	if err != nil {
		return err
	}
	return b.podBackend.Preflight(ctx, node, func(req nodeexec.Request) (podexec.Launch, error) { return b.launch(container, id, req) })
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
