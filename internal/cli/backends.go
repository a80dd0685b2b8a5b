package cli

import (
	"fmt"
	"slices"
	"strings"

	ucli "github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeexec/nodeexec/ephemeral"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
	"github.com/nodeexec/nodeexec/nodeexec/nsenterpod"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nodeexec/runtimeexec"
	"github.com/nodeexec/nodeexec/nsenter"
)

// backendNames lists the values of --backend.
func backendNames() []string {
	return []string{debugpod.Name, nsenterpod.Name, ephemeral.Name, runtimeexec.Name}
}

// backendFlags are the flags that choose and configure a backend; each maps
// onto one field of that backend's Options. defaultBackend is --backend's
// default; empty: chosen by backendName.
func backendFlags(defaultBackend string) []ucli.Flag {
	usage := "how to reach the node: " + strings.Join(backendNames(), ", ")
	if defaultBackend == "" {
		usage += " (default: " + nsenterpod.Name + ", the node's own namespaces from a pod without volumes; " + debugpod.Name + " when --image or --profile is given, which only a debug container has)"
	}
	return append([]ucli.Flag{
		&ucli.StringFlag{Name: "backend", Value: defaultBackend, Usage: usage},
		&ucli.StringFlag{Name: "profile", Value: debugpod.DefaultProfile, Usage: "kubectl debug profile: " + strings.Join(debugpod.Profiles(), ", ")},
		&ucli.StringFlag{Name: "image", Value: envOr("NODEEXEC_IMAGE", debugpod.DefaultImage), Usage: "image of the debugging container (default: $NODEEXEC_IMAGE when set and not empty)"},
		&ucli.StringFlag{Name: "image-pull-policy", Value: string(corev1.PullIfNotPresent), Usage: "Always, IfNotPresent or Never"},
		&ucli.StringSliceFlag{Name: "image-pull-secret", Usage: "secret `NAME` for pulling the image (repeatable)"},
		&ucli.StringFlag{Name: "priority-class", Usage: "priorityClassName of the pods"},
		&ucli.StringFlag{Name: "cpu-request", Value: "10m", Usage: "CPU request of the debugging container"},
		&ucli.StringFlag{Name: "memory-request", Value: "16Mi", Usage: "memory request of the debugging container"},
		&ucli.StringFlag{Name: "pod", Usage: "ephemeral backend: the running pod `[NAMESPACE/]NAME` to add the ephemeral container to; the run targets its node (no --node, --selector or --all)"},
		&ucli.StringFlag{Name: "container", Usage: "ephemeral backend: the target container whose processes the command sees (default: the pod's default container, else its first)"},
		&ucli.StringFlag{Name: "namespaces", Value: "mnt,uts,ipc,net,pid", Usage: "nsenter backend: namespaces of the node's PID 1 to enter, a comma list of mnt, uts, ipc, net, pid, cgroup, user, or all"},
		&ucli.StringFlag{Name: "agent-image", Value: envOr("NODEEXEC_AGENT_IMAGE", agent.DefaultImage), Usage: "nsenter backend: the agent image (nodeexec at " + agent.Path + "; default: $NODEEXEC_AGENT_IMAGE when set and not empty)"},
	}, runtimeFlags()...)
}

// backendName is the backend the flags choose: --backend when given; else,
// for run (whose --backend has no default value), debugpod when --image or
// --profile is given (flags only a debug container has: the command then
// runs in that image, with kubectl debug's profile), and the nsenter backend
// otherwise — the fastest pod (no volume for the kubelet to wait on, about
// 300 ms) and the one whose run survives a cut stream (see README, "The
// default backend").
func backendName(c *ucli.Context) string {
	if name := c.String("backend"); name != "" {
		return name
	}
	if c.IsSet("image") || c.IsSet("profile") {
		return debugpod.Name
	}
	return nsenterpod.Name
}

