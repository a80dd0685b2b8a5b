package podexec

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// Defaults for PodOptions.
const (
	// DefaultNamespace is the namespace of a pod backend's pods when
	// PodOptions.Namespace is empty.
	DefaultNamespace = "default"
	// DefaultPullPolicy is PodOptions.ImagePullPolicy when empty.
	DefaultPullPolicy = corev1.PullIfNotPresent
	// RunIDLength is the length of the random PodOptions.RunID.
	RunIDLength = 10
	// NameSuffixLength is the length of the random part of a pod name.
	NameSuffixLength = 5
)

// PodOptions are the options every pod backend (debugpod, nsenter, runtime)
// has; each backend's Options embeds them (each backend package has the
// alias PodOptions, so that its Options are built with that package
// alone). NewPodBackend fills in the defaults.
type PodOptions struct {
	// Client talks to the API server. Required.
	Client kubernetes.Interface
	// Config is the client configuration, used for the exec streams. Required
	// unless Streamer is set.
	Config *rest.Config
	// Namespace is the Kubernetes namespace for the pods. Defaults to
	// DefaultNamespace.
	Namespace string
	// Image of the pod's container. Defaults to the backend's default image
	// (debugpod.DefaultImage; agent.DefaultImage for nsenter and runtime).
	Image string
	// ImagePullPolicy is Always, IfNotPresent or Never. Defaults to
	// DefaultPullPolicy (IfNotPresent).
	ImagePullPolicy corev1.PullPolicy
	// ImagePullSecrets names secrets in Namespace for pulling Image. Optional.
	ImagePullSecrets []string
	// PriorityClassName of the pods. Optional.
	PriorityClassName string
	// Requests are the container's resource requests. Defaults to
	// DefaultRequests() (10m CPU, 16Mi memory).
	Requests corev1.ResourceList
	// RunID labels every pod of the backend (nodeexec.LabelRunID) and names
	// the run's Lease. Defaults to RunIDLength random characters.
	RunID string
	// Clock drives timers and timestamps. Defaults to the real clock.
	Clock clock.WithTicker
	// NameSuffix returns the random part of a pod name. Defaults to
	// NameSuffixLength random lowercase letters and digits.
	NameSuffix func() string
	// Streamer overrides how commands are run in the pod (tests). Defaults to
	// NewStreamer(Config, Client.CoreV1().RESTClient()).
	Streamer Streamer
}

