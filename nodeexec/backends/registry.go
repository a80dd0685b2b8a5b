package backends

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeexec/nodeexec/ephemeral"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
	"github.com/nodeexec/nodeexec/nodeexec/nsenterpod"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nodeexec/resident"
	"github.com/nodeexec/nodeexec/nodeexec/runtimeexec"
	"github.com/nodeexec/nodeexec/nsenter"
)

// The registration table: one Entry per backend, read by the command line
// (its --backend values, flags, checks and the backend it builds), by the
// NodeScript watcher (NewNode, NodeNames, DefaultImage) and by `make
// generate`, which writes the NodeScript CRD's spec.backend.name enum from
// WatcherNames (a test pins the committed CRD to it). A new backend is its
// package and one Entry in registry below; no other file switches on a
// backend's name.

// Target is what a backend runs on.
type Target int

const (
	// TargetNode backends run on the node a Request names.
	TargetNode Target = iota
	// TargetContainer backends run beside or in a running pod's container
	// (--pod [NAMESPACE/]NAME, --container NAME), on that pod's node.
	TargetContainer
)

// FlagKind is the type of a Flag's value.
type FlagKind int

const (
	// StringFlag takes one value.
	StringFlag FlagKind = iota
	// BoolFlag takes none.
	BoolFlag
	// StringSliceFlag is repeatable, or takes a comma list.
	StringSliceFlag
)

// Flag describes a command-line flag of the backends without tying the
// library to a flag package: the command line turns each into one of its
// own flags, with the same name, default and usage.
type Flag struct {
	Name string
	Kind FlagKind
	// Value is the default ("" for none; ignored for BoolFlag and
	// StringSliceFlag).
	Value string
	// Env, when set, is an environment variable whose value (when not
	// empty) replaces Value.
	Env   string
	Usage string
	// Exclusive flags are refused with a backend that does not list them
	// in Entry.Flags (a bool set, or a slice given): the backend would
	// ignore them.
	Exclusive bool
}

// Values are the flag values a command line parsed, by flag name (as
// urfave/cli's Context gives them): "" (false, nil) for a flag not given
// and without a default.
type Values interface {
	String(name string) string
	Bool(name string) bool
	StringSlice(name string) []string
	IsSet(name string) bool
}

// Env is what Entry.Build needs besides the flags.
type Env struct {
	Client kubernetes.Interface
	Config *rest.Config
	// Namespace is the run's namespace (-n): the pods' namespace, and
	// that of a --pod given without one.
	Namespace string
	// Requests are --cpu-request and --memory-request, parsed.
	Requests corev1.ResourceList
	// Node is the one target node ("" when not exactly one): the node
	// whose resident agent the ephemeral backend joins without --pod.
	Node string
	// Warn reports what a wrapped resident agent cannot do (--use-resident).
	Warn func(msg string)
}

// TargetFlags are the targets a command line gives, for
// Entry.CheckTargets: run's --node, --selector and --all, or shell's NODE.
type TargetFlags struct {
	// Shell is true for `shell NODE` (Nodes is then NODE).
	Shell    bool
	Nodes    []string
	Selector string
	All      bool
}

// Entry is one backend's registration.
type Entry struct {
	// Name is the backend's name (--backend, spec.backend.name, NodeResult.Backend).
	Name string
	// Target is what the backend runs on.
	Target Target
	// RunToCompletion is whether the NodeScript watcher may run it: it
	// builds a pod that runs a script to completion (CompletionPodBuilder)
	// from NodeOptions (Node). Its name is then in the CRD's enum.
	RunToCompletion bool
	// OwnPod is whether the backend creates a pod of its own on the node:
	// --image-pull-secret, --priority-class and the requests apply. (The
	// ephemeral backend adds a container to a running pod.)
	OwnPod bool
	// DefaultImage is the image of its pod or container when none is given.
	DefaultImage string
	// ImageFlag is the flag that sets that image: "image" (the user's
	// image) or "agent-image" (nodeexec's own, at agent.Path).
	ImageFlag string
	// Flags are the names of the backend-specific flags it reads (those
	// of Flags() that not every backend reads).
	Flags []string
	// SecretEnvRefusal, when not empty, is the error for --env-from-secret,
	// which the backend cannot give the command.
	SecretEnvRefusal string
	// Check validates its flags without the cluster; nil: nothing to check.
	Check func(v Values) error
	// CheckTargets validates the targets with its flags (--pod,
	// --container); nil: a node backend's (the command line's default).
	CheckTargets func(v Values, t TargetFlags) error
	// Build builds the backend from the flags: flags → options → New.
	Build func(ctx context.Context, v Values, e Env) (nodeexec.Backend, error)
	// Node builds the backend from a NodeScript's spec.backend
	// (NodeOptions, and the pod options made of it); nil unless
	// RunToCompletion.
	Node func(o NodeOptions, po podexec.PodOptions) (nodeexec.Backend, error)
}

