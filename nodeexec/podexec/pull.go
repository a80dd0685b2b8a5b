package podexec

import (
	"context"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// PullEventTimeout bounds the Events lookup of WithPullReason.
const PullEventTimeout = 2 * time.Second

// WithPullReason returns pe with the registry's reason filled in when pe is
// an image pull failure whose waiting message does not carry it (the
// kubelet's ImagePullBackOff says only "Back-off pulling image ..."): the
// message of the newest Failed event of the pod that names the image (RBAC:
// list events in the pod's namespace). Best effort: any error leaves pe as
// it is. pe may be nil.
func WithPullReason(ctx context.Context, client kubernetes.Interface, pe *nodeexec.PodError) *nodeexec.PodError {
	if pe == nil || client == nil || !nodeexec.IsImagePullReason(pe.Reason) || hasPullDetail(pe.Message) {
		return pe
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), PullEventTimeout)
	defer cancel()
	list, err := client.CoreV1().Events(pe.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.name": pe.Pod, "reason": "Failed"}.AsSelector().String(),
	})
	if err != nil {
		return pe
	}
	if msg := PullEventMessage(list.Items, pe.Image); msg != "" {
		out := *pe
		if out.Message != "" {
			out.Message += "; "
		}
		out.Message += msg
		return &out
	}
	return pe
}

// hasPullDetail reports whether a waiting message already holds the
// registry's reason rather than only the kubelet's back-off notice.
func hasPullDetail(msg string) bool {
	return msg != "" && !strings.Contains(msg, "Back-off pulling image")
}

// PullEventMessage returns the message of the newest event in events that
// reports a failed pull of image (the kubelet's "Failed to pull image ..."
// Failed events), or "" when there is none.
func PullEventMessage(events []corev1.Event, image string) string {
	var best *corev1.Event
	for i := range events {
		ev := &events[i]
		if ev.Reason != "Failed" || !strings.Contains(ev.Message, "image") {
			continue
		}
		if image != "" && !strings.Contains(ev.Message, image) {
			continue
		}
		if strings.HasPrefix(ev.Message, "Error: ") { // "Error: ErrImagePull" says nothing more
			continue
		}
		if best == nil || eventTime(ev).After(eventTime(best)) {
			best = ev
		}
	}
	if best == nil {
		return ""
	}
	return best.Message
}

func eventTime(ev *corev1.Event) time.Time {
	return slices.MaxFunc([]time.Time{ev.LastTimestamp.Time, ev.EventTime.Time, ev.FirstTimestamp.Time}, func(a, b time.Time) int { return a.Compare(b) })
}
