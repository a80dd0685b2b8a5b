package cli

import (
	"errors"
	"fmt"
	"strings"

	ucli "github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeexec/nodeexec/ephemeral"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/resident"
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
	if backendName(c) == runtimeexec.Name {
		return checkRuntimeTargets(c, targets)
	}
	pod := c.String("pod")
	isEphemeral := backendName(c) == ephemeral.Name
	switch {
	case c.String("container") != "" && !isEphemeral:
		return errors.New("--container is for --backend ephemeral")
	case pod == "" && isEphemeral && len(targets.Nodes) == 1 && targets.Selector == "" && !targets.All:
		// Node-level use: through the node's resident agent (hostPID, hostNetwork).
		if c.String("container") != "" {
			return errors.New("--container goes with --pod; with --node the target is the node's resident agent")
		}
		return nil
	case pod == "" && isEphemeral:
		return errors.New("--backend ephemeral needs --pod [NAMESPACE/]NAME (the running pod to add the ephemeral container to), or one --node whose resident agent (`nodeexec agent install`) it joins")
	case pod == "":
		return targets.Validate()
	case !isEphemeral:
		return fmt.Errorf("--pod is for --backend ephemeral (got --backend %s)", backendName(c))
	case len(targets.Nodes) > 0 || targets.Selector != "" || targets.All:
		return errors.New("--pod targets the pod's node: do not combine it with --node, --selector or --all")
	}
	if _, _, err := podRef(c, "default"); err != nil {
		return err
	}
	return nil
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

// ephemeralNode is the node whose resident agent the ephemeral backend
// joins without --pod: shell's NODE, or run's one --node ("" if none).
func ephemeralNode(c *ucli.Context) string {
	if c.Command != nil && c.Command.Name == "shell" {
		return c.Args().First()
	}
	if nodes := splitCSV(c.StringSlice("node")); len(nodes) == 1 {
		return nodes[0]
	}
	return ""
}

// newEphemeral builds the ephemeral backend from its flags. --profile
// defaults to the backend's own default (general) unless given.
//
// Without --pod, for one --node (shell: its NODE), the target is that
// node's resident agent pod: hostPID and hostNetwork, so the ephemeral
// container sees the node's processes and network (and its files under
// /proc/1/root) without a new pod. Ephemeral containers stay in the agent pod until it is replaced.
func newEphemeral(c *ucli.Context, client kubernetes.Interface, cfg *rest.Config, ns string) (nodeexec.Backend, error) {
	var namespace, pod, container string
	if c.String("pod") == "" {
		node := ephemeralNode(c)
		if node == "" {
			return nil, errors.New("--backend ephemeral needs --pod [NAMESPACE/]NAME, or one node whose resident agent it joins")
		}
		namespace = c.String("resident-namespace")
		name, ok, err := resident.Find(c.Context, client, namespace, node)
		if err != nil {
			return nil, fmt.Errorf("looking for the resident agent on node %q: %w", node, err)
		}
		if !ok {
			return nil, fmt.Errorf("no ready resident agent on node %q in namespace %q: install them with `nodeexec agent install`, or give --pod", node, namespace)
		}
		pod, container = name, agent.ContainerName
	} else {
		var err error
		if namespace, pod, err = podRef(c, ns); err != nil {
			return nil, err
		}
		container = c.String("container")
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
		Container:       container,
		Profile:         profile,
		Image:           c.String("image"),
		ImagePullPolicy: corev1.PullPolicy(c.String("image-pull-policy")),
	})
}
