// Package debugpod is the nodeexec backend that builds its pod exactly like
// `kubectl debug node/NAME --profile=PROFILE`, with kubectl's own profile code
// (k8s.io/kubectl/pkg/cmd/debug.NewProfileApplier): pinned to the node with
// spec.nodeName, tolerating every taint, and, per profile, the node's
// namespaces, privileges and root filesystem at /host.
//
// It adds what kubectl lacks: the command's exit code, deletion of the pod
// after the run (also on failure, timeout and cancellation), a deadline
// (activeDeadlineSeconds), labels and annotations naming the run, and image
// pull secrets, a priority class and small resource requests.
//
// # Permissions
//
// RBAC in the namespace: create, get, list, watch, delete on pods; create on
// pods/exec; cluster-wide list on nodes (for the Runner). Pod Security: the
// sysadmin profile needs the namespace's level to be "privileged"; legacy,
// general and netadmin need "privileged" too (host namespaces, hostPath);
// baseline fits "baseline"; restricted fits "restricted".
package debugpod

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/kubectl/pkg/cmd/debug"
	"k8s.io/utils/clock"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

// Name is the backend's name in results.
const Name = "debugpod"

// Defaults for Options.
const (
	// DefaultImage is the image of the debugging container. On the project's
	// test cluster a locally built busybox is preloaded under this name.
	DefaultImage = "busybox:stable"
	// DefaultProfile gives the container the node's namespaces, privileges and
	// root filesystem, which fixing a node needs.
	DefaultProfile = debug.ProfileSysadmin
	// DefaultNamespace is used when Options.Namespace is empty.
	DefaultNamespace = "default"
)

// Options configure a Backend.
type Options struct {
	// Client talks to the API server. Required.
	Client kubernetes.Interface
	// Config is the client configuration, used for the exec streams. Required
	// unless Streamer is set.
	Config *rest.Config
	// Namespace for the pods. Defaults to DefaultNamespace.
	Namespace string
	// Profile is kubectl debug's profile: legacy, general, baseline,
	// restricted, netadmin or sysadmin. Defaults to DefaultProfile.
	Profile string
	// Image of the debugging container. Defaults to DefaultImage.
	Image string
	// ImagePullPolicy defaults to IfNotPresent.
	ImagePullPolicy corev1.PullPolicy
	// ImagePullSecrets names secrets in Namespace for pulling Image. Optional.
	ImagePullSecrets []string
	// PriorityClassName for the pods. Optional.
	PriorityClassName string
	// Requests are the container's resource requests. Defaults to podexec.DefaultRequests().
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

// Backend is the debug-pod backend. It is safe for concurrent use; all its
// pods share one watch.
type Backend struct {
	o    Options
	exec *podexec.Executor
}

var (
	_ nodeexec.Backend     = (*Backend)(nil)
	_ nodeexec.Preflighter = (*Backend)(nil)
)

// New validates o and returns a Backend. Errors name the bad field.
func New(o Options) (*Backend, error) {
	if o.Client == nil {
		return nil, errors.New("debugpod: Options.Client is nil: give a Kubernetes client")
	}
	if o.Config == nil && o.Streamer == nil {
		return nil, errors.New("debugpod: Options.Config is nil: give the rest.Config the client was built from")
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if msgs := validation.IsDNS1123Label(o.Namespace); len(msgs) > 0 {
		return nil, fmt.Errorf("debugpod: invalid namespace %q: %s", o.Namespace, strings.Join(msgs, "; "))
	}
	if o.Profile == "" {
		o.Profile = DefaultProfile
	}
	if _, err := debug.NewProfileApplier(o.Profile, debug.KeepFlags{}); err != nil {
		return nil, fmt.Errorf("debugpod: unknown profile %q: want one of %s", o.Profile, strings.Join(Profiles(), ", "))
	}
	if o.Image == "" {
		o.Image = DefaultImage
	}
	switch o.ImagePullPolicy {
	case "":
		o.ImagePullPolicy = corev1.PullIfNotPresent
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return nil, fmt.Errorf("debugpod: invalid image pull policy %q: want Always, IfNotPresent or Never", o.ImagePullPolicy)
	}
	if o.Requests == nil {
		o.Requests = podexec.DefaultRequests()
	}
	if o.RunID == "" {
		o.RunID = podexec.RandomSuffix(10)
	}
	if msgs := validation.IsValidLabelValue(o.RunID); len(msgs) > 0 {
		return nil, fmt.Errorf("debugpod: invalid RunID %q: %s", o.RunID, strings.Join(msgs, "; "))
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

// Name returns "debugpod".
func (b *Backend) Name() string { return Name }

// RunID is the value of the run-ID label on this backend's pods.
func (b *Backend) RunID() string { return b.o.RunID }

// Pod builds the pod that Run would create for req, without creating it.
func (b *Backend) Pod(req nodeexec.Request) (*corev1.Pod, error) {
	now := b.o.Clock.Now()
	return BuildPod(PodSpec{
		Node:              req.Node,
		Name:              PodName(req.Node, b.o.NameSuffix()),
		Namespace:         b.o.Namespace,
		RunID:             b.o.RunID,
		Profile:           b.o.Profile,
		Image:             b.o.Image,
		ImagePullPolicy:   b.o.ImagePullPolicy,
		ImagePullSecrets:  b.o.ImagePullSecrets,
		PriorityClassName: b.o.PriorityClassName,
		Requests:          b.o.Requests,
		Env:               req.Env,
		SecretEnv:         req.SecretEnv,
		Now:               now,
		Deadline:          now.Add(req.EffectiveTimeout() + podexec.DeadlineSlack),
		Command:           b.Argv(req),
		Stdin:             req.Stdin != nil,
		TTY:               req.TTY,
	})
}

// Argv is what runs in the container for req: req.Command as given, or the
// script through `sh -c`, inside `chroot /host` when the profile mounts the
// node's root filesystem.
func (b *Backend) Argv(req nodeexec.Request) []string {
	if req.Script != "" && MountsHostRoot(b.o.Profile) {
		return []string{"chroot", HostRoot, "sh", "-c", req.Script}
	}
	return req.Argv()
}

// Run runs req on req.Node in a new debug pod and deletes the pod. See
// nodeexec.Backend for the errors.
func (b *Backend) Run(ctx context.Context, req nodeexec.Request) (nodeexec.Result, error) {
	if req.Node == "" {
		return nodeexec.Result{ExitCode: -1, Backend: Name}, errors.New("debugpod: Request.Node is empty: give the target node")
	}
	if err := req.Validate(); err != nil {
		return nodeexec.Result{Node: req.Node, ExitCode: -1, Backend: Name}, err
	}
	pod, err := b.Pod(req)
	if err != nil {
		return nodeexec.Result{Node: req.Node, ExitCode: -1, Backend: Name}, err
	}
	return b.exec.Run(ctx, pod, ContainerName, b.Argv(req), req)
}

// Preflight asks the API server to admit the pod for node without creating
// it (a server-side dry-run create), so that an RBAC refusal or a Pod Security
// rejection is reported before any pod exists. Errors wrap nodeexec.ErrForbidden.
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
