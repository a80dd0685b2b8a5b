// Package ephemeral is the nodeexec backend that runs a command in an
// ephemeral container added to a running pod, sharing the process namespace
// of one of its containers (targetContainerName), as
// `kubectl debug POD --target=CONTAINER --profile=PROFILE -i` does. The node
// is the pod's node; the command sees the target's processes (ps, /proc/PID/root)
// and the pod's network.
//
// # How a run goes
//
//  1. GET the pod; refuse (nothing added) if it does not exist
//     (nodeexec.ErrPodNotFound), is not on Request.Node, has no such container
//     (nodeexec.ErrContainerNotFound), the target is not running (nodeexec.ErrContainerNotRunning),
//     or it already holds MaxEphemeralContainers of ours (ErrTooManyEphemeralContainers).
//  2. Add the container built by BuildContainer through the
//     pods/ephemeralcontainers subresource: a strategic merge patch, as
//     kubectl sends it, that also carries the pod's resourceVersion, so a
//     concurrent change makes it fail with a conflict and it is retried from
//     step 1 (concurrent runs cannot pass the limit). A 404 without a name means the subresource is missing:
//     ErrEphemeralContainersDisabled.
//  3. Watch the pod; once the container runs, attach to it (pods/attach) with
//     standard input, send the start signal (a newline) and then
//     Request.Stdin. The container's command waits for that signal, so the
//     attach session is connected before the command writes anything and no
//     output is lost.
//  4. Read the exit code from status.ephemeralContainerStatuses[].state.terminated.exitCode.
//
// # Ephemeral containers cannot be removed
//
// Kubernetes has no way to delete an ephemeral container: each one stays in
// the pod's spec and status (and its log on the node) until the pod is
// deleted. This backend therefore makes sure the process ends: `timeout -s
// KILL` bounds it on the node (Request.Timeout plus KillSlack, also when the
// client is gone), and on a client-side timeout or cancellation the backend
// kills it at once (exec `kill -KILL` in the container, which needs create on
// pods/exec) and waits for the terminated status. It also refuses to add more
// than MaxEphemeralContainers to one pod. Ephemeral containers have no labels
// or annotations, and nodeexec does not modify the metadata of a pod it does
// not own, so the run ID and deadline are recorded in the container's name
// (NamePrefix + random) and environment (EnvRunID, EnvDeadline).
//
// # Permissions
//
// RBAC in the pod's namespace: get, list, watch on pods; patch on
// pods/ephemeralcontainers; create on pods/attach; create on pods/exec (to
// kill a timed-out or cancelled command at once; without it the command ends
// at its deadline). Pod Security is checked on the patch: baseline and
// restricted fit their levels; general (SYS_PTRACE), netadmin (NET_ADMIN,
// NET_RAW) and sysadmin (privileged) need a privileged namespace; legacy
// fits baseline.
package ephemeral

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/kubectl/pkg/cmd/debug"
	"k8s.io/utils/clock"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nodeexec/preflight"
)

// Name is the backend's name in results.
const Name = "ephemeral"

// Defaults for Options.
const (
	// DefaultImage is the image of the ephemeral container. It must contain
	// `sh` and `timeout` (see BuildContainer); busybox has both.
	DefaultImage = "busybox:stable"
	// DefaultProfile lets the command trace the target's processes
	// (SYS_PTRACE) without further privileges, as kubectl's default.
	DefaultProfile = debug.ProfileGeneral
	// DefaultNamespace is the pod's namespace when Options.Namespace is empty.
	DefaultNamespace = "default"
	// DefaultMaxEphemeralContainers is how many ephemeral containers of ours
	// one pod may hold. Each one stays in the pod's spec and status, and its
	// log on the node, until the pod is deleted; 25 keeps a pod object far
	// below the API server's request size limit (each adds about 1 KiB plus
	// the command) and `kubectl describe` readable, while allowing a day of
	// occasional debugging.
	DefaultMaxEphemeralContainers = 25
	// KillSlack is added to Request.Timeout to give the on-node `timeout`:
	// the client kills the command itself when its timeout expires; the
	// on-node limit is the backstop if the client is gone.
	KillSlack = 5 * time.Second
	// DefaultCleanupTimeout bounds the kill and the wait for the terminated
	// status after a timeout or cancellation.
	DefaultCleanupTimeout = 30 * time.Second
	// DefaultRetryInterval is the first pause between attach attempts refused
	// because the container is not running yet; it grows to 1 s.
	DefaultRetryInterval = 100 * time.Millisecond
)

