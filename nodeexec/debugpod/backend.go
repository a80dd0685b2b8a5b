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
// A run without a TTY runs its command under nodeexec's agent, in the
// user's image: the pod's agent container (Options.AgentImage) copies
// nodeexec-spool (agent.SpoolPath: a static program of a few MB that runs
// agent command lines, without nodeexec's client libraries) into an
// emptyDir the debugging container mounts, and the command runs as `agent
// run` with its spool (agent.RunArgv,
// agent.SpoolAt), so that a cut exec stream is resumed, or reported as
// nodeexec.ErrOutcomeUnknown, never taken for a success (client-go reports
// a connection to the kubelet dropped mid-stream as one). With
// Options.AgentImageVolume (by default on the nodes known to support it,
// kubelet 1.35+ with containerd 2.1+ or CRI-O 1.31+) the agent image is
// mounted as an image volume instead (no agent container, no copy).
// Options.NoAgent turns the agent off.
//
// # Permissions
//
// RBAC in the namespace: create, get, list, watch, delete on pods; create on
// pods/exec; cluster-wide list on nodes (for the Runner); the same with the
// agent container, which fits the "restricted" level. Pod Security: the
// sysadmin profile needs the namespace's level to be "privileged"; legacy,
// general and netadmin need "privileged" too (host namespaces, hostPath);
// baseline fits "baseline"; restricted fits "restricted".
package debugpod

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/kubectl/pkg/cmd/debug"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
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
	DefaultNamespace = podexec.DefaultNamespace
)

// PodOptions are the options every pod backend has (podexec.PodOptions):
// the client, the namespace of the pods, the image, its pull policy,
// secrets, priority class and requests, the run ID and the test hooks, each
// field with its default. Options embeds them.
type PodOptions = podexec.PodOptions

// Options configure a Backend.
//
//	debugpod.Options{PodOptions: debugpod.PodOptions{Client: client, Config: cfg}, Profile: "sysadmin"}
type Options struct {
	// PodOptions are the client, the namespace of the pods (default
	// DefaultNamespace), the image of the debugging container (default
	// DefaultImage), its pull policy, secrets, priority class and requests,
	// the run ID and the test hooks; see PodOptions for each field's
	// default.
	PodOptions
	// Profile is kubectl debug's profile: legacy, general, baseline,
	// restricted, netadmin or sysadmin. Defaults to DefaultProfile.
	Profile string
	// AgentImage is nodeexec's image (agent.DefaultImage when empty), run
	// by the agent container of a run without a TTY: it copies
	// nodeexec-spool (agent.SpoolPath; from an image without it, the
	// nodeexec binary) into the pod (PodSpec.AgentImage), and the command
	// runs under it in the user's image, in the user's container
	// (agent.RunArgv, with its spool): a stream cut on the way (the API
	// server restarting, a dropped connection to the kubelet) is resumed
	// from the spool, with nothing lost or doubled and the command's real
	// exit status, or ends as nodeexec.ErrOutcomeUnknown — never as a
	// success with the output's tail missing. Its platforms must include
	// the node's. Ignored with NoAgent.
	AgentImage string
	// NoAgent runs the command as kubectl debug would, with no agent
	// container: the pod is kubectl debug's plus nodeexec's labels,
	// annotations and limits, but a cut stream that the client library
	// reports as a normal end (kubernetes/kubernetes#124571) cannot be told
	// from a whole one. For clusters that cannot pull AgentImage.
	NoAgent bool
	// AgentImageVolume says when AgentImage is mounted in the pod as an
	// image volume (PodSpec.AgentImageVolume) instead of an agent
	// container copying nodeexec-spool from it: one container start fewer
	// per run (about 70 ms). The node needs the ImageVolume feature
	// (Kubernetes 1.35 and later) and a runtime that implements it
	// (containerd 2.1 or later, CRI-O 1.31 or later; ImageVolumeSupport).
	// Default ImageVolumeAuto: on the nodes known to have them, the copy
	// elsewhere. Ignored with NoAgent.
	AgentImageVolume ImageVolumeMode
}

// ImageVolumeMode is Options.AgentImageVolume: where the debug pod mounts
// the agent image as an image volume rather than copying from it.
type ImageVolumeMode string

