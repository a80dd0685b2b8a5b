package podexec

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// CompletionPod is a pod backend's nodeexec.CompletionPodBuilder: it checks
// req (req.Node set, Request.Validate), builds req's pod with build (the
// pod Pod(req) would be, named and timed by the caller) and makes its first
// container run argv(req) to completion (RunToCompletion). Errors start
// with backend when req.Node is empty, and are build's or Validate's
// otherwise.
func CompletionPod(backend string, req nodeexec.Request, build func(nodeexec.Request) (*corev1.Pod, error), argv func(nodeexec.Request) []string) (*corev1.Pod, error) {
	if req.Node == "" {
		return nil, fmt.Errorf("%s: Request.Node is empty: give the node to run on", backend)
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	pod, err := build(req)
	if err != nil {
		return nil, err
	}
	return RunToCompletion(pod, argv(req)), nil
}
