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
	"io"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/util/retry"
	"k8s.io/kubectl/pkg/cmd/debug"
	"k8s.io/streaming/pkg/httpstream"
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
}

var (
	_ nodeexec.Backend     = (*Backend)(nil)
	_ nodeexec.Preflighter = (*Backend)(nil)
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
	return &Backend{o: o}, nil
}

// Name returns "ephemeral".
func (b *Backend) Name() string { return Name }

// RunID is the value of EnvRunID in this backend's containers.
func (b *Backend) RunID() string { return b.o.RunID }

// Namespace is the target pod's namespace, where this backend's RBAC
// permissions (patch pods/ephemeralcontainers, create pods/attach) apply.
func (b *Backend) Namespace() string { return b.o.Namespace }

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
	pod, container, err := b.check(ctx)
	if err != nil {
		return "", "", err
	}
	return pod.Spec.NodeName, container, nil
}

func (b *Backend) check(ctx context.Context) (*corev1.Pod, string, error) {
	ref := b.o.Namespace + "/" + b.o.Pod
	pod, err := b.o.Client.CoreV1().Pods(b.o.Namespace).Get(ctx, b.o.Pod, metav1.GetOptions{})
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

// Run adds an ephemeral container running req to the pod, streams its
// output, and returns its exit code. req.Node, when set, must be the pod's
// node (else nodeexec.ErrWrongNode); req.TTY is not supported. The container stays in
// the pod (see the package documentation) but its process has ended when Run
// returns, also on timeout and cancellation (unless it never started, or the
// kill failed: then the error says so, and the on-node `timeout` ends it at
// the deadline). Errors: those of Target, ErrEphemeralContainersDisabled,
// nodeexec.ErrForbidden (RBAC or Pod Security on the
// pods/ephemeralcontainers patch), *nodeexec.ExitError, an error wrapping
// nodeexec.ErrTimeout, *nodeexec.PodError (the container could not start:
// image pull, runAsNonRoot with a root image, ...), or a stream error. When
// the attach broke after the command started, the exit code still comes from
// the container's status, and the error wraps nodeexec.ErrOutcomeUnknown
// (output after the break is lost) and, for a non-zero code, a
// *nodeexec.ExitError with it: nodeexec.ExitCode gives the command's code,
// or ExitOutcomeUnknown for 0.
func (b *Backend) Run(ctx context.Context, req nodeexec.Request) (res nodeexec.Result, err error) {
	log := logr.FromContextOrDiscard(ctx).WithValues("pod", b.o.Namespace+"/"+b.o.Pod)
	res = nodeexec.Result{Node: req.Node, ExitCode: -1, Started: b.o.Clock.Now(), Backend: Name, Namespace: b.o.Namespace, Pod: b.o.Pod}
	if err := req.Validate(); err != nil {
		return res, err
	}
	if req.TTY {
		return res, errors.New("ephemeral: TTY is not supported: the command's start signal is a line on standard input")
	}
	req, firstOutput := nodeexec.RecordFirstOutput(req, b.o.Clock.Now)
	defer func() {
		res.Finished = b.o.Clock.Now()
		res.FirstOutput = firstOutput()
	}()
	timeout := req.EffectiveTimeout()
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("pod %s/%s: %w after %s", b.o.Namespace, b.o.Pod, nodeexec.ErrTimeout, timeout))
	defer cancel()

	// The watch outlives ctx so that a timed-out run can see its container end.
	w := watchPod(ctx, b.o.Client, b.o.Namespace, b.o.Pod)
	defer w.stop()

	name, node, err := b.add(ctx, req, false)
	if err != nil {
		if cerr := ctxErr(ctx); cerr != nil {
			return res, errors.Join(cerr, err)
		}
		return res, err
	}
	res.Node = node
	log = log.WithValues("container", name)
	log.V(1).Info("added ephemeral container", "node", node)

	code, err := b.attachAndWait(ctx, w, name, node, req)
	if cerr := ctxErr(ctx); cerr != nil {
		return res, errors.Join(cerr, b.stop(ctx, w, name))
	}
	if errors.Is(err, nodeexec.ErrOutcomeUnknown) && code >= 0 {
		// The exit code is known (the container's status), the output
		// after the break is not: the command's own failure when it failed,
		// else outcome unknown — never a success.
		res.ExitCode = code
		if code != 0 {
			err = errors.Join(&nodeexec.ExitError{Node: node, Code: code}, err)
		}
		return res, err
	}
	if err != nil {
		// The attach was refused or the container failed: make sure the
		// gate does not wait for a start signal until its deadline.
		return res, errors.Join(err, b.stop(ctx, w, name))
	}
	res.ExitCode = code
	if code != 0 {
		return res, &nodeexec.ExitError{Node: node, Code: code}
	}
	return res, nil
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

// add checks the pod and adds the ephemeral container for req (with dryRun,
// only asks the API server to admit it), retrying on a conflicting
// concurrent update. It returns the container's name and the node.
func (b *Backend) add(ctx context.Context, req nodeexec.Request, dryRun bool) (name, node string, err error) {
	name = NamePrefix + b.o.NameSuffix()
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, target, err := b.check(ctx)
		if err != nil {
			return err
		}
		if req.Node != "" && req.Node != pod.Spec.NodeName {
			return fmt.Errorf("%w: pod %s/%s is on node %q, not %q", nodeexec.ErrWrongNode, pod.Namespace, pod.Name, pod.Spec.NodeName, req.Node)
		}
		node = pod.Spec.NodeName
		now := b.o.Clock.Now()
		updated, _, err := BuildContainer(ContainerSpec{
			Pod:             pod,
			Target:          target,
			Name:            name,
			Profile:         b.o.Profile,
			Image:           b.o.Image,
			ImagePullPolicy: b.o.ImagePullPolicy,
			RunID:           b.o.RunID,
			Env:             req.Env,
			SecretEnv:       req.SecretEnv,
			Now:             now,
			Deadline:        now.Add(req.EffectiveTimeout() + KillSlack),
			Command:         req.Argv(),
		})
		if err != nil {
			return err
		}
		patch, err := Patch(pod, updated)
		if err != nil {
			return err
		}
		opts := metav1.PatchOptions{}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err = b.o.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, opts, "ephemeralcontainers")
		return err
	})
	if err == nil {
		return name, node, nil
	}
	ref := b.o.Namespace + "/" + b.o.Pod
	var serr *apierrors.StatusError
	switch {
	case errors.As(err, &serr) && serr.Status().Reason == metav1.StatusReasonNotFound && (serr.Status().Details == nil || serr.Status().Details.Name == ""):
		return "", "", fmt.Errorf("%w (the pods/ephemeralcontainers subresource of %s is missing: %s)", ErrEphemeralContainersDisabled, ref, err.Error())
	case apierrors.IsNotFound(err):
		return "", "", fmt.Errorf("%w: pod %s was deleted", nodeexec.ErrPodNotFound, ref)
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "violates PodSecurity"):
		return "", "", fmt.Errorf("%w: namespace %q's Pod Security level rejects an ephemeral container with profile %q: %s; use --profile baseline or restricted, or a namespace that allows it",
			nodeexec.ErrForbidden, b.o.Namespace, b.o.Profile, err.Error())
	case apierrors.IsForbidden(err):
		return "", "", fmt.Errorf("%w: adding an ephemeral container to %s: %s (RBAC: this backend needs patch on pods/ephemeralcontainers)", nodeexec.ErrForbidden, ref, err.Error())
	case errors.Is(err, nodeexec.ErrPodNotFound), errors.Is(err, nodeexec.ErrContainerNotFound), errors.Is(err, nodeexec.ErrContainerNotRunning),
		errors.Is(err, ErrTooManyEphemeralContainers), errors.Is(err, nodeexec.ErrWrongNode), errors.Is(err, nodeexec.ErrForbidden):
		return "", "", err
	}
	return "", "", fmt.Errorf("adding ephemeral container to pod %s: %w", ref, err)
}