const (
	// ImageVolumeAuto (the default, "") mounts it on the nodes the Runner
	// showed the backend (ObserveNodes) whose kubelet is 1.35 or later and
	// whose runtime is containerd 2.1 or later or CRI-O 1.31 or later, and
	// copies elsewhere: on a node the backend was not shown, and on one
	// with another runtime.
	ImageVolumeAuto ImageVolumeMode = ""
	// ImageVolumeAlways mounts it on every node. Preflight refuses a node
	// without image volumes; on one it did not check, the pod does not
	// start (its debugging container waits, with the kubelet's reason,
	// until the run's timeout).
	ImageVolumeAlways ImageVolumeMode = "always"
	// ImageVolumeNever copies on every node, as before image volumes.
	ImageVolumeNever ImageVolumeMode = "never"
)

// Backend is the debug-pod backend. It is safe for concurrent use; all its
// pods share one watch. RunID is the value of the run-ID label on its pods.
type Backend struct {
	*podBackend
	o Options

	mu          sync.Mutex
	volumeNodes map[string]bool // ImageVolumeAuto: the nodes shown that have image volumes
	noSpool     bool            // ImageVolumeAuto: the image turned out to have no nodeexec-spool
}

// podBackend is embedded unexported: Backend gets its RunID.
type podBackend = podexec.PodBackend

// The optional interfaces of package nodeexec the backend implements.
var (
	_ nodeexec.Backend              = (*Backend)(nil)
	_ nodeexec.Preflighter          = (*Backend)(nil)
	_ nodeexec.PodDescriber         = (*Backend)(nil)
	_ nodeexec.CompletionPodBuilder = (*Backend)(nil)
	_ nodeexec.CommandDescriber     = (*Backend)(nil)
	_ nodeexec.Requirer             = (*Backend)(nil)
	_ nodeexec.HostRooter           = (*Backend)(nil)
	_ nodeexec.NodeObserver         = (*Backend)(nil)
)

// New validates o and returns a Backend. Errors name the bad field.
func New(o Options) (*Backend, error) {
	base, err := podexec.NewPodBackend(Name, DefaultImage, &o.PodOptions)
	if err != nil {
		return nil, err
	}
	if o.Profile == "" {
		o.Profile = DefaultProfile
	}
	if _, err := debug.NewProfileApplier(o.Profile, debug.KeepFlags{}); err != nil {
		return nil, fmt.Errorf("debugpod: unknown profile %q: want one of %s", o.Profile, strings.Join(Profiles(), ", "))
	}
	if o.AgentImage == "" {
		o.AgentImage = agent.DefaultImage
	}
	switch o.AgentImageVolume {
	case ImageVolumeAuto, ImageVolumeAlways, ImageVolumeNever:
	default:
		return nil, fmt.Errorf("debugpod: Options.AgentImageVolume %q: want %q (auto), %q or %q", o.AgentImageVolume, ImageVolumeAuto, ImageVolumeAlways, ImageVolumeNever)
	}
	return &Backend{podBackend: base, o: o, volumeNodes: map[string]bool{}}, nil
}