// checkBackendFlags validates the backend flags without touching the cluster.
func checkBackendFlags(c *ucli.Context) error {
	name := backendName(c)
	if !slices.Contains(backendNames(), name) {
		return fmt.Errorf("unknown --backend %q: want one of %s", name, strings.Join(backendNames(), ", "))
	}
	if _, err := requests(c); err != nil {
		return err
	}
	if err := checkBackendOnlyFlags(c, name); err != nil {
		return err
	}
	if name == nsenterpod.Name || name == runtimeexec.Name {
		if _, err := nsenter.ParseNamespaces(c.String("namespaces")); err != nil {
			return fmt.Errorf("--namespaces: %w", err)
		}
	}
	if name == debugpod.Name || name == ephemeral.Name {
		if p := c.String("profile"); !slices.Contains(debugpod.Profiles(), p) {
			return fmt.Errorf("unknown --profile %q: want one of %s", p, strings.Join(debugpod.Profiles(), ", "))
		}
	}
	// The image the backend's pod or container runs: --image for debugpod
	// and ephemeral, --agent-image for nsenter and runtime.
	image := "image"
	if name == nsenterpod.Name || name == runtimeexec.Name {
		image = "agent-image"
	}
	if err := checkImage(image, c.String(image)); err != nil {
		return err
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

// backendOnlyFlags are flags only some backends use, and those backends.
// (--pod and --container, which also change the targets, are checked with
// them: checkTargets, checkShellTargets.)
var backendOnlyFlags = []struct {
	flag     string
	backends []string
}{
	{"no-proc-fallback", []string{runtimeexec.Name}},
	{"runtime-endpoint", []string{runtimeexec.Name}},
	{"use-resident", []string{nsenterpod.Name, runtimeexec.Name}},
}

// checkBackendOnlyFlags refuses a flag that backend name would ignore,
// naming the backends that use it.
func checkBackendOnlyFlags(c *ucli.Context, name string) error {
	for _, f := range backendOnlyFlags {
		set := c.Bool(f.flag) || len(c.StringSlice(f.flag)) > 0
		if !set || slices.Contains(f.backends, name) {
			continue
		}
		return fmt.Errorf("--%s is for --backend %s; --backend %s does not use it: drop it, or choose that backend", f.flag, strings.Join(f.backends, " or "), name)
	}
	return nil
}

// newBackend builds the backend --backend names from its flags.
func newBackend(c *ucli.Context, client kubernetes.Interface, cfg *rest.Config, ns string) (nodeexec.Backend, error) {
	reqs, err := requests(c)
	if err != nil {
		return nil, err
	}
	switch name := backendName(c); name {
	case ephemeral.Name:
		return newEphemeral(c, client, cfg, ns)
	case debugpod.Name:
		return debugpod.New(debugpod.Options{
			PodOptions: podOptions(c, client, cfg, ns, c.String("image"), reqs),
			Profile:    c.String("profile"),
		})
	case nsenterpod.Name:
		nss, err := nsenter.ParseNamespaces(c.String("namespaces"))
		if err != nil {
			return nil, fmt.Errorf("--namespaces: %w", err)
		}
		b, err := nsenterpod.New(nsenterpod.Options{
			PodOptions: podOptions(c, client, cfg, ns, c.String("agent-image"), reqs),
			Namespaces: nss,
		})
		if err != nil {
			return nil, err
		}
		return withResident(c, client, cfg, b)
	case runtimeexec.Name:
		return newRuntime(c, client, cfg, ns, reqs)
	default:
		return nil, fmt.Errorf("unknown --backend %q: want one of %s", name, strings.Join(backendNames(), ", "))
	}
}

// podOptions are the pod backends' shared options from the flags: image is
// --image or --agent-image, reqs from requests.
func podOptions(c *ucli.Context, client kubernetes.Interface, cfg *rest.Config, ns, image string, reqs corev1.ResourceList) podexec.PodOptions {
	return podexec.PodOptions{
		Client:            client,
		Config:            cfg,
		Namespace:         ns,
		Image:             image,
		ImagePullPolicy:   corev1.PullPolicy(c.String("image-pull-policy")),
		ImagePullSecrets:  c.StringSlice("image-pull-secret"),
		PriorityClassName: c.String("priority-class"),
		Requests:          reqs,
	}
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
