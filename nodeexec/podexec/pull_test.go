package podexec

import (
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeexec/nodeexec/nodeexec"
)

func TestImagePullClassification(t *testing.T) {
	for reason, want := range map[string]bool{
		"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true,
		"CreateContainerConfigError": false, "OutOfcpu": false, "Evicted": false, "": false,
	} {
		err := fmt.Errorf("node a: %w", &nodeexec.PodError{Reason: reason})
		if got := errors.Is(err, nodeexec.ErrImagePull); got != want {
			t.Errorf("reason %q: errors.Is(err, ErrImagePull) = %v, want %v", reason, got, want)
		}
	}
}

func TestPodFailureNamesTheImage(t *testing.T) {
	for _, reason := range []string{"ErrImagePull", "ImagePullBackOff", "InvalidImageName"} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.test/missing:1"}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
				Name: "c", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "why"}},
			}}},
		}
		pe := PodFailure(pod, "c", "n1")
		if pe == nil || pe.Image != "registry.test/missing:1" || pe.Reason != reason || !errors.Is(pe, nodeexec.ErrImagePull) {
			t.Fatalf("%s: PodFailure = %#v, want the image and reason", reason, pe)
		}
		if want := `pod ns/p on node "n1" could not run the command: ` + reason + `: image "registry.test/missing:1": why`; pe.Error() != want {
			t.Errorf("%s: Error() = %q, want %q", reason, pe.Error(), want)
		}
	}
}

// TestPodFailureNamesTheImageVolume: an image volume that cannot be pulled
// fails the container mounting it with the volume's image in the message
// (seen with containerd 2.3.7): the PodError names that image and the
// volume, not the container's own image.
func TestPodFailureNamesTheImageVolume(t *testing.T) {
	msg := `rpc error: code = NotFound desc = failed to pull and unpack image "registry.test/agent:missing": not found`
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:stable"}},
			Volumes: []corev1.Volume{{Name: "tools", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "registry.test/agent:missing"}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
			Name: "c", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: msg}},
		}}},
	}
	pe := PodFailure(pod, "c", "n1")
	if pe == nil || pe.Image != "registry.test/agent:missing" || pe.Message != `image volume "tools": `+msg {
		t.Fatalf("PodFailure = %#v, want the volume's image", pe)
	}
	pod.Status.ContainerStatuses[0].State.Waiting.Message = `failed to pull and unpack image "docker.io/library/busybox:stable"`
	if pe := PodFailure(pod, "c", "n1"); pe.Image != "busybox:stable" {
		t.Errorf("the container's own image failing: %#v", pe)
	}
}

func TestWithPullReason(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ev := func(name, reason, msg string, at time.Time) *corev1.Event {
		return &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: "ns"},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "p", Namespace: "ns"},
			Reason:         reason, Message: msg, LastTimestamp: metav1.NewTime(at),
		}
	}
	client := fake.NewClientset(
		ev("e1", "Failed", `Failed to pull image "r.test/x:1": old reason`, t0),
		ev("e2", "Failed", `Failed to pull image "r.test/x:1": 401 Unauthorized`, t0.Add(time.Second)),
		ev("e3", "Failed", "Error: ErrImagePull", t0.Add(2*time.Second)),
		ev("e4", "BackOff", `Back-off pulling image "r.test/x:1"`, t0.Add(3*time.Second)),
	)
	backoff := &nodeexec.PodError{Namespace: "ns", Pod: "p", Reason: "ImagePullBackOff", Message: `Back-off pulling image "r.test/x:1"`, Image: "r.test/x:1"}
	// The fake's field selector support is partial: PullEventMessage does the selection that matters.
	got := WithPullReason(t.Context(), client, backoff)
	if want := `Back-off pulling image "r.test/x:1"; Failed to pull image "r.test/x:1": 401 Unauthorized`; got.Message != want {
		t.Errorf("Message = %q, want %q", got.Message, want)
	}
	if backoff.Message != `Back-off pulling image "r.test/x:1"` {
		t.Error("WithPullReason modified its argument")
	}
	detailed := &nodeexec.PodError{Namespace: "ns", Pod: "p", Reason: "ErrImagePull", Message: "not found", Image: "r.test/x:1"}
	if got := WithPullReason(t.Context(), client, detailed); got != detailed {
		t.Errorf("a message with the registry's reason was changed: %q", got.Message)
	}
	other := &nodeexec.PodError{Namespace: "ns", Pod: "p", Reason: "OutOfcpu"}
	if got := WithPullReason(t.Context(), client, other); got != other {
		t.Error("a non-pull failure was changed")
	}
	if PullEventMessage(nil, "x") != "" {
		t.Error("PullEventMessage(nil) is not empty")
	}
}