// RunsAgentImage is whether the backend's pod runs nodeexec's own image
// (--agent-image), whose platforms the command line checks against the
// nodes': as its container's image, or (debugpod, unless --no-agent) as
// the agent container's beside the user's image.
func (e *Entry) RunsAgentImage() bool {
	return e.ImageFlag == "agent-image" || slices.Contains(e.Flags, "agent-image")
}

// Defaults among the registered backends.
const (
	// DefaultName is the backend of a NodeScript without spec.backend.name,
	// of NewNode without NodeOptions.Name, of `shell`, and of `run` when
	// --image or --profile is given (flags only a debug container has).
	DefaultName = debugpod.Name
	// RunDefaultName is `run`'s backend otherwise: the fastest pod (no
	// volume for the kubelet to wait on) and the one whose run survives a
	// cut stream.
	RunDefaultName = nsenterpod.Name
)

// registry is the table, in the order --backend lists the names.
var registry = []Entry{
	{
		Name: debugpod.Name, Target: TargetNode, RunToCompletion: true, OwnPod: true,
		DefaultImage: debugpod.DefaultImage, ImageFlag: "image",
		Flags: []string{"profile", "image", "agent-image", "no-agent", "agent-image-volume"},
		Check: checkDebugpod,
		Build: func(_ context.Context, v Values, e Env) (nodeexec.Backend, error) {
			return debugpod.New(debugpod.Options{PodOptions: podOptions(v, e, v.String("image")), Profile: v.String("profile"),
				AgentImage: v.String("agent-image"), NoAgent: v.Bool("no-agent"), AgentImageVolume: imageVolumeMode(v)})
		},
		Node: func(o NodeOptions, po podexec.PodOptions) (nodeexec.Backend, error) {
			return debugpod.New(debugpod.Options{PodOptions: po, Profile: o.Profile})
		},
	},
	{
		Name: nsenterpod.Name, Target: TargetNode, RunToCompletion: true, OwnPod: true,
		DefaultImage: agent.DefaultImage, ImageFlag: "agent-image",
		Flags: []string{"namespaces", "agent-image", "use-resident", "resident-namespace"},
		Check: checkNamespaces,
		Build: func(ctx context.Context, v Values, e Env) (nodeexec.Backend, error) {
			nss, err := nsenter.ParseNamespaces(v.String("namespaces"))
			if err != nil {
				return nil, fmt.Errorf("--namespaces: %w", err)
			}
			b, err := nsenterpod.New(nsenterpod.Options{PodOptions: podOptions(v, e, v.String("agent-image")), Namespaces: nss})
			if err != nil {
				return nil, err
			}
			return withResident(v, e, b)
		},
		Node: func(o NodeOptions, po podexec.PodOptions) (nodeexec.Backend, error) {
			var nss []nsenter.Namespace
			for _, n := range o.Namespaces {
				nss = append(nss, nsenter.Namespace(n))
			}
			return nsenterpod.New(nsenterpod.Options{PodOptions: po, Namespaces: nss, HostNetwork: o.HostNetwork, HostIPC: o.HostIPC})
		},
	},
	{
		Name: ephemeral.Name, Target: TargetContainer,
		DefaultImage: debugpod.DefaultImage, ImageFlag: "image",
		Flags:        []string{"profile", "image", "pod", "container", "resident-namespace"},
		Check:        checkProfile,
		CheckTargets: ephemeralTargets,
		Build:        newEphemeral,
	},
	{
		Name: runtimeexec.Name, Target: TargetContainer, OwnPod: true,
		DefaultImage: agent.DefaultImage, ImageFlag: "agent-image",
		Flags: []string{"pod", "container", "namespaces", "agent-image", "runtime-endpoint", "no-proc-fallback", "use-resident", "resident-namespace"},
		SecretEnvRefusal: "--env-from-secret: --backend runtime runs the command in the running container, whose environment the kubelet set when it started: " +
			"it cannot add variables from a Secret; give -e KEY=VALUE, or run beside the container with --backend ephemeral --pod [NAMESPACE/]NAME",
		Check:        checkNamespaces,
		CheckTargets: runtimeTargets,
		Build:        newRuntime,
	},
}

