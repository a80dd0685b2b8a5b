package cli

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	ucli "github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/backends"
)

// The backend flags, shared by run and shell: --backend and the flags of
// the registered backends (backends.Flags), turned into urfave/cli flags,
// and --explain.
// What a backend checks, how its targets are given and how it is built
// from the flags are its entry's (backends.Entry); nothing here names a
// backend.

// explainFlag is --explain, shared by run and shell.
func explainFlag() ucli.Flag {
	return &ucli.BoolFlag{Name: "explain", Usage: "print the pod the backend would create and why (profile, Pod Security level, RBAC, preflight result); create nothing"}
}

// backendNames lists the values of --backend.
func backendNames() []string { return backends.Names() }

// backendFlags are the flags that choose and configure a backend; each maps
// onto one field of that backend's Options. defaultBackend is --backend's
// default; empty: chosen by backendName.
func backendFlags(defaultBackend string) []ucli.Flag {
	usage := "how to reach the node: " + strings.Join(backendNames(), ", ")
	if defaultBackend == "" {
		usage += " (default: " + backends.RunDefaultName + ", the node's own namespaces from a pod without volumes; " + backends.DefaultName + " when --image or --profile is given, which only a debug container has)"
	}
	flags := []ucli.Flag{&ucli.StringFlag{Name: "backend", Value: defaultBackend, Usage: usage}}
	for _, f := range backends.Flags() {
		flags = append(flags, urfaveFlag(f))
	}
	return flags
}

// urfaveFlag is the urfave/cli flag of a backend flag.
func urfaveFlag(f backends.Flag) ucli.Flag {
	switch f.Kind {
	case backends.BoolFlag:
		return &ucli.BoolFlag{Name: f.Name, Usage: f.Usage}
	case backends.StringSliceFlag:
		return &ucli.StringSliceFlag{Name: f.Name, Usage: f.Usage}
	default:
		v := f.Value
		if f.Env != "" {
			v = envOr(f.Env, v)
		}
		return &ucli.StringFlag{Name: f.Name, Value: v, Usage: f.Usage}
	}
}

// backendName is the backend the flags choose: --backend when given; else,
// for run (whose --backend has no default value), backends.DefaultName
// (debugpod) when --image or --profile is given (flags only a debug
// container has: the command then runs in that image, with kubectl debug's
// profile), and backends.RunDefaultName (nsenter) otherwise — the fastest
// pod (no volume for the kubelet to wait on, about 300 ms) and the one
// whose run survives a cut stream (see README, "The default backend").
func backendName(c *ucli.Context) string {
	if name := c.String("backend"); name != "" {
		return name
	}
	if c.IsSet("image") || c.IsSet("profile") {
		return backends.DefaultName
	}
	return backends.RunDefaultName
}

// backendEntry is the registration of the backend the flags choose.
func backendEntry(c *ucli.Context) (backends.Entry, error) {
	name := backendName(c)
	e, ok := backends.Lookup(name)
	if !ok {
		return e, fmt.Errorf("unknown --backend %q: want one of %s", name, strings.Join(backendNames(), ", "))
	}
	return e, nil
}

// checkBackendFlags validates the backend flags without touching the cluster.
func checkBackendFlags(c *ucli.Context) error {
	e, err := backendEntry(c)
	if err != nil {
		return err
	}
	if _, err := requests(c); err != nil {
		return err
	}
	if err := checkExclusiveFlags(c, e); err != nil {
		return err
	}
	if e.Check != nil {
		if err := e.Check(c); err != nil {
			return err
		}
	}
	// The image the backend's pod or container runs: --image or --agent-image.
	if err := checkImage(e.ImageFlag, c.String(e.ImageFlag)); err != nil {
		return err
	}
	// debugpod's agent container runs --agent-image beside it.
	if e.ImageFlag != "agent-image" && e.RunsAgentImage() && !c.Bool("no-agent") {
		if err := checkImage("agent-image", c.String("agent-image")); err != nil {
			return err
		}
	}
	switch p := corev1.PullPolicy(c.String("image-pull-policy")); p {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return fmt.Errorf("--image-pull-policy %q: want Always, IfNotPresent or Never", p)
	}
	if err := checkDNSNames(c, "image-pull-secret", "priority-class"); err != nil {
		return err
	}
	if c.IsSet("resident-namespace") {
		if msgs := validation.IsDNS1123Label(c.String("resident-namespace")); len(msgs) > 0 {
			return fmt.Errorf("--resident-namespace %q: not a namespace name (%s)", c.String("resident-namespace"), strings.Join(msgs, "; "))
		}
	}
	return nil
}

