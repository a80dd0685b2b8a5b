package cli

import (
	"errors"
	"fmt"
	"strings"

	ucli "github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/ephemeral"
	"github.com/nodeexec/nodeexec/nodeexec/runtimeexec"
)

// podRef parses --pod [NAMESPACE/]NAME; the namespace defaults to ns.
func podRef(c *ucli.Context, ns string) (namespace, name string, err error) {
	ref := c.String("pod")
	namespace, name, ok := strings.Cut(ref, "/")
	if !ok {
		namespace, name = ns, ref
	}
	if name == "" || namespace == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("--pod %q: want NAME or NAMESPACE/NAME", ref)
	}
	return namespace, name, nil
}

// checkTargets validates the targets: --pod (only with --backend ephemeral)
// replaces --node, --selector and --all.
func checkTargets(c *ucli.Context, targets nodeexec.Targets) error {
	if c.String("backend") == runtimeexec.Name {
		return checkRuntimeTargets(c, targets)
	}
	pod := c.String("pod")
	isEphemeral := c.String("backend") == ephemeral.Name
	switch {
	case c.String("container") != "" && !isEphemeral:
		return errors.New("--container is for --backend ephemeral")
	case pod == "" && isEphemeral:
		return errors.New("--backend ephemeral needs --pod [NAMESPACE/]NAME: the running pod to add the ephemeral container to")
	case pod == "":
		return targets.Validate()
	case !isEphemeral:
		return fmt.Errorf("--pod is for --backend ephemeral (got --backend %s)", c.String("backend"))
	case len(targets.Nodes) > 0 || targets.Selector != "" || targets.All:
		return errors.New("--pod targets the pod's node: do not combine it with --node, --selector or --all")
	}
	if _, _, err := podRef(c, "default"); err != nil {
		return err
	}
	return nil
}

// podTargets returns targets unchanged, or for --pod the pod's node, after
// checking (without creating anything) that the pod and target container
// run, the pod has room for another ephemeral container, and the API server
// would admit it (dry run: RBAC, Pod Security).
func podTargets(c *ucli.Context, backend nodeexec.Backend, targets nodeexec.Targets) (nodeexec.Targets, error) {
	if c.String("backend") == runtimeexec.Name {
		return runtimeTargets(c, backend)
	}
	b, ok := backend.(*ephemeral.Backend)
	if c.String("pod") == "" || !ok {
		return targets, nil
	}
	node, _, err := b.Target(c.Context)
	if err != nil {
		return targets, err
	}
	// RBAC and Pod Security judge a dry run of the patch: refused here, exit 2.
	if err := b.Preflight(c.Context, node); err != nil {
		return targets, err
	}
	return nodeexec.Targets{Nodes: []string{node}}, nil
}

// newEphemeral builds the ephemeral backend from its flags. --profile
// defaults to the backend's own default (general) unless given.
func newEphemeral(c *ucli.Context, client kubernetes.Interface, cfg *rest.Config, ns string) (nodeexec.Backend, error) {
	namespace, pod, err := podRef(c, ns)
	if err != nil {
		return nil, err
	}
	profile := ""
	if c.IsSet("profile") {
		profile = c.String("profile")
	}
	return ephemeral.New(ephemeral.Options{
		Client:          client,
		Config:          cfg,
		Namespace:       namespace,
		Pod:             pod,
		Container:       c.String("container"),
		Profile:         profile,
		Image:           c.String("image"),
		ImagePullPolicy: corev1.PullPolicy(c.String("image-pull-policy")),
	})
}