// Flags are the flags of the backends, in the order a command lists them
// (after --backend, which the command line defines: its default differs
// per command). Every backend reads the pod flags (--image-pull-policy,
// --image-pull-secret, --priority-class, --cpu-request,
// --memory-request); the others are named in Entry.Flags.
func Flags() []Flag {
	return []Flag{
		{Name: "profile", Value: debugpod.DefaultProfile, Usage: "kubectl debug profile: " + strings.Join(debugpod.Profiles(), ", ")},
		{Name: "image", Value: debugpod.DefaultImage, Env: "NODEEXEC_IMAGE", Usage: "image of the debugging container (default: $NODEEXEC_IMAGE when set and not empty)"},
		{Name: "image-pull-policy", Value: string(corev1.PullIfNotPresent), Usage: "Always, IfNotPresent or Never"},
		{Name: "image-pull-secret", Kind: StringSliceFlag, Usage: "secret `NAME` for pulling the image (repeatable)"},
		{Name: "priority-class", Usage: "priorityClassName of the pods"},
		{Name: "cpu-request", Value: "10m", Usage: "CPU request of the debugging container"},
		{Name: "memory-request", Value: "16Mi", Usage: "memory request of the debugging container"},
		{Name: "pod", Usage: "ephemeral backend: the running pod `[NAMESPACE/]NAME` to add the ephemeral container to; the run targets its node (no --node, --selector or --all)"},
		{Name: "container", Usage: "ephemeral backend: the target container whose processes the command sees (default: the pod's default container, else its first)"},
		{Name: "namespaces", Value: "mnt,uts,ipc,net,pid", Usage: "nsenter backend: namespaces of the node's PID 1 to enter, a comma list of mnt, uts, ipc, net, pid, cgroup, user, or all"},
		{Name: "agent-image", Value: agent.DefaultImage, Env: "NODEEXEC_AGENT_IMAGE", Usage: "nsenter, runtime and debugpod backends: nodeexec's image, the agent (nodeexec at " + agent.Path + "; debugpod copies it into its pod to run the command under it; default: $NODEEXEC_AGENT_IMAGE when set and not empty)"},
		{Name: "no-agent", Kind: BoolFlag, Exclusive: true, Usage: "debugpod backend: run the command as kubectl debug would, without nodeexec's agent container (no --agent-image pulled; but a cut stream can then pass for a whole one, kubernetes/kubernetes#124571)"},
		{Name: "agent-image-volume", Kind: BoolFlag, Exclusive: true, Usage: "debugpod backend: mount --agent-image as an image volume on every node (refusing nodes without: Kubernetes 1.35+ with containerd 2.1+ or CRI-O 1.31+) instead of copying nodeexec-spool from it with an agent container; =false: copy on every node (default: the volume on the nodes known to have image volumes, the copy elsewhere)"},
		{Name: "runtime-endpoint", Kind: StringSliceFlag, Exclusive: true, Usage: "runtime backend: container runtime socket `PATH` on the node, tried before the well-known ones (repeatable)"},
		{Name: "no-proc-fallback", Kind: BoolFlag, Exclusive: true, Usage: "runtime backend: fail when no runtime socket knows the container, instead of scanning /proc/*/cgroup for it"},
		{Name: "use-resident", Kind: BoolFlag, Exclusive: true, Usage: "nsenter and runtime backends: run in the node's resident agent (`nodeexec agent install`), reached through pods/portforward (exec as the fallback), instead of creating a pod, when there is one"},
		{Name: "resident-namespace", Value: resident.DefaultNamespace, Usage: "namespace of the resident agents"},
	}
}

// Entries returns the table, in the order --backend lists the names.
func Entries() []Entry { return slices.Clone(registry) }

// Names are the names of every backend, in the table's order.
func Names() []string {
	var out []string
	for _, e := range registry {
		out = append(out, e.Name)
	}
	return out
}

// Lookup returns the entry of the backend name, and false when no backend
// has that name.
func Lookup(name string) (Entry, bool) {
	i := slices.IndexFunc(registry, func(e Entry) bool { return e.Name == name })
	if i < 0 {
		return Entry{}, false
	}
	return registry[i], true
}

