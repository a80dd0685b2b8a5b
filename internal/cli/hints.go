package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/backends"
	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
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
	if errors.Is(err, nodeexec.ErrImageNeverPull) {
		return fmt.Sprintf("hint: %s is not on node %q and --image-pull-policy is Never: %s", image, pe.Node, neverPullFix(command, backend))
	}
	e, known := backends.Lookup(backend)
	switch {
	case command == "agent install":
		return fmt.Sprintf("hint: the nodes cannot pull %s: give an image they can pull with --agent-image (or $NODEEXEC_AGENT_IMAGE; `nodeexec image push` puts one in your registry), "+
			"and for a registry that needs credentials --image-pull-secret NAME, a docker-registry secret in namespace %s (kubectl create secret docker-registry NAME -n %s ...)", image, pe.Namespace, pe.Namespace)
	case known && !e.OwnPod: // an ephemeral container
		return fmt.Sprintf("hint: the node cannot pull %s: give another --image; an ephemeral container pulls with its pod's own imagePullSecrets", image)
	case backend == debugpod.Name && strings.Contains(pe.Message, fmt.Sprintf("image volume %q", debugpod.AgentVolumeName)):
		return fmt.Sprintf("hint: the node cannot pull %s, nodeexec's image mounted in the debug pod (--agent-image-volume): give an image it can pull with --agent-image (or $NODEEXEC_AGENT_IMAGE; `nodeexec image push` puts one in your registry), "+
			"and for a registry that needs credentials --image-pull-secret NAME, a docker-registry secret in namespace %s; or run without the agent: --no-agent", image, pe.Namespace)
	case backend == debugpod.Name && strings.Contains(pe.Message, fmt.Sprintf("container %q", debugpod.AgentContainerName)):
		return fmt.Sprintf("hint: the node cannot pull %s, nodeexec's image for the debug pod's agent container: give an image it can pull with --agent-image (or $NODEEXEC_AGENT_IMAGE; `nodeexec image push` puts one in your registry), "+
			"and for a registry that needs credentials --image-pull-secret NAME, a docker-registry secret in namespace %s; or run without the agent: --no-agent (kubectl debug's pod as it is; a cut stream can then pass for a whole one)", image, pe.Namespace)
	case known && e.ImageFlag == "agent-image":
		return fmt.Sprintf("hint: the node cannot pull %s: give an image it can pull with --agent-image (or $NODEEXEC_AGENT_IMAGE; `nodeexec image push` puts one in your registry), "+
			"and for a registry that needs credentials --image-pull-secret NAME, a docker-registry secret in namespace %s; or run in a debug container instead: --backend debugpod --image IMAGE", image, pe.Namespace)
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

// imageFlag is the flag that sets the image a command's pods (or
// ephemeral containers) run: --agent-image for agent install and the
// agent-based backends, --image for the others.
func imageFlag(command, backend string) string {
	e, ok := backends.Lookup(backend)
	switch {
	case command == "agent install" || ok && e.ImageFlag == "agent-image":
		return "--agent-image"
	case ok && e.RunsAgentImage():
		return "--image or --agent-image" // debugpod: the user's image, and nodeexec's beside it
	}
	return "--image"
}

// neverPullFix is what to do about an image that is not on the node when
// the pull policy is Never.
func neverPullFix(command, backend string) string {
	return "give --image-pull-policy IfNotPresent so that the node pulls it, put the image on the node first, or give an image the node has with " + imageFlag(command, backend)
}

// neverPullError is the error for a run on which every node's pod failed
// to start because its image is not on the node and --image-pull-policy is
// Never (nodeexec.ErrImageNeverPull): bad input, so one error naming the
// image and the fix (exit status 2) rather than a summary. It is nil when
// errs is empty or any of them is something else.
func neverPullError(errs []error, command, backend string) error {
	var nodes []string
	image := ""
	for _, err := range errs {
		var pe *nodeexec.PodError
		if !errors.Is(err, nodeexec.ErrImageNeverPull) || !errors.As(err, &pe) {
			return nil
		}
		nodes = append(nodes, fmt.Sprintf("%q", pe.Node))
		if image == "" {
			image = pe.Image
		}
	}
	if len(nodes) == 0 {
		return nil
	}
	on := "node " + nodes[0]
	if len(nodes) > 1 {
		on = "nodes " + strings.Join(nodes, ", ")
		if len(nodes) > 3 {
			on = fmt.Sprintf("nodes %s and %d more", strings.Join(nodes[:3], ", "), len(nodes)-3)
		}
	}
	what := "the image"
	if image != "" {
		what = fmt.Sprintf("%s %q", imageFlag(command, backend), image)
	}
	return fmt.Errorf("--image-pull-policy Never: %s is not present on %s, so nothing ran (the kubelet's ErrImageNeverPull): %s",
		what, on, neverPullFix(command, backend))
}

// neverPullResults is neverPullError for the results of a run; skipped
// nodes (the run stopped before them) do not count.
func neverPullResults(results []nodeexec.NodeResult, backend string) error {
	var errs []error
	for _, r := range results {
		if !errors.Is(r.Err, nodeexec.ErrSkipped) {
			errs = append(errs, r.Err)
		}
	}
	return neverPullError(errs, "run", backend)
}
