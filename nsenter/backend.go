package nsenter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nodeexec/preflight"
)

// Name is the backend's name in results and in `nodeexec run --backend`.
const Name = "nsenter"

// AgentVersion versions the agent's command line (`nodeexec agent nsenter
// --target PID --namespaces LIST -- CMD...`), which the backend and the image
// must agree on. It is bumped, and with it DefaultAgentImage's tag, whenever
// that interface changes.
const AgentVersion = "0.1.0"

// Defaults for Options.
const (
	// DefaultAgentImage is the agent image: the static nodeexec binary at
	// AgentPath and nothing else (FROM scratch). No public registry serves
	// it: push it to yours with `nodeexec image push REGISTRY/REPOSITORY`
	// and set Options.Image to the digest reference it prints (the local
	// test cluster's registry serves this name: `make agent-image`). Never
	// ":latest", so that the default pull policy IfNotPresent applies.
	DefaultAgentImage = "nodeexec.local/agent:" + AgentVersion
	// DefaultNamespace is the Kubernetes namespace of the pods when
	// Options.Namespace is empty.
	DefaultNamespace = "default"
)

// Options configure a Backend.
type Options struct {
	// Client talks to the API server. Required.
	Client kubernetes.Interface
	// Config is the client configuration, used for the exec streams. Required
	// unless Streamer is set.
	Config *rest.Config
	// Namespace is the Kubernetes namespace for the pods. Its Pod Security
	// level must be "privileged". Defaults to DefaultNamespace.
	Namespace string
	// Namespaces are the Linux namespaces of the node's PID 1 the command
	// enters. Defaults to DefaultNamespaces() (mnt, uts, ipc, net, pid, like
	// `nsenter -t 1 -m -u -i -n -p`). Any of mnt, uts, ipc, net, pid, cgroup
	// and user; user works only because the pod shares the node's user
	// namespace (a Go process cannot enter another one, see ErrUserNamespace).
	// Unknown and repeated names are rejected by New.
	Namespaces []Namespace
	// HostNetwork and HostIPC put the pod in the node's network and IPC
	// namespaces, as kubectl-node-shell does; they matter for the namespaces
	// not listed in Namespaces. Nil means true.
	HostNetwork, HostIPC *bool
	// Image is the agent image. Defaults to DefaultAgentImage.
	Image string
	// ImagePullPolicy defaults to IfNotPresent.
	ImagePullPolicy corev1.PullPolicy
	// ImagePullSecrets names secrets in Namespace for pulling Image. Optional.
	ImagePullSecrets []string
	// PriorityClassName for the pods. Optional.
	PriorityClassName string
	// Requests are the container's resource requests. Defaults to
	// podexec.DefaultRequests() (10m CPU, 16Mi memory).
	Requests corev1.ResourceList
	// RunID labels every pod of this Backend (nodeexec.LabelRunID). Defaults
	// to a random 10-character ID.
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

// Backend is the nsenter backend, the mechanism of kubectl-node-shell: per
// node, a privileged hostPID pod pinned to the node (spec.nodeName,
// tolerating every taint) whose container holds `nodeexec agent hold
// --duration <deadline>` (HoldArgv); the
// command runs over exec as
//
//	/usr/local/bin/nodeexec agent nsenter --target 1 --namespaces LIST -- CMD...
//
// which enters the listed namespaces of the node's PID 1 (see Cmd) and runs
// CMD there, so CMD is the node's own program, sees the node's filesystem,
// hostname, network and processes, and its exit code is the exec's. A Script
// runs as `sh -c SCRIPT` with the node's sh (once mnt is entered). The pod
// is deleted after success, failure, timeout and cancellation (podexec).
//
// # Permissions
//
// RBAC in the namespace: create, get, list, watch, delete on pods; create on
// pods/exec; list, watch on events; cluster-wide list on nodes (for the
// Runner). Pod Security: the pod is privileged with hostPID (and by default
// hostNetwork and hostIPC), so the namespace's level must be "privileged";
// elsewhere the create is refused with an error wrapping
// nodeexec.ErrForbidden.
//
// Backend is safe for concurrent use; all its pods share one watch.
type Backend struct {
	o    Options
	exec *podexec.Executor
}

var (
	_ nodeexec.Backend     = (*Backend)(nil)
	_ nodeexec.Preflighter = (*Backend)(nil)
)

// New validates o and returns a Backend. Errors name the bad field; nothing
// is created and the API server is not contacted.
func New(o Options) (*Backend, error) {
	if o.Client == nil {
		return nil, errors.New("nsenter: Options.Client is nil: give a Kubernetes client")
	}
	if o.Config == nil && o.Streamer == nil {
		return nil, errors.New("nsenter: Options.Config is nil: give the rest.Config the client was built from")
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if msgs := validation.IsDNS1123Label(o.Namespace); len(msgs) > 0 {
		return nil, fmt.Errorf("nsenter: invalid namespace %q: %s", o.Namespace, strings.Join(msgs, "; "))
	}
	if o.Namespaces == nil {
		o.Namespaces = DefaultNamespaces()
	}
	if err := validateNamespaces(o.Namespaces); err != nil {
		return nil, fmt.Errorf("nsenter: Options.Namespaces: %w", err)
	}
	o.Namespaces = slices.Clone(o.Namespaces)
	if o.HostNetwork == nil {
		o.HostNetwork = ptr.To(true)
	}
	if o.HostIPC == nil {
		o.HostIPC = ptr.To(true)
	}
	if o.Image == "" {
		o.Image = DefaultAgentImage
	}
	switch o.ImagePullPolicy {
	case "":
		o.ImagePullPolicy = corev1.PullIfNotPresent
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return nil, fmt.Errorf("nsenter: invalid image pull policy %q: want Always, IfNotPresent or Never", o.ImagePullPolicy)
	}
	if o.Requests == nil {
		o.Requests = podexec.DefaultRequests()
	}
	if o.RunID == "" {
		o.RunID = podexec.RandomSuffix(10)
	}
	if msgs := validation.IsValidLabelValue(o.RunID); len(msgs) > 0 {
		return nil, fmt.Errorf("nsenter: invalid RunID %q: %s", o.RunID, strings.Join(msgs, "; "))
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

// validateNamespaces rejects an empty list, unknown and repeated names.
func validateNamespaces(nss []Namespace) error {
	if len(nss) == 0 {
		return fmt.Errorf("empty: give at least one of %s (or leave it nil for the default)", joinNamespaces(allNamespaces()))
	}
	seen := map[Namespace]bool{}
	for _, n := range nss {
		// ParseNamespaces names an unknown namespace and lists the valid ones.
		if parsed, err := ParseNamespaces(string(n)); err != nil {
			return err
		} else if len(parsed) != 1 || parsed[0] != n {
			return fmt.Errorf("%w %q: valid names are %s", ErrUnknownNamespace, n, joinNamespaces(allNamespaces()))
		}
		if seen[n] {
			return fmt.Errorf("%q is listed twice", n)
		}
		seen[n] = true
	}
	return nil
}

func joinNamespaces(nss []Namespace) string {
	names := make([]string, len(nss))
	for i, n := range nss {
		names[i] = string(n)
	}
	return strings.Join(names, ",")
}

// Name returns "nsenter".
func (b *Backend) Name() string { return Name }

// RunID is the value of the run-ID label on this backend's pods.
func (b *Backend) RunID() string { return b.o.RunID }

// PodSecurityLevel is the Pod Security level the pods need: "privileged".
func (b *Backend) PodSecurityLevel() string { return preflight.LevelPrivileged }

// Requirements are the privileged Pod Security level in the backend's
// namespace and the RBAC of a pod per node: create, watch and delete it,
// exec into it, the run's Lease, the kubelet's Events, and list nodes.
func (b *Backend) Requirements() nodeexec.Requirements {
	return nodeexec.Requirements{
		Namespace: b.o.Namespace, PodSecurityLevel: b.PodSecurityLevel(),
		Permissions: slices.Concat(preflight.PodLifecycle(), preflight.RunLease(), preflight.Exec(), preflight.Events(), preflight.Nodes()),
	}
}

// Namespaces are the Linux namespaces the commands enter.
func (b *Backend) Namespaces() []Namespace { return slices.Clone(b.o.Namespaces) }

// Argv is what runs in the agent container for req: AgentArgv with
// req.Command, or `sh -c Script` (the node's sh when mnt is entered).
func (b *Backend) Argv(req nodeexec.Request) []string {
	return AgentArgv(b.o.Namespaces, req.Argv())
}

// Pod builds the pod that Run would create for req, without creating it.
func (b *Backend) Pod(req nodeexec.Request) (*corev1.Pod, error) {
	now := b.o.Clock.Now()
	return BuildPod(PodSpec{
		Node:              req.Node,
		Name:              podexec.PodName(req.Node, b.o.NameSuffix()),
		Namespace:         b.o.Namespace,
		RunID:             b.o.RunID,
		Image:             b.o.Image,
		ImagePullPolicy:   b.o.ImagePullPolicy,
		ImagePullSecrets:  b.o.ImagePullSecrets,
		PriorityClassName: b.o.PriorityClassName,
		Requests:          b.o.Requests,
		HostNetwork:       *b.o.HostNetwork,
		HostIPC:           *b.o.HostIPC,
		Env:               req.Env,
		SecretEnv:         req.SecretEnv,
		Now:               now,
		Deadline:          now.Add(req.EffectiveTimeout() + podexec.DeadlineSlack),
		Command:           b.Argv(req),
	})
}

// Run runs req on req.Node in a new agent pod and deletes the pod. See
// nodeexec.Backend for the errors; the command's exit code is the agent's.
func (b *Backend) Run(ctx context.Context, req nodeexec.Request) (nodeexec.Result, error) {
	if req.Node == "" {
		return nodeexec.Result{ExitCode: -1, Backend: Name}, errors.New("nsenter: Request.Node is empty: give the target node")
	}
	if err := req.Validate(); err != nil {
		return nodeexec.Result{Node: req.Node, ExitCode: -1, Backend: Name}, err
	}
	pod, err := b.Pod(req)
	if err != nil {
		return nodeexec.Result{Node: req.Node, ExitCode: -1, Backend: Name}, err
	}
	argv, resume := SpoolFor(b.Argv(req), pod.Name, req)
	return b.exec.RunResumable(ctx, pod, AgentContainerName, argv, req, resume)
}

// Preflight asks the API server to admit the pod for node without creating
// it (a server-side dry-run create), so that an RBAC refusal or a Pod
// Security rejection (the pod needs "privileged") is reported before any pod
// exists. Errors wrap nodeexec.ErrForbidden.
func (b *Backend) Preflight(ctx context.Context, node string) error {
	pod, err := b.Pod(nodeexec.Request{Node: node, Command: []string{"true"}})
	if err != nil {
		return err
	}
	_, err = b.o.Client.CoreV1().Pods(b.o.Namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return podexec.CreateError(pod, err)
	}
	return nil
}