// WatcherNames are the names of the backends the NodeScript watcher may
// run (RunToCompletion), the default first: the values of
// spec.backend.name.
func WatcherNames() []string {
	var out []string
	for _, e := range registry {
		if e.RunToCompletion {
			out = append(out, e.Name)
		}
	}
	return out
}

// ContainerNames are the names of the backends that target a container.
func ContainerNames() []string {
	var out []string
	for _, e := range registry {
		if e.Target == TargetContainer {
			out = append(out, e.Name)
		}
	}
	return out
}

// FlagUsers are the names of the backends whose Entry.Flags has flag.
func FlagUsers(flag string) []string {
	var out []string
	for _, e := range registry {
		if slices.Contains(e.Flags, flag) {
			out = append(out, e.Name)
		}
	}
	return out
}

// podOptions are the pod backends' shared options from the flags: image is
// --image or --agent-image.
func podOptions(v Values, e Env, image string) podexec.PodOptions {
	return podexec.PodOptions{
		Client:            e.Client,
		Config:            e.Config,
		Namespace:         e.Namespace,
		Image:             image,
		ImagePullPolicy:   corev1.PullPolicy(v.String("image-pull-policy")),
		ImagePullSecrets:  v.StringSlice("image-pull-secret"),
		PriorityClassName: v.String("priority-class"),
		Requests:          e.Requests,
	}
}

// checkProfile refuses a --profile kubectl debug does not have.
func checkProfile(v Values) error {
	if p := v.String("profile"); !slices.Contains(debugpod.Profiles(), p) {
		return fmt.Errorf("unknown --profile %q: want one of %s", p, strings.Join(debugpod.Profiles(), ", "))
	}
	return nil
}

// imageVolumeMode is debugpod's Options.AgentImageVolume for
// --agent-image-volume: always when given, never when given =false, auto
// when not given.
func imageVolumeMode(v Values) debugpod.ImageVolumeMode {
	switch {
	case !v.IsSet("agent-image-volume"):
		return debugpod.ImageVolumeAuto
	case v.Bool("agent-image-volume"):
		return debugpod.ImageVolumeAlways
	default:
		return debugpod.ImageVolumeNever
	}
}

// checkDebugpod refuses an unknown --profile, and --agent-image-volume
// with --no-agent (no agent to mount).
func checkDebugpod(v Values) error {
	if v.Bool("no-agent") && v.Bool("agent-image-volume") {
		return fmt.Errorf("--agent-image-volume and --no-agent: give one of them (--agent-image-volume mounts the agent's image, --no-agent runs without the agent)")
	}
	return checkProfile(v)
}

// checkNamespaces refuses a --namespaces nsenter cannot enter.
func checkNamespaces(v Values) error {
	if _, err := nsenter.ParseNamespaces(v.String("namespaces")); err != nil {
		return fmt.Errorf("--namespaces: %w", err)
	}
	return nil
}

// withResident wraps b with resident.Wrap when --use-resident is set.
func withResident(v Values, e Env, b nodeexec.Backend) (nodeexec.Backend, error) {
	if !v.Bool("use-resident") {
		return b, nil
	}
	return resident.Wrap(b, resident.WrapOptions{Client: e.Client, Config: e.Config, Namespace: v.String("resident-namespace"), Warn: e.Warn})
}

// PodRef parses --pod [NAMESPACE/]NAME; the namespace defaults to ns.
func PodRef(v Values, ns string) (namespace, name string, err error) {
	ref := v.String("pod")
	namespace, name, ok := strings.Cut(ref, "/")
	if !ok {
		namespace, name = ns, ref
	}
	if name == "" || namespace == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("--pod %q: want NAME or NAMESPACE/NAME", ref)
	}
	return namespace, name, nil
}

