// Package nsenterpod is the nsenter backend (`nodeexec run --backend
// nsenter`): per node, a privileged hostPID pod running nodeexec's agent
// (package nodeexec/agent), which enters the namespaces of the node's PID 1
// with package nsenter, as `nsenter -t 1 -m -u -i -n -p` does. It declares
// what it needs through Requirements (Pod Security level "privileged"; RBAC to
// create, watch, exec into and delete pods) and Pod (the pod --explain shows).
package nsenterpod

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nodeexec/preflight"
	"github.com/nodeexec/nodeexec/nsenter"
)

// Name is the backend's name in results and in `nodeexec run --backend`.
const Name = "nsenter"

// DefaultNamespace is the Kubernetes namespace of the pods when
// Options.Namespace is empty.
const DefaultNamespace = podexec.DefaultNamespace

// PodOptions are the options every pod backend has (podexec.PodOptions):
// the client, the namespace of the pods, the image, its pull policy,
// secrets, priority class and requests, the run ID and the test hooks, each
// field with its default. Options embeds them.
type PodOptions = podexec.PodOptions

// Options configure a Backend.
//
//	nsenterpod.Options{PodOptions: nsenterpod.PodOptions{Client: client, Config: cfg, Namespace: "node-debug"}}
type Options struct {
	// PodOptions are the client, the Kubernetes namespace of the pods
	// (default DefaultNamespace; its Pod Security level must be
	// "privileged"), the agent image (default agent.DefaultImage), its pull
	// policy, secrets, priority class and requests, the run ID and the test
	// hooks; see PodOptions for each field's default.
	PodOptions
	// Namespaces are the Linux namespaces of the node's PID 1 the command
	// enters. Defaults to DefaultNamespaces() (mnt, uts, ipc, net, pid, like
	// `nsenter -t 1 -m -u -i -n -p`). Any of mnt, uts, ipc, net, pid, cgroup
	// and user; user works only because the pod shares the node's user
	// namespace (a Go process cannot enter another one, see ErrUserNamespace).
	// Unknown and repeated names are rejected by New.
	Namespaces []nsenter.Namespace
	// HostNetwork and HostIPC put the pod in the node's network and IPC
	// namespaces, as kubectl-node-shell does; they matter for the namespaces
	// not listed in Namespaces. Nil means true.
	HostNetwork, HostIPC *bool
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
// Backend is safe for concurrent use; all its pods share one watch. RunID
// is the value of the run-ID label on its pods.
type Backend struct {
	*podBackend
	o Options
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
)

// New validates o and returns a Backend. Errors name the bad field; nothing
// is created and the API server is not contacted.
func New(o Options) (*Backend, error) {
	base, err := podexec.NewPodBackend(Name, agent.DefaultImage, &o.PodOptions)
	if err != nil {
		return nil, err
	}
	if o.Namespaces == nil {
		o.Namespaces = nsenter.DefaultNamespaces()
	}
	if err := nsenter.ValidateNamespaces(o.Namespaces); err != nil {
		return nil, fmt.Errorf("nsenter: Options.Namespaces: %w", err)
	}
	o.Namespaces = slices.Clone(o.Namespaces)
	if o.HostNetwork == nil {
		o.HostNetwork = ptr.To(true)
	}
	if o.HostIPC == nil {
		o.HostIPC = ptr.To(true)
	}
	return &Backend{podBackend: base, o: o}, nil
}

// Name returns "nsenter".
func (b *Backend) Name() string { return Name }

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

// AgentCommand is the node (req.Node) and the agent command line (Argv) to
// run req in a resident agent (it implements resident.Commander). req.Env
// goes with the request to the agent's listener (agent.WireRequest.Env,
// never on the command line, which then has agent.EnvFromAgentFlag), as a
// shell's TERM does; a request with SecretEnv wraps nodeexec.ErrUnsupported:
// the backend passes it as the pod's environment from the Secret, which a
// resident agent pod does not have.
func (b *Backend) AgentCommand(_ context.Context, req nodeexec.Request) (string, []string, error) {
	if len(req.SecretEnv) > 0 {
		return "", nil, fmt.Errorf("%w: environment variables from Secrets for the nsenter backend in a resident agent", nodeexec.ErrUnsupported)
	}
	argv := b.Argv(req)
	if len(req.Env) > 0 {
		argv = agent.WithEnvFromAgent(argv)
	}
	return req.Node, argv, nil
}

// Argv is what runs in the agent container for req: agent.NsenterArgv with
// req.Command, or `sh -c Script` (the node's sh when mnt is entered).
func (b *Backend) Argv(req nodeexec.Request) []string {
	return agent.NsenterArgv(b.o.Namespaces, req.Argv())
}

// Pod builds the pod that Run would create for req, without creating it.
func (b *Backend) Pod(req nodeexec.Request) (*corev1.Pod, error) {
	return b.build(req, podexec.PodName(req.Node, b.o.NameSuffix()), b.o.Clock.Now())
}

// CompletionPod is the pod Pod(req) would be, named name and created at
// now, whose container runs Argv(req) itself rather than holding for an
// exec (podexec.RunToCompletion): see nodeexec.CompletionPodBuilder. The
// NodeScript watcher runs scripts in these pods. Errors name the invalid
// field; req.Node must be set.
func (b *Backend) CompletionPod(req nodeexec.Request, name string, now time.Time) (*corev1.Pod, error) {
	return podexec.CompletionPod(Name, req, func(req nodeexec.Request) (*corev1.Pod, error) { return b.build(req, name, now) }, b.Argv)
}

// build is req's agent pod, named name and created at now.
func (b *Backend) build(req nodeexec.Request, name string, now time.Time) (*corev1.Pod, error) {
	return agent.BuildPod(agent.PodSpec{
		PodBase:     podexec.NewPodBase(&b.o.PodOptions, req, name, now, b.Argv(req)),
		HostNetwork: *b.o.HostNetwork, HostIPC: *b.o.HostIPC,
	})
}

// launch is the pod for req and Argv run in its agent container, resumable
// through the agent's spool (agent.SpoolFor).
func (b *Backend) launch(req nodeexec.Request) (podexec.Launch, error) {
	pod, err := b.Pod(req)
	if err != nil {
		return podexec.Launch{}, err
	}
	argv, resume := agent.SpoolFor(b.Argv(req), pod.Name, req)
	return podexec.Launch{Pod: pod, Container: agent.ContainerName, Argv: argv, Resume: resume}, nil
}

// Run runs req on req.Node in a new agent pod and deletes the pod. See
// nodeexec.Backend for the errors; the command's exit code is the agent's.
func (b *Backend) Run(ctx context.Context, req nodeexec.Request) (nodeexec.Result, error) {
	return b.podBackend.Run(ctx, req, b.launch)
}

// Preflight asks the API server to admit the pod for node without creating
// it (a server-side dry-run create), so that an RBAC refusal or a Pod
// Security rejection (the pod needs "privileged") is reported before any pod
// exists. Errors wrap nodeexec.ErrForbidden.
func (b *Backend) Preflight(ctx context.Context, node string) error {
	return b.podBackend.Preflight(ctx, node, b.launch)
}