// complete validates o and fills in its defaults, image being the backend's
// default Image. Errors start with backend and name the bad field; nothing
// is contacted.
func (o *PodOptions) complete(backend, image string) error {
	if o.Client == nil {
		return fmt.Errorf("%s: Options.Client is nil: give a Kubernetes client", backend)
	}
	if o.Config == nil && o.Streamer == nil {
		return fmt.Errorf("%s: Options.Config is nil: give the rest.Config the client was built from", backend)
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if msgs := validation.IsDNS1123Label(o.Namespace); len(msgs) > 0 {
		return fmt.Errorf("%s: invalid namespace %q: %s", backend, o.Namespace, strings.Join(msgs, "; "))
	}
	if o.Image == "" {
		o.Image = image
	}
	switch o.ImagePullPolicy {
	case "":
		o.ImagePullPolicy = DefaultPullPolicy
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return fmt.Errorf("%s: invalid image pull policy %q: want Always, IfNotPresent or Never", backend, o.ImagePullPolicy)
	}
	if o.Requests == nil {
		o.Requests = DefaultRequests()
	}
	if o.RunID == "" {
		o.RunID = RandomSuffix(RunIDLength)
	}
	if msgs := validation.IsValidLabelValue(o.RunID); len(msgs) > 0 {
		return fmt.Errorf("%s: invalid RunID %q: %s", backend, o.RunID, strings.Join(msgs, "; "))
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.NameSuffix == nil {
		o.NameSuffix = func() string { return RandomSuffix(NameSuffixLength) }
	}
	if o.Streamer == nil {
		o.Streamer = NewStreamer(o.Config, o.Client.CoreV1().RESTClient())
	}
	return nil
}

// Launch is what a pod backend runs for one request: the pod to create,
// the container in it and the command line run there over exec, and how
// to resume that command line after a broken stream (nil: not resumable).
type Launch struct {
	Pod       *corev1.Pod
	Container string
	Argv      []string
	Resume    *Resume
	// Stager names the container of Pod that puts Argv[0] in place after
	// the pod started (the debugpod backend's agent container copies
	// nodeexec into a volume the two share), or is empty. Until it has,
	// the container runtime's "not found" for Argv[0] means "not yet": the
	// exec is tried again, as for a container not yet running, until the
	// run's timeout; the stager failing (its image not pulled, a non-zero
	// exit) fails the run with a *nodeexec.PodError naming it.
	Stager string
	// StagedProbe, with Stager, is a command line of Argv[0] that exits 0
	// once it is in place, run first (with no stdin, output discarded)
	// when the request has stdin: an exec refused after its stream was set
	// up may have read stdin that no command received, so the command's
	// own exec waits until Argv[0] is there. Requests without stdin skip it.
	StagedProbe []string
}

// PodBackend is the part of a pod backend that is not its pod: its
// completed PodOptions, the run's Lease, the shared watch and the executor,
// and Run and Preflight around the backend's pure builder. It is safe for
// concurrent use.
type PodBackend struct {
	name string
	o    PodOptions
	exec *executor
}

// NewPodBackend validates *o, fills in its defaults (image being the
// backend's default Image) and returns the PodBackend of the backend named
// name (the name in results and errors): the shared prologue of every pod
// backend's New. Errors start with name and name the bad field. Nothing is
// created and the API server is not contacted.
func NewPodBackend(name, image string, o *PodOptions) (*PodBackend, error) {
	if err := o.complete(name, image); err != nil {
		return nil, err
	}
	lease, err := newLease(leaseOptions{Client: o.Client, Namespace: o.Namespace, RunID: o.RunID, Clock: o.Clock})
	if err != nil {
		return nil, err
	}
	exec, err := newExecutor(executorOptions{
		Client:   o.Client,
		Streamer: o.Streamer,
		Tracker:  newTracker(o.Client, o.Namespace, nodeexec.LabelRunID+"="+o.RunID),
		Backend:  name,
		Clock:    o.Clock,
		Lease:    lease,
	})
	if err != nil {
		return nil, err
	}
	return &PodBackend{name: name, o: *o, exec: exec}, nil
}

// RunID is the value of the run-ID label (nodeexec.LabelRunID) on the
// backend's pods: PodOptions.RunID, or the random one NewPodBackend chose.
func (b *PodBackend) RunID() string { return b.o.RunID }

// Run validates req (req.Node must be set), builds its Launch with build and
// runs it: create the pod, run the command line in it, delete the pod (see
// executor.RunResumable). An invalid request or a failed build is returned
// with a Result for req.Node (exit code -1) before anything is created.
func (b *PodBackend) Run(ctx context.Context, req nodeexec.Request, build func(nodeexec.Request) (Launch, error)) (nodeexec.Result, error) {
	l, err := b.launch(req, build)
	if err != nil {
		now := b.o.Clock.Now()
		return nodeexec.Result{Node: req.Node, ExitCode: -1, Backend: b.name, Started: now, Finished: now}, err
	}
	return b.exec.RunResumable(ctx, l, req)
}

func (b *PodBackend) launch(req nodeexec.Request, build func(nodeexec.Request) (Launch, error)) (Launch, error) {
	if req.Node == "" {
		return Launch{}, fmt.Errorf("%s: Request.Node is empty: give the target node", b.name)
	}
	if err := req.Validate(); err != nil {
		return Launch{}, err
	}
	return build(req)
}

// Preflight asks the API server to admit the pod build makes for a `true`
// on node without creating it (a server-side dry-run create), so that an
// RBAC refusal or a Pod Security rejection is reported before any pod
// exists. Those errors wrap nodeexec.ErrForbidden (see CreateError).
func (b *PodBackend) Preflight(ctx context.Context, node string, build func(nodeexec.Request) (Launch, error)) error {
	l, err := b.launch(nodeexec.Request{Node: node, Command: []string{"true"}}, build)
	if err != nil {
		return err
	}
	if _, err := b.o.Client.CoreV1().Pods(b.o.Namespace).Create(ctx, l.Pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		return CreateError(l.Pod, err)
	}
	return nil
}