// ephemeralTargets: --pod replaces --node, --selector and --all; without
// it, one node (run's one --node, shell's NODE) whose resident agent the
// container joins.
func ephemeralTargets(v Values, t TargetFlags) error {
	pod := v.String("pod")
	if t.Shell {
		if pod == "" && v.String("container") != "" {
			return errors.New("--container goes with --pod; without --pod the shell joins NODE's resident agent")
		}
	} else {
		switch {
		case pod == "" && len(t.Nodes) == 1 && t.Selector == "" && !t.All:
			// Node-level use: through the node's resident agent (hostPID, hostNetwork).
			if v.String("container") != "" {
				return errors.New("--container goes with --pod; with --node the target is the node's resident agent")
			}
			return nil
		case pod == "":
			return errors.New("--backend ephemeral needs --pod [NAMESPACE/]NAME (the running pod to add the ephemeral container to), or one --node whose resident agent (`nodeexec agent install`) it joins")
		case len(t.Nodes) > 0 || t.Selector != "" || t.All:
			return errors.New("--pod targets the pod's node: do not combine it with --node, --selector or --all")
		}
	}
	if pod == "" {
		return nil
	}
	_, _, err := PodRef(v, "default")
	return err
}

// runtimeTargets: the runtime backend targets the pod of --pod, on its
// node; --node, --selector and --all do not apply.
func runtimeTargets(v Values, t TargetFlags) error {
	switch {
	case t.Shell && v.String("pod") == "":
		return errors.New("--backend runtime needs --pod [NAMESPACE/]NAME: the running pod whose container the shell opens in (on NODE), and --container NAME unless its default container will do")
	case v.String("pod") == "":
		return errors.New("--backend runtime needs --pod [NAMESPACE/]NAME (and --container NAME unless the pod's default container will do): the container to run in")
	case !t.Shell && (len(t.Nodes) > 0 || t.Selector != "" || t.All):
		return errors.New("--pod targets the pod's node: do not combine it with --node, --selector or --all")
	}
	_, _, err := PodRef(v, "default")
	return err
}

// newEphemeral builds the ephemeral backend from its flags. --profile
// defaults to the backend's own default (general) unless given.
//
// Without --pod, for one node (Env.Node), the target is that node's
// resident agent pod: hostPID and hostNetwork, so the ephemeral container
// sees the node's processes and network (and its files under /proc/1/root)
// without a new pod. Ephemeral containers stay in the agent pod until it
// is replaced.
func newEphemeral(ctx context.Context, v Values, e Env) (nodeexec.Backend, error) {
	var namespace, pod, container string
	if v.String("pod") == "" {
		if e.Node == "" {
			return nil, errors.New("--backend ephemeral needs --pod [NAMESPACE/]NAME, or one node whose resident agent it joins")
		}
		namespace = v.String("resident-namespace")
		name, ok, err := resident.Find(ctx, e.Client, namespace, e.Node)
		if err != nil {
			return nil, fmt.Errorf("looking for the resident agent on node %q: %w", e.Node, err)
		}
		if !ok {
			return nil, fmt.Errorf("no ready resident agent on node %q in namespace %q: install them with `nodeexec agent install`, or give --pod", e.Node, namespace)
		}
		pod, container = name, agent.ContainerName
	} else {
		var err error
		if namespace, pod, err = PodRef(v, e.Namespace); err != nil {
			return nil, err
		}
		container = v.String("container")
	}
	profile := ""
	if v.IsSet("profile") {
		profile = v.String("profile")
	}
	return ephemeral.New(ephemeral.Options{
		Client:          e.Client,
		Config:          e.Config,
		Namespace:       namespace,
		Pod:             pod,
		Container:       container,
		Profile:         profile,
		Image:           v.String("image"),
		ImagePullPolicy: corev1.PullPolicy(v.String("image-pull-policy")),
	})
}

// newRuntime builds the runtime backend: --pod [NAMESPACE/]NAME and
// --container name the target; agent pods go to Env.Namespace.
func newRuntime(_ context.Context, v Values, e Env) (nodeexec.Backend, error) {
	podNS, pod, err := PodRef(v, e.Namespace)
	if err != nil {
		return nil, err
	}
	var nss []nsenter.Namespace
	if v.IsSet("namespaces") {
		if nss, err = nsenter.ParseNamespaces(v.String("namespaces")); err != nil {
			return nil, err
		}
	}
	b, err := runtimeexec.New(runtimeexec.Options{
		PodOptions:       podOptions(v, e, v.String("agent-image")),
		PodNamespace:     podNS,
		Pod:              pod,
		Container:        v.String("container"),
		Namespaces:       nss,
		RuntimeEndpoints: v.StringSlice("runtime-endpoint"),
		NoProcFallback:   v.Bool("no-proc-fallback"),
	})
	if err != nil {
		return nil, err
	}
	return withResident(v, e, b)
}