// Sentinel errors: the run was refused and nothing was added to the pod.
// Returned errors wrap them; test with errors.Is. A missing pod or
// container, a target not running and a pod on another node wrap the
// shared nodeexec.ErrPodNotFound, nodeexec.ErrContainerNotFound,
// ErrContainerNotRunning and nodeexec.ErrWrongNode.
var (
	// ErrTooManyEphemeralContainers: the pod already holds
	// Options.MaxEphemeralContainers of ours; delete and recreate the pod (a
	// Deployment's `kubectl rollout restart`) to make room.
	ErrTooManyEphemeralContainers = errors.New("too many ephemeral containers")
	// ErrEphemeralContainersDisabled: the API server has no
	// pods/ephemeralcontainers subresource (404 without a name, as kubectl detects it).
	ErrEphemeralContainersDisabled = errors.New("ephemeral containers are disabled in this cluster")
)

// Attacher attaches to a running container over the attach subresource. It
// returns an error satisfying podexec.IsContainerNotReady when the attempt was
// refused because the container does not run yet (nothing was streamed).
type Attacher interface {
	Attach(ctx context.Context, namespace, pod string, opts *corev1.PodAttachOptions, streams remotecommand.StreamOptions) error
}

// Options configure a Backend.
type Options struct {
	// Client talks to the API server. Required.
	Client kubernetes.Interface
	// Config is the client configuration, used for the attach and exec
	// streams. Required unless both Attacher and Streamer are set.
	Config *rest.Config
	// Namespace of the pod. Defaults to DefaultNamespace.
	Namespace string
	// Pod is the name of the running pod to add the ephemeral container to. Required.
	Pod string
	// Container is the target container whose process namespace is shared.
	// Defaults to DefaultTarget(pod): the kubectl.kubernetes.io/default-container
	// annotation, else the pod's first container.
	Container string
	// Profile is kubectl debug's profile (see Profiles). Defaults to DefaultProfile.
	Profile string
	// Image of the ephemeral container; it must contain `sh` and `timeout`.
	// Defaults to DefaultImage.
	Image string
	// ImagePullPolicy defaults to IfNotPresent.
	ImagePullPolicy corev1.PullPolicy
	// MaxEphemeralContainers is how many ephemeral containers of ours (named
	// NamePrefix...) a pod may hold before Run refuses with
	// ErrTooManyEphemeralContainers. Defaults to DefaultMaxEphemeralContainers.
	MaxEphemeralContainers int
	// RunID is recorded in every container's EnvRunID. Defaults to a random
	// 10-character ID.
	RunID string
	// Clock drives timers and timestamps. Defaults to the real clock.
	Clock clock.WithTicker
	// NameSuffix returns the random part of a container name. Defaults to 10
	// random lowercase letters and digits.
	NameSuffix func() string
	// Attacher overrides how the backend attaches (tests). Defaults to
	// NewAttacher(Config, Client.CoreV1().RESTClient()).
	Attacher Attacher
	// Streamer overrides how the backend execs `kill` (tests). Defaults to
	// podexec.NewStreamer(Config, Client.CoreV1().RESTClient()).
	Streamer podexec.Streamer
}

// Backend is the ephemeral-container backend for one pod. It is safe for
// concurrent use: concurrent runs add one container each.
type Backend struct {
	o Options
	// last is the target pod as last read, for the next patch's first
	// attempt (see check).
	last *lastPod
}

// lastPod is the target pod as last read. The ephemeral-container patch
// carries the pod's resourceVersion, so a patch made from a pod that has
// changed since fails with a conflict, and the pod is read again: reusing
// the last read is safe, and saves a GET per call of Target, Preflight and
// Run in a row.
type lastPod struct {
	mu  sync.Mutex
	pod *corev1.Pod
}

func (l *lastPod) get() *corev1.Pod {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pod == nil {
		return nil
	}
	return l.pod.DeepCopy()
}

func (l *lastPod) set(p *corev1.Pod) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pod = p
}

