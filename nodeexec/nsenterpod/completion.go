package nsenterpod

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

var _ nodeexec.CompletionPodBuilder = (*Backend)(nil)

// CompletionPod is the pod Pod(req) would be, named name and created at
// now, whose container runs Argv(req) itself rather than holding for an
// exec (podexec.RunToCompletion): see nodeexec.CompletionPodBuilder. The
// NodeScript watcher runs scripts in these pods. Errors name the invalid
// field; req.Node must be set.
func (b *Backend) CompletionPod(req nodeexec.Request, name string, now time.Time) (*corev1.Pod, error) {
	if req.Node == "" {
		return nil, fmt.Errorf("%s: Request.Node is empty: give the node to run on", Name)
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	pod, err := agent.BuildPod(b.podSpec(req, name, now))
	if err != nil {
		return nil, err
	}
	return podexec.RunToCompletion(pod, b.Argv(req)), nil
}
