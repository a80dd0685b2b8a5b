package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/ephemeral"
	"github.com/nodeexec/nodeexec/nodeexec/runtimeexec"
	"github.com/nodeexec/nodeexec/nsenter"
)

// pullHint is the fix for an image that cannot be pulled, naming the flags
// of the command and backend that set the image and the pull secret. It is
// "" for any other error.
func pullHint(err error, command, backend string) string {
	var pe *nodeexec.PodError
	if !errors.Is(err, nodeexec.ErrImagePull) || !errors.As(err, &pe) {
		return ""
	}
	image := "the image"
	if pe.Image != "" {
		image = fmt.Sprintf("%q", pe.Image)
	}
	switch {
	case command == "agent install":
		return fmt.Sprintf("hint: the nodes cannot pull %s: give an image they can pull with --agent-image (or $NODEEXEC_AGENT_IMAGE; `nodeexec image push` puts one in your registry), "+
			"and for a registry that needs credentials --image-pull-secret NAME, a docker-registry secret in namespace %s (kubectl create secret docker-registry NAME -n %s ...)", image, pe.Namespace, pe.Namespace)
	case backend == ephemeral.Name:
		return fmt.Sprintf("hint: the node cannot pull %s: give another --image; an ephemeral container pulls with its pod's own imagePullSecrets", image)
	case backend == nsenter.Name || backend == runtimeexec.Name:
		return fmt.Sprintf("hint: the node cannot pull %s: give an image it can pull with --agent-image (or $NODEEXEC_AGENT_IMAGE), "+
			"and for a registry that needs credentials --image-pull-secret NAME, a docker-registry secret in namespace %s", image, pe.Namespace)
	default:
		return fmt.Sprintf("hint: the node cannot pull %s: give an image it can pull with --image (or $NODEEXEC_IMAGE), "+
			"and for a registry that needs credentials --image-pull-secret NAME, a docker-registry secret in namespace %s", image, pe.Namespace)
	}
}

// printPullHint writes the pull hint of the first node that failed to pull
// its image, once for the whole run.
func printPullHint(w io.Writer, backend string, results []nodeexec.NodeResult) {
	for _, r := range results {
		if h := pullHint(r.Err, "run", backend); h != "" {
			fmt.Fprintln(w, h)
			return
		}
	}
}
