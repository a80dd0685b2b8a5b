package nodeexec

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Sentinel errors for states a caller branches on. Returned errors wrap them;
// test with errors.Is.
var (
	// ErrTimeout: the request's Timeout expired before the command finished.
	ErrTimeout = errors.New("timed out")
	// ErrNodeNotFound: a node named by the caller does not exist (GET/LIST nodes).
	ErrNodeNotFound = errors.New("node not found")
	// ErrNoNodes: the targets (selector, or all) matched no node.
	ErrNoNodes = errors.New("no nodes matched")
	// ErrNodeNotReady: the node's Ready condition is not True, so a pod would not start there.
	ErrNodeNotReady = errors.New("node is not Ready")
	// ErrForbidden: the API server refused to create what the backend needs
	// (RBAC, or the namespace's Pod Security level). The wrapping error says
	// which, and how to fix it.
	ErrForbidden = errors.New("forbidden")
	// ErrImagePull: the kubelet could not pull the image of the pod meant to
	// run the command (or of the resident agents): a missing image or tag,
	// an unreachable registry, a bad reference, or credentials the registry
	// rejected. A *PodError whose Reason is one of ImagePullReasons matches
	// it with errors.Is; its Image and Message say which image and why.
	ErrImagePull = errors.New("image cannot be pulled")
	// ErrOutcomeUnknown: the stream to the command broke after the command
	// was started (the API server restarted, the connection to it or to
	// the kubelet was cut), so the rest of its output and its exit status
	// are lost. It is never a success and never the command's own failure:
	// ExitCode maps it to ExitOutcomeUnknown. The pod backends then delete
	// the pod (retried until the API server answers), which stops the
	// command if it was still running.
	ErrOutcomeUnknown = errors.New("outcome unknown: the connection to the command broke before its exit status arrived")
	// ErrImageNeverPull: the image is not on the node and the pull policy
	// is Never, so the kubelet will not pull it (its waiting reason
	// ErrImageNeverPull). A mistake in the request rather than an
	// infrastructure failure: retrying cannot help (the Runner does not
	// retry it). A *PodError with that Reason matches it, and ErrImagePull.
	ErrImageNeverPull = errors.New("image is not present on the node and the pull policy is Never")
	// ErrPodNotFound: the target pod does not exist (GET pods returned 404).
	// The backends that target a container (ephemeral, runtime) refuse the
	// run with it, before anything is created.
	ErrPodNotFound = errors.New("pod not found")
	// ErrContainerNotFound: the target pod has no (non-init, non-ephemeral)
	// container of the target's name.
	ErrContainerNotFound = errors.New("target container not found")
	// ErrContainerNotRunning: the target pod is not Running, or the target
	// container's status is not running (or it has no container ID yet).
	ErrContainerNotRunning = errors.New("target container is not running")
	// ErrWrongNode: Request.Node is set and is not the target pod's node.
	ErrWrongNode = errors.New("the pod is not on the requested node")
	// ErrUnsupported: a resident agent cannot run the request (for example
	// the nsenter backend's Env, which its pods get as their environment);
	// a wrapper such as package resident runs it with the wrapped backend
	// instead.
	ErrUnsupported = errors.New("not supported by a resident agent")
)

// Exit statuses of nodeexec's own, besides the command's (see ExitCode).
const (
	// ExitTimeout is the status of a run whose Timeout expired, as timeout(1).
	ExitTimeout = 124
	// ExitOutcomeUnknown is the status of a run whose outcome was lost
	// (ErrOutcomeUnknown), as timeout(1)'s "the tool itself failed".
	ExitOutcomeUnknown = 125
)

// imagePullReasons are the container waiting reasons the kubelet reports
// for an image it cannot pull (ErrImagePull and ImagePullBackOff alternate
// while it retries; InvalidImageName for a reference it cannot parse;
// ErrImageNeverPull for a missing image with pull policy Never).
var imagePullReasons = []string{"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}

// IsImagePullReason reports whether reason is a container waiting reason
// for an image that cannot be pulled (see ErrImagePull).
func IsImagePullReason(reason string) bool {
	return slices.Contains(imagePullReasons, reason)
}

// ExitError reports that the command ran and exited with a non-zero status.
type ExitError struct {
	// Node is the node the command ran on.
	Node string
	// Code is the exit status (1-255).
	Code int
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("command on node %q exited with code %d", e.Node, e.Code)
}

// ExitStatus returns Code, so an *ExitError satisfies k8s.io/utils/exec.ExitError-style checks.
func (e *ExitError) ExitStatus() int { return e.Code }

// PodError reports that the pod meant to run the command could not run it, for
// a reason reported by the kubelet or the API server: an image that cannot be
// pulled, a pod rejected by the kubelet (OutOfcpu, OutOfpods), eviction or
// preemption, a deadline, or a container that stopped on its own. These are
// infrastructure failures, distinct from the command's own exit status.
type PodError struct {
	Node      string
	Namespace string
	Pod       string
	// Reason is the machine-readable reason (e.g. "ErrImagePull", "OutOfcpu",
	// "DeadlineExceeded", "Evicted", "CreateContainerConfigError").
	Reason string
	// Message is the human-readable detail from the pod status: for an
	// image pull failure the registry's reason (the container's waiting
	// message, or the kubelet's Failed event when the status only says
	// "Back-off pulling image").
	Message string
	// Image is the image of the container that could not start, set for
	// image pull failures (see ErrImagePull).
	Image string
}

func (e *PodError) Error() string {
	msg := fmt.Sprintf("pod %s/%s on node %q could not run the command: %s", e.Namespace, e.Pod, e.Node, e.Reason)
	if e.Image != "" && !strings.Contains(e.Message, e.Image) {
		msg += fmt.Sprintf(": image %q", e.Image)
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// Is makes errors.Is(err, ErrImagePull) true for an image pull failure, and
// errors.Is(err, ErrImageNeverPull) for a missing image with pull policy
// Never.
func (e *PodError) Is(target error) bool {
	switch target {
	case ErrImagePull:
		return IsImagePullReason(e.Reason)
	case ErrImageNeverPull:
		return e.Reason == "ErrImageNeverPull"
	}
	return false
}

// ExitCode maps an error from Backend.Run to a process exit status: 0 for nil,
// the command's status for an *ExitError, 124 (as timeout(1)) for ErrTimeout,
// 125 for ErrOutcomeUnknown, and 1 for anything else.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	if errors.Is(err, ErrTimeout) {
		return ExitTimeout
	}
	if errors.Is(err, ErrOutcomeUnknown) {
		return ExitOutcomeUnknown
	}
	return 1
}