// attachAndWait attaches to the container once it runs, sends the start
// signal and req.Stdin, and waits for its terminated status.
func (b *Backend) attachAndWait(ctx context.Context, w *podWatch, name, node string, req nodeexec.Request) (int, error) {
	log := logr.FromContextOrDiscard(ctx)
	var (
		interval   = DefaultRetryInterval
		due        <-chan time.Time // next attach attempt after a refused one
		timer      clock.Timer
		attempts   int
		attemptNow bool
		attached   bool
		aerr       error
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		pod := w.get()
		st := ephemeralStatus(pod, name)
		if pod != nil {
			if perr := podexec.PodFailure(pod, name, node); perr != nil && (st == nil || st.State.Terminated == nil) {
				return -1, perr
			}
		}
		if st != nil {
			switch s := st.State; {
			case s.Terminated != nil && attached:
				if aerr != nil {
					return int(s.Terminated.ExitCode), fmt.Errorf("%w: the attach to ephemeral container %q of pod %s/%s broke, so output after the break is lost; the command exited with code %d (from the container's status): %w",
						nodeexec.ErrOutcomeUnknown, name, b.o.Namespace, b.o.Pod, s.Terminated.ExitCode, aerr)
				}
				return int(s.Terminated.ExitCode), nil
			case s.Terminated != nil:
				return -1, &nodeexec.PodError{Node: node, Namespace: b.o.Namespace, Pod: b.o.Pod, Reason: s.Terminated.Reason,
					Message: fmt.Sprintf("ephemeral container %q ended (exit code %d) before the attach connected, so the command did not run: %s", name, s.Terminated.ExitCode, s.Terminated.Message)}
			case s.Waiting != nil && podexec.FatalWaiting(s.Waiting.Reason):
				pe := &nodeexec.PodError{Node: node, Namespace: b.o.Namespace, Pod: b.o.Pod, Reason: s.Waiting.Reason,
					Message: fmt.Sprintf("ephemeral container %q: %s", name, s.Waiting.Message)}
				if nodeexec.IsImagePullReason(s.Waiting.Reason) && pod != nil {
					pe.Image = podexec.ContainerImage(pod, name)
				}
				return -1, podexec.WithPullReason(ctx, b.o.Client, pe)
			case s.Running != nil && !attached && attempts == 0:
				attemptNow = true
			}
		}
		if attemptNow {
			attemptNow = false
			attempts++
			log.V(2).Info("attach attempt", "attempt", attempts)
			err := b.attach(ctx, name, req)
			if podexec.IsContainerNotReady(err) && ctxErr(ctx) == nil {
				log.V(2).Info("container not ready for attach yet", "attempt", attempts, "err", err)
				timer = b.o.Clock.NewTimer(interval)
				due = timer.C()
				interval = min(interval*3/2, time.Second)
			} else if err != nil && httpstream.IsUpgradeFailure(err) && ctxErr(ctx) == nil {
				// Refused before anything was streamed: the command never started.
				if strings.Contains(strings.ToLower(err.Error()), "forbidden") {
					return -1, fmt.Errorf("%w: attaching to ephemeral container %q of pod %s/%s: %s (RBAC: this backend needs create on pods/attach)",
						nodeexec.ErrForbidden, name, b.o.Namespace, b.o.Pod, err.Error())
				}
				return -1, fmt.Errorf("attaching to ephemeral container %q of pod %s/%s: %w", name, b.o.Namespace, b.o.Pod, err)
			} else {
				attached, aerr = true, err
				log.V(1).Info("attach finished", "attempts", attempts, "err", err)
				continue // read the status again
			}
		}
		select {
		case <-w.changed:
		case <-due:
			due, attemptNow = nil, true
		case <-ctx.Done():
			return -1, ctxErr(ctx)
		}
	}
}

