package cli

import (
	"errors"
	"fmt"

	ucli "github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/resident"
	"github.com/nodeexec/nodeexec/nodeexec/runtimeexec"
	"github.com/nodeexec/nodeexec/nsenter"
)

// runtimeFlags are the flags of the runtime backend and of resident agents.
func runtimeFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringSliceFlag{Name: "runtime-endpoint", Usage: "runtime backend: container runtime socket `PATH` on the node, tried before the well-known ones (repeatable)"},
		&ucli.BoolFlag{Name: "no-proc-fallback", Usage: "runtime backend: fail when no runtime socket knows the container, instead of scanning /proc/*/cgroup for it"},
		&ucli.BoolFlag{Name: "use-resident", Usage: "nsenter and runtime backends: run in the node's resident agent (`nodeexec agent install`), reached through pods/portforward (exec as the fallback), instead of creating a pod, when there is one"},
		&ucli.StringFlag{Name: "resident-namespace", Value: resident.DefaultNamespace, Usage: "namespace of the resident agents"},
	}
}

// newRuntime builds the runtime backend: --pod [NAMESPACE/]NAME and
// --container name the target; agent pods go to ns.
func newRuntime(c *ucli.Context, client kubernetes.Interface, cfg *rest.Config, ns string, reqs corev1.ResourceList) (nodeexec.Backend, error) {
	podNS, pod, err := podRef(c, ns)
	if err != nil {
		return nil, err
	}
	var nss []nsenter.Namespace
	if c.IsSet("namespaces") {
		if nss, err = nsenter.ParseNamespaces(c.String("namespaces")); err != nil {
			return nil, err
		}
	}
	b, err := runtimeexec.New(runtimeexec.Options{
		PodOptions:       podOptions(c, client, cfg, ns, c.String("agent-image"), reqs),
		PodNamespace:     podNS,
		Pod:              pod,
		Container:        c.String("container"),
		Namespaces:       nss,
		RuntimeEndpoints: c.StringSlice("runtime-endpoint"),
		NoProcFallback:   c.Bool("no-proc-fallback"),
	})
	if err != nil {
		return nil, err
	}
	return withResident(c, client, cfg, b)
}

// withResident wraps b with resident.Wrap when --use-resident is set.
func withResident(c *ucli.Context, client kubernetes.Interface, cfg *rest.Config, b nodeexec.Backend) (nodeexec.Backend, error) {
	if !c.Bool("use-resident") {
		return b, nil
	}
	errOut := c.App.ErrWriter
	return resident.Wrap(b, resident.WrapOptions{Client: client, Config: cfg, Namespace: c.String("resident-namespace"),
		Warn: func(msg string) { fmt.Fprintf(errOut, "warning: %s\n", msg) }})
}

// checkRuntimeTargets: the runtime backend targets the pod of --pod, on its
// node; --node, --selector and --all do not apply.
func checkRuntimeTargets(c *ucli.Context, targets nodeexec.Targets) error {
	switch {
	case c.String("pod") == "":
		return errors.New("--backend runtime needs --pod [NAMESPACE/]NAME (and --container NAME unless the pod's default container will do): the container to run in")
	case len(targets.Nodes) > 0 || targets.Selector != "" || targets.All:
		return errors.New("--pod targets the pod's node: do not combine it with --node, --selector or --all")
	}
	_, _, err := podRef(c, "default")
	return err
}