// The optional interfaces of package nodeexec the backend implements. It
// creates no pod (it adds an ephemeral container to the target pod), so it
// is no PodDescriber.
var (
	_ nodeexec.Backend        = (*Backend)(nil)
	_ nodeexec.Preflighter    = (*Backend)(nil)
	_ nodeexec.Requirer       = (*Backend)(nil)
	_ nodeexec.TargetResolver = (*Backend)(nil)
)

// New validates o and returns a Backend. It does not contact the API server;
// see Target. Errors name the bad field.
func New(o Options) (*Backend, error) {
	if o.Client == nil {
		return nil, errors.New("ephemeral: Options.Client is nil: give a Kubernetes client")
	}
	if o.Config == nil && (o.Attacher == nil || o.Streamer == nil) {
		return nil, errors.New("ephemeral: Options.Config is nil: give the rest.Config the client was built from")
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if msgs := validation.IsDNS1123Label(o.Namespace); len(msgs) > 0 {
		return nil, fmt.Errorf("ephemeral: invalid namespace %q: %s", o.Namespace, strings.Join(msgs, "; "))
	}
	if o.Pod == "" {
		return nil, errors.New("ephemeral: Options.Pod is empty: name the running pod to debug")
	}
	if msgs := validation.IsDNS1123Subdomain(o.Pod); len(msgs) > 0 {
		return nil, fmt.Errorf("ephemeral: invalid pod name %q: %s", o.Pod, strings.Join(msgs, "; "))
	}
	if o.Container != "" {
		if msgs := validation.IsDNS1123Label(o.Container); len(msgs) > 0 {
			return nil, fmt.Errorf("ephemeral: invalid container name %q: %s", o.Container, strings.Join(msgs, "; "))
		}
	}
	if o.Profile == "" {
		o.Profile = DefaultProfile
	}
	if _, err := debug.NewProfileApplier(o.Profile, debug.KeepFlags{}); err != nil {
		return nil, fmt.Errorf("ephemeral: unknown profile %q: want one of %s", o.Profile, strings.Join(Profiles(), ", "))
	}
	if o.Image == "" {
		o.Image = DefaultImage
	}
	switch o.ImagePullPolicy {
	case "":
		o.ImagePullPolicy = corev1.PullIfNotPresent
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return nil, fmt.Errorf("ephemeral: invalid image pull policy %q: want Always, IfNotPresent or Never", o.ImagePullPolicy)
	}
	switch {
	case o.MaxEphemeralContainers == 0:
		o.MaxEphemeralContainers = DefaultMaxEphemeralContainers
	case o.MaxEphemeralContainers < 0:
		return nil, fmt.Errorf("ephemeral: MaxEphemeralContainers %d is negative: give a positive number, or 0 for the default %d", o.MaxEphemeralContainers, DefaultMaxEphemeralContainers)
	}
	if o.RunID == "" {
		o.RunID = podexec.RandomSuffix(10)
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.NameSuffix == nil {
		o.NameSuffix = func() string { return podexec.RandomSuffix(10) }
	}
	if o.Attacher == nil {
		o.Attacher = NewAttacher(o.Config, o.Client.CoreV1().RESTClient())
	}
	if o.Streamer == nil {
		o.Streamer = podexec.NewStreamer(o.Config, o.Client.CoreV1().RESTClient())
	}
	return &Backend{o: o, last: &lastPod{}}, nil
}

// Name returns "ephemeral".
func (b *Backend) Name() string { return Name }

// RunID is the value of EnvRunID in this backend's containers.
func (b *Backend) RunID() string { return b.o.RunID }

// Requirements are the RBAC of an ephemeral container in the target pod's
// namespace: read and watch the pod, add the container, attach to it, exec
// (to stop it on timeout), and list nodes. It creates no pod, so it needs
// no Pod Security level of its own (the namespace's admission still judges
// the container: Preflight's dry-run asks it).
func (b *Backend) Requirements() nodeexec.Requirements {
	return nodeexec.Requirements{
		Namespace: b.o.Namespace,
		Permissions: slices.Concat([]nodeexec.Permission{{Verb: "get", Resource: "pods"}, {Verb: "list", Resource: "pods"}, {Verb: "watch", Resource: "pods"}},
			preflight.EphemeralContainers(), preflight.Attach(), preflight.Exec(), preflight.Nodes()),
	}
}

// TargetNode is the node of Target.
func (b *Backend) TargetNode(ctx context.Context) (string, error) {
	node, _, err := b.Target(ctx)
	return node, err
}

// Target GETs the pod and checks that a run may start: the pod exists, is
// Running, has the target container and that container runs, and the pod
// holds fewer than MaxEphemeralContainers of ours. It returns the pod's node
// (for targeting) and the target container's name. Errors wrap
// nodeexec.ErrPodNotFound, nodeexec.ErrContainerNotFound, nodeexec.ErrContainerNotRunning,
// ErrTooManyEphemeralContainers, nodeexec.ErrForbidden (RBAC: get pods), or
// are the API error.
func (b *Backend) Target(ctx context.Context) (node, container string, err error) {
	pod, container, err := b.check(ctx, false)
	if err != nil {
		return "", "", err
	}
	return pod.Spec.NodeName, container, nil
}

// check reads the target pod (with reuse, the last read when there is one:
// see lastPod) and checks it as Target documents.
func (b *Backend) check(ctx context.Context, reuse bool) (*corev1.Pod, string, error) {
	ref := b.o.Namespace + "/" + b.o.Pod
	var pod *corev1.Pod
	if reuse {
		pod = b.last.get()
	}
	var err error
	if pod == nil {
		pod, err = b.o.Client.CoreV1().Pods(b.o.Namespace).Get(ctx, b.o.Pod, metav1.GetOptions{})
		if err == nil {
			b.last.set(pod.DeepCopy())
		}
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, "", fmt.Errorf("%w: pod %s does not exist", nodeexec.ErrPodNotFound, ref)
	case apierrors.IsForbidden(err):
		return nil, "", fmt.Errorf("%w: getting pod %s: %s (RBAC: this backend needs get, list, watch on pods, patch on pods/ephemeralcontainers, create on pods/attach and pods/exec)", nodeexec.ErrForbidden, ref, err.Error())
	case err != nil:
		return nil, "", fmt.Errorf("getting pod %s: %w", ref, err)
	}
	container := b.o.Container
	if container == "" {
		container = DefaultTarget(pod)
	}
	var names []string
	found := false
	for _, c := range pod.Spec.Containers {
		names = append(names, c.Name)
		found = found || c.Name == container
	}
	if !found {
		return nil, "", fmt.Errorf("%w: pod %s has no container %q (its containers: %s)", nodeexec.ErrContainerNotFound, ref, container, strings.Join(names, ", "))
	}
	if pod.DeletionTimestamp != nil {
		return nil, "", fmt.Errorf("%w: pod %s is being deleted", nodeexec.ErrContainerNotRunning, ref)
	}
	if pod.Status.Phase != corev1.PodRunning {
		return nil, "", fmt.Errorf("%w: pod %s is %s, not Running", nodeexec.ErrContainerNotRunning, ref, pod.Status.Phase)
	}
	running := false
	state := "no status yet"
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != container {
			continue
		}
		switch s := cs.State; {
		case s.Running != nil:
			running = true
		case s.Terminated != nil:
			state = fmt.Sprintf("terminated (%s, exit code %d)", s.Terminated.Reason, s.Terminated.ExitCode)
		case s.Waiting != nil:
			state = fmt.Sprintf("waiting (%s)", s.Waiting.Reason)
		}
	}
	if !running {
		return nil, "", fmt.Errorf("%w: container %q of pod %s is %s; an ephemeral container can only share the process namespace of a running container", nodeexec.ErrContainerNotRunning, container, ref, state)
	}
	if n := CountOurs(pod); n >= b.o.MaxEphemeralContainers {
		return nil, "", fmt.Errorf("%w: pod %s already holds %d ephemeral containers added by nodeexec (limit %d); ephemeral containers cannot be removed, only the pod's deletion clears them", ErrTooManyEphemeralContainers, ref, n, b.o.MaxEphemeralContainers)
	}
	return pod, container, nil
}

// Preflight checks, adding nothing, that a run on node may start: Target's
// checks (node must be the pod's node, or empty) and a server-side dry run
// of the patch, which RBAC (patch on pods/ephemeralcontainers) and the
// namespace's Pod Security admission judge as they would the real one.
// Errors are those of Target, nodeexec.ErrWrongNode, ErrEphemeralContainersDisabled
// and nodeexec.ErrForbidden.
func (b *Backend) Preflight(ctx context.Context, node string) error {
	_, _, err := b.add(ctx, nodeexec.Request{Node: node, Command: []string{"true"}}, true)
	return err
}