// attach runs one attach session: the start signal, then req.Stdin.
func (b *Backend) attach(ctx context.Context, name string, req nodeexec.Request) error {
	stdin := io.MultiReader(strings.NewReader("\n"))
	if req.Stdin != nil {
		stdin = io.MultiReader(strings.NewReader("\n"), req.Stdin)
	}
	return b.o.Attacher.Attach(ctx, b.o.Namespace, b.o.Pod,
		&corev1.PodAttachOptions{Container: name, Stdin: true, Stdout: true, Stderr: true},
		remotecommand.StreamOptions{Stdin: stdin, Stdout: orDiscard(req.Stdout), Stderr: orDiscard(req.Stderr)})
}

// stop ends the container's process after a timeout, a cancellation or a
// failed attach: it execs `kill -KILL` of the PID the gate recorded
// (retried while the container is not yet running or has not written the
// PID file) and waits for the terminated status, with a context detached
// from the ended ctx, for at most DefaultCleanupTimeout. A container that
// cannot start (image pull, config error) is left to the on-node timeout.
func (b *Backend) stop(ctx context.Context, w *podWatch, name string) error {
	log := logr.FromContextOrDiscard(ctx)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultCleanupTimeout)
	defer cancel()
	var (
		kerr   error
		killed bool
		due    <-chan time.Time
		timer  clock.Timer
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	attemptNow := true
	for {
		pod := w.get()
		st := ephemeralStatus(pod, name)
		switch {
		case pod == nil || pod.DeletionTimestamp != nil:
			return nil // the pod's deletion ends every process
		case st != nil && st.State.Terminated != nil:
			return nil
		case st != nil && st.State.Waiting != nil && podexec.FatalWaiting(st.State.Waiting.Reason):
			return nil // it never ran
		}
		if attemptNow && !killed {
			attemptNow = false
			kerr = b.o.Streamer.Exec(cctx, b.o.Namespace, b.o.Pod, &corev1.PodExecOptions{
				Container: name,
				Command:   []string{"sh", "-c", `kill -KILL "$(cat ` + PIDFile + `)"`},
				Stdout:    true,
				Stderr:    true,
			}, remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard})
			log.V(1).Info("kill ephemeral container's command", "container", name, "err", kerr)
			switch {
			case kerr == nil:
				killed = true
			case strings.Contains(strings.ToLower(kerr.Error()), "forbidden"):
				killed = true // retrying cannot help; the error is reported below
			default: // not running yet, or no PID file yet
				timer = b.o.Clock.NewTimer(500 * time.Millisecond)
				due = timer.C()
			}
		}
		select {
		case <-w.changed:
		case <-due:
			due, attemptNow = nil, true
		case <-cctx.Done():
			msg := fmt.Errorf("ephemeral container %q of pod %s/%s may still run until its on-node deadline (Request.Timeout + %s)", name, b.o.Namespace, b.o.Pod, KillSlack)
			if kerr != nil {
				return errors.Join(msg, fmt.Errorf("killing it (RBAC: create on pods/exec): %w", kerr))
			}
			return msg
		}
	}
}

// ephemeralStatus is the status of the named ephemeral container, or nil.
func ephemeralStatus(pod *corev1.Pod, name string) *corev1.ContainerStatus {
	if pod == nil {
		return nil
	}
	for i := range pod.Status.EphemeralContainerStatuses {
		if pod.Status.EphemeralContainerStatuses[i].Name == name {
			return &pod.Status.EphemeralContainerStatuses[i]
		}
	}
	return nil
}

func ctxErr(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	return context.Cause(ctx)
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