// checkExclusiveFlags refuses a flag only some backends use
// (backends.Flag.Exclusive) that backend e would ignore, naming the
// backends that use it. (--pod and --container, which also change the
// targets, are checked with them: checkBackendTargets.)
func checkExclusiveFlags(c *ucli.Context, e backends.Entry) error {
	for _, f := range backends.Flags() {
		set := c.Bool(f.Name) || len(c.StringSlice(f.Name)) > 0
		if !f.Exclusive || !set || slices.Contains(e.Flags, f.Name) {
			continue
		}
		return fmt.Errorf("--%s is for --backend %s; --backend %s does not use it: drop it, or choose that backend", f.Name, strings.Join(backends.FlagUsers(f.Name), " or "), e.Name)
	}
	return nil
}

// checkBackendTargets validates the targets with --pod and --container:
// the backend's own check (backends.Entry.CheckTargets) for one that
// targets a container; for a node backend, --pod and --container are
// refused, and run's targets must name nodes.
func checkBackendTargets(c *ucli.Context, t backends.TargetFlags) error {
	e, _ := backends.Lookup(backendName(c)) // an unknown name is refused by checkBackendFlags
	if e.CheckTargets != nil {
		return e.CheckTargets(c, t)
	}
	if t.Shell {
		for _, f := range []string{"pod", "container"} {
			if c.String(f) != "" {
				return fmt.Errorf("--%s is for --backend %s; --backend %s opens a pod of its own on NODE: drop --%s, or choose one of those backends", f, strings.Join(backends.ContainerNames(), " or "), backendName(c), f)
			}
		}
		return nil
	}
	switch {
	case c.String("container") != "":
		return errors.New("--container is for --backend ephemeral")
	case c.String("pod") == "":
		return nodeexec.Targets{Nodes: t.Nodes, Selector: t.Selector, All: t.All}.Validate()
	default:
		return fmt.Errorf("--pod is for --backend ephemeral (got --backend %s)", backendName(c))
	}
}

// newBackend builds the backend --backend names from its flags
// (backends.Entry.Build).
func newBackend(c *ucli.Context, client kubernetes.Interface, cfg *rest.Config, ns string) (nodeexec.Backend, error) {
	reqs, err := requests(c)
	if err != nil {
		return nil, err
	}
	e, err := backendEntry(c)
	if err != nil {
		return nil, err
	}
	errOut := c.App.ErrWriter
	return e.Build(c.Context, c, backends.Env{
		Client: client, Config: cfg, Namespace: ns, Requests: reqs, Node: oneNode(c),
		Warn: func(msg string) { fmt.Fprintf(errOut, "warning: %s\n", msg) },
	})
}

// oneNode is the one target node of the command line: shell's NODE, or
// run's one --node ("" if none or several).
func oneNode(c *ucli.Context) string {
	if c.Command != nil && c.Command.Name == "shell" {
		return c.Args().First()
	}
	if nodes := splitCSV(c.StringSlice("node")); len(nodes) == 1 {
		return nodes[0]
	}
	return ""
}

// podTargets returns targets unchanged, or, for a backend that targets a
// pod's container (nodeexec.TargetResolver: --pod), the pod's node, after
// checking (without creating anything) that the pod and target container
// run. The preflight that follows (runPreflight) asks the API server
// whether it would admit what the backend adds (dry run: RBAC, Pod
// Security).
func podTargets(c *ucli.Context, backend nodeexec.Backend, targets nodeexec.Targets) (nodeexec.Targets, error) {
	r, ok := nodeexec.As[nodeexec.TargetResolver](backend)
	if !ok {
		return targets, nil
	}
	node, err := r.TargetNode(c.Context)
	if err != nil {
		return targets, err
	}
	return nodeexec.Targets{Nodes: []string{node}}, nil
}

// requests reads --cpu-request and --memory-request.
func requests(c *ucli.Context) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	for _, f := range []struct {
		flag string
		name corev1.ResourceName
	}{{"cpu-request", corev1.ResourceCPU}, {"memory-request", corev1.ResourceMemory}} {
		q, err := parseQuantity(f.flag, c.String(f.flag))
		if err != nil {
			return nil, err
		}
		if !q.IsZero() {
			out[f.name] = q
		}
	}
	return out, nil
}