// ObserveNodes records, for ImageVolumeAuto, which of nodes mount image
// volumes (imageVolumesKnown: ImageVolumeSupport, with a runtime it
// knows). The Runner calls it before the run (nodeexec.NodeObserver).
func (b *Backend) ObserveNodes(nodes []*corev1.Node) {
	if b.o.AgentImageVolume != ImageVolumeAuto || b.o.NoAgent {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range nodes {
		if n != nil {
			b.volumeNodes[n.Name] = imageVolumesKnown(n.Status.NodeInfo)
		}
	}
}

// imageVolume reports whether the pod for node mounts the agent image
// (Options.AgentImageVolume).
func (b *Backend) imageVolume(node string) bool {
	switch b.o.AgentImageVolume {
	case ImageVolumeAlways:
		return true
	case ImageVolumeNever:
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.volumeNodes[node] && !b.noSpool
}

// imageVolumesKnown reports a node known to mount image volumes:
// ImageVolumeSupport's yes, with a runtime it knows (containerd or CRI-O),
// not its benefit of the doubt.
func imageVolumesKnown(info corev1.NodeSystemInfo) bool {
	runtime, _, _ := strings.Cut(info.ContainerRuntimeVersion, "://")
	return imageVolumeMinVersion(runtime) != nil && ImageVolumeSupport(info) == nil
}

// imageVolumeMinVersion is the first version of the container runtime
// named runtime (as in status.nodeInfo.containerRuntimeVersion, before
// "://") that mounts image volumes, or nil for a runtime not known here.
func imageVolumeMinVersion(runtime string) *utilversion.Version {
	switch runtime {
	case "containerd":
		return utilversion.MajorMinor(2, 1)
	case "cri-o":
		return utilversion.MajorMinor(1, 31)
	}
	return nil
}

// Name returns "debugpod".
func (b *Backend) Name() string { return Name }

// Pod builds the pod that Run would create for req, without creating it:
// with the agent container unless req has a TTY or Options.NoAgent is set.
func (b *Backend) Pod(req nodeexec.Request) (*corev1.Pod, error) {
	return b.build(req, podexec.PodName(req.Node, b.o.NameSuffix()), b.o.Clock.Now(), b.agentFor(req))
}

// agentVia is how the agent reaches a pod: not at all (a TTY, or NoAgent),
// copied by the agent container, or mounted as an image volume.
type agentVia int

const (
	noAgent agentVia = iota
	agentCopied
	agentVolume
)

// agentFor is how the agent reaches req's pod, decided once per pod (the
// pod and its command line must agree).
func (b *Backend) agentFor(req nodeexec.Request) agentVia {
	switch {
	case !b.spooled(req):
		return noAgent
	case b.imageVolume(req.Node):
		return agentVolume
	}
	return agentCopied
}

// spooled reports whether req runs under the agent: not an interactive
// session (a TTY cannot be resumed), and the agent not turned off.
func (b *Backend) spooled(req nodeexec.Request) bool { return !req.TTY && !b.o.NoAgent }

// CompletionPod is the pod Pod(req) would be, named name and created at
// now, whose container runs Argv(req) itself rather than holding for an
// exec (podexec.RunToCompletion): see nodeexec.CompletionPodBuilder. The
// NodeScript watcher runs scripts in these pods. Errors name the invalid
// field; req.Node must be set.
func (b *Backend) CompletionPod(req nodeexec.Request, name string, now time.Time) (*corev1.Pod, error) {
	return podexec.CompletionPod(Name, req, func(req nodeexec.Request) (*corev1.Pod, error) { return b.build(req, name, now, noAgent) }, b.Argv)
}

// build is req's pod, named name and created at now, with the agent as
// via says.
func (b *Backend) build(req nodeexec.Request, name string, now time.Time, via agentVia) (*corev1.Pod, error) {
	s := PodSpec{
		PodBase: podexec.NewPodBase(&b.o.PodOptions, req, name, now, b.Argv(req)),
		Profile: b.o.Profile, Stdin: req.Stdin != nil, TTY: req.TTY,
	}
	if via != noAgent {
		s.AgentImage, s.AgentImageVolume = b.o.AgentImage, via == agentVolume
	}
	return BuildPod(s)
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

// launch is the pod for req and Argv run in its container: under the
// agent's copy and its spool (agent.RunArgv, agent.SpoolAt), resumable,
// when the pod has the agent container.
func (b *Backend) launch(req nodeexec.Request) (podexec.Launch, error) {
	via := b.agentFor(req)
	pod, err := b.build(req, podexec.PodName(req.Node, b.o.NameSuffix()), b.o.Clock.Now(), via)
	if err != nil || via == noAgent {
		return podexec.Launch{Pod: pod, Container: ContainerName, Argv: b.Argv(req)}, err
	}
	volume := via == agentVolume
	bin := agent.CopiedPath
	if volume {
		bin = agent.ImageVolumePath
	}
	argv, resume := agent.SpoolAt(bin, agent.RunArgv(bin, b.Argv(req)), pod.Name, req)
	l := podexec.Launch{Pod: pod, Container: ContainerName, Argv: argv, Resume: resume}
	if !volume {
		// The agent container copies the program; the copy answers once it
		// is whole. (The image volume's is there when the container starts.)
		l.Stager, l.StagedProbe = AgentContainerName, []string{bin, "version", "--client"}
	}
	return l, nil
}

// Run runs req on req.Node in a new debug pod and deletes the pod. See
// nodeexec.Backend for the errors.
//
// An agent image without nodeexec-spool (agent.SpoolPath: an older image,
// or one pushed from a nodeexec binary alone) mounted as an image volume
// cannot start the command, so nothing ran: with ImageVolumeAuto the run
// is made again with the copy (which then runs nodeexec itself), as is
// every later run of the backend, unless req has stdin (which the refused
// exec may have read); otherwise the error names the image and the fix
// and wraps the *podexec.StartError (exit code 127).
func (b *Backend) Run(ctx context.Context, req nodeexec.Request) (nodeexec.Result, error) {
	res, err := b.podBackend.Run(ctx, req, b.launch)
	var se *podexec.StartError
	if !b.spooled(req) || !errors.As(err, &se) || se.Command != agent.ImageVolumePath || se.Code != podexec.ExitNotFound {
		return res, err
	}
	if b.o.AgentImageVolume == ImageVolumeAuto && req.Stdin == nil {
		b.mu.Lock()
		b.noSpool = true
		b.mu.Unlock()
		logr.FromContextOrDiscard(ctx).Info("the agent image has no nodeexec-spool to run from its image volume: running again with the agent container's copy", "node", req.Node, "image", b.o.AgentImage)
		return b.podBackend.Run(ctx, req, b.launch)
	}
	return res, fmt.Errorf("agent image volume: the agent image %q has no %s (an image of an older nodeexec, or pushed by `nodeexec image push` from a binary without nodeexec-spool beside it): push this version's image (make build, then nodeexec image push), or give --agent-image-volume=false (the copy, which runs nodeexec itself from such an image): %w",
		b.o.AgentImage, agent.SpoolPath, err)
}

// Preflight asks the API server to admit the pod for node without creating
// it (a server-side dry-run create), so that an RBAC refusal or a Pod Security
// rejection is reported before any pod exists. Errors wrap nodeexec.ErrForbidden.
//
// With ImageVolumeAlways it first reads the node (RBAC: list nodes, with a
// metadata.name field selector) and refuses one whose kubelet or container
// runtime has no image volumes (ImageVolumeSupport), naming them and the
// fix, before anything is created.
func (b *Backend) Preflight(ctx context.Context, node string) error {
	if b.o.AgentImageVolume == ImageVolumeAlways && !b.o.NoAgent {
		list, err := b.o.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", node).String()})
		if err != nil {
			return fmt.Errorf("debugpod: reading node %q for --agent-image-volume: %w", node, err)
		}
		if len(list.Items) == 1 {
			if err := ImageVolumeSupport(list.Items[0].Status.NodeInfo); err != nil {
				return fmt.Errorf("--agent-image-volume: node %q: %w: drop --agent-image-volume (Options.AgentImageVolume ImageVolumeAlways; without it the agent container copies nodeexec-spool where the node has no image volumes)", node, err)
			}
		}
	}
	return b.podBackend.Preflight(ctx, node, b.launch)
}

// ErrNoImageVolumes is wrapped by ImageVolumeSupport's error (and so by
// Preflight's, with Options.AgentImageVolume): the node's kubelet or
// container runtime has no image volumes.
var ErrNoImageVolumes = errors.New("no image volumes")

// ImageVolumeSupport returns nil when a node with info mounts image
// volumes (Options.AgentImageVolume): a kubelet 1.35 or later (the
// ImageVolume feature on by default; GA in 1.36) and containerd 2.1 or
// later or CRI-O 1.31 or later; else an error wrapping ErrNoImageVolumes
// naming what the node runs.
// A runtime it does not know is given the benefit of the doubt (nil). A
// pure function.
func ImageVolumeSupport(info corev1.NodeSystemInfo) error {
	if v, err := utilversion.ParseGeneric(info.KubeletVersion); err == nil && v.LessThan(utilversion.MajorMinor(1, 35)) {
		return fmt.Errorf("its kubelet %s has %w (Kubernetes 1.35 or later)", info.KubeletVersion, ErrNoImageVolumes)
	}
	runtime, ver, _ := strings.Cut(info.ContainerRuntimeVersion, "://")
	minVersion := imageVolumeMinVersion(runtime)
	if minVersion == nil {
		return nil
	}
	if v, err := utilversion.ParseGeneric(ver); err == nil && v.LessThan(minVersion) {
		return fmt.Errorf("its container runtime %s has %w (%s %s or later)", info.ContainerRuntimeVersion, ErrNoImageVolumes, runtime, minVersion)
	}
	return nil
}
