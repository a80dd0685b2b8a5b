package podexec_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

func waiting(name, reason, msg string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}
}

func running(name string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
}

func TestPodFailure(t *testing.T) {
	podErr := func(reason, msg string) *nodeexec.PodError {
		return &nodeexec.PodError{Node: "n1", Namespace: "ns", Pod: "p", Reason: reason, Message: msg}
	}
	now := metav1.Now()
	tests := []struct {
		name     string
		status   corev1.PodStatus
		deleting bool
		want     *nodeexec.PodError
	}{
		{name: "new pod", status: corev1.PodStatus{}},
		{name: "pending, scheduled", status: corev1.PodStatus{Phase: corev1.PodPending, StartTime: &now}},
		{name: "container creating", status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{waiting("debugger", "ContainerCreating", "")}}},
		{name: "running", status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{running("debugger")}}},
		{
			name:   "failed with reason",
			status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "The node was low on resource: memory."},
			want:   podErr("Evicted", "The node was low on resource: memory."),
		},
		{
			name:   "rejected by the kubelet",
			status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "OutOfcpu", Message: "Pod Node didn't have enough resource: cpu"},
			want:   podErr("OutOfcpu", "Pod Node didn't have enough resource: cpu"),
		},
		{name: "failed without reason", status: corev1.PodStatus{Phase: corev1.PodFailed}, want: podErr("Failed", "")},
		{name: "succeeded", status: corev1.PodStatus{Phase: corev1.PodSucceeded}, want: podErr("Completed", "the pod's container exited before the command ran")},
		{
			name:   "image pull error",
			status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{waiting("debugger", "ErrImagePull", "pull access denied")}},
			want:   podErr("ErrImagePull", "pull access denied"),
		},
		{
			name:   "fatal waiting reason of another container is ignored",
			status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{waiting("sidecar", "ErrImagePull", "x"), running("debugger")}},
		},
		{
			name: "terminated container",
			status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
				Name: "debugger", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137, Message: "out of memory"}},
			}}},
			want: podErr("OOMKilled", `container "debugger" exited with code 137: out of memory`),
		},
		{
			name:   "secret not yet in the kubelet's cache",
			status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{waiting("debugger", "CreateContainerConfigError", "failed to sync secret cache: timed out waiting for the condition")}},
		},
		{
			name:   "pod not yet registered with the kubelet's configmap cache",
			status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{waiting("debugger", "CreateContainerConfigError", `object "ns"/"cm" not registered`)}},
		},
		{
			name:   "secret missing",
			status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{waiting("debugger", "CreateContainerConfigError", `secret "s" not found`)}},
			want:   podErr("CreateContainerConfigError", `secret "s" not found`),
		},
		{name: "being deleted", status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{running("debugger")}}, deleting: true, want: podErr("Deleted", "the pod is being deleted")},
		{name: "being deleted wins over failed", status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"}, deleting: true, want: podErr("Deleted", "the pod is being deleted")},
	}
	for _, reason := range []string{"ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError", "CreateContainerError", "RunContainerError", "CrashLoopBackOff"} {
		tests = append(tests, struct {
			name     string
			status   corev1.PodStatus
			deleting bool
			want     *nodeexec.PodError
		}{
			name:   "waiting " + reason,
			status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{waiting("debugger", reason, "detail of "+reason)}},
			want:   podErr(reason, "detail of "+reason),
		})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Status: tt.status}
			if tt.deleting {
				pod.DeletionTimestamp = &now
			}
			got := podexec.PodFailure(pod, "debugger", "n1")
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("PodFailure mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFatalWaiting(t *testing.T) {
	for _, tt := range []struct {
		reason, message string
		want            bool
	}{
		{"ContainerCreating", "", false},
		{"PodInitializing", "", false},
		{"CrashLoopBackOff", "back-off 10s restarting failed container", false},
		{"ErrImagePull", "pull access denied", true},
		{"CreateContainerError", "context deadline exceeded", true},
		{"CreateContainerConfigError", `secret "s" not found`, true},
		{"CreateContainerConfigError", `couldn't find key X in Secret ns/s`, true},
		{"CreateContainerConfigError", `configmap "c" not found`, true},
		{"CreateContainerConfigError", "failed to sync secret cache: timed out waiting for the condition", false},
		{"CreateContainerConfigError", "failed to sync configmap cache: timed out waiting for the condition", false},
		{"CreateContainerConfigError", `object "ns"/"s" not registered`, false},
	} {
		w := &corev1.ContainerStateWaiting{Reason: tt.reason, Message: tt.message}
		if got := podexec.FatalWaiting(w); got != tt.want {
			t.Errorf("FatalWaiting(%s: %q) = %v, want %v", tt.reason, tt.message, got, tt.want)
		}
	}
	if podexec.FatalWaiting(nil) {
		t.Error("FatalWaiting(nil) = true, want false")
	}
}

func TestIsContainerNotReady(t *testing.T) {
	upgrade := func(msg string) error { return &httpstream.UpgradeFailureError{Cause: errors.New(msg)} }
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{name: "nil", err: nil, want: false},
		{name: "container not found", err: upgrade(`container not found ("debugger")`), want: true},
		{name: "wrapped", err: fmt.Errorf("exec: %w", upgrade(`unable to upgrade connection: container not found ("debugger")`)), want: true},
		{name: "not running", err: upgrade(`container debugger is not running`), want: true},
		{name: "no such container", err: upgrade(`Error: No such container: abc`), want: true},
		{name: "not created", err: upgrade(`container is not created or running`), want: true},
		{name: "plain error with the same text", err: errors.New(`container not found ("debugger")`), want: false},
		{name: "refused upgrade on the error channel (1.34)", err: fmt.Errorf("exec: %w", errors.New(`Internal error occurred: unable to upgrade connection: container not found ("debugger")`)), want: true},
		{name: "other refused upgrade on the error channel", err: errors.New(`Internal error occurred: unable to upgrade connection: pod does not exist`), want: false},
		{name: "other upgrade failure", err: upgrade("403 Forbidden"), want: false},
		{name: "other error", err: errors.New("connection reset by peer"), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := podexec.IsContainerNotReady(tt.err); got != tt.want {
				t.Errorf("IsContainerNotReady(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestCreateError(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "team"}}
	pods := schema.GroupResource{Resource: "pods"}
	tests := []struct {
		name          string
		err           error
		wantForbidden bool
		want          []string
		notWant       []string
	}{
		{
			name: "pod security baseline",
			err: apierrors.NewForbidden(pods, "x", errors.New(`violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true), `+
				`privileged (container "debugger" must not set securityContext.privileged=true)`)),
			wantForbidden: true,
			want: []string{
				`namespace "team"`, `level "baseline"`, "hostNetwork=true",
				"kubectl label namespace team pod-security.kubernetes.io/enforce=privileged --overwrite",
				"-n/--namespace",
			},
			notWant: []string{"RBAC"},
		},
		{
			name:          "pod security restricted with version",
			err:           apierrors.NewForbidden(pods, "x", errors.New(`violates PodSecurity "restricted:v1.30": allowPrivilegeEscalation != false`)),
			wantForbidden: true,
			want:          []string{`level "restricted"`, "kubectl label namespace team"},
		},
		{
			name:          "rbac",
			err:           apierrors.NewForbidden(pods, "", errors.New(`User "alice" cannot create resource "pods" in API group "" in the namespace "team"`)),
			wantForbidden: true,
			want:          []string{"creating pod team/x", `User "alice" cannot create`, "RBAC", "create, get, list, watch and delete on pods", "create on pods/exec", `namespace "team"`},
			notWant:       []string{"kubectl label"},
		},
		{
			name:    "not forbidden",
			err:     apierrors.NewAlreadyExists(pods, "x"),
			want:    []string{"creating pod team/x", "already exists"},
			notWant: []string{"RBAC", "Pod Security"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := podexec.CreateError(pod, tt.err)
			if got == nil {
				t.Fatal("CreateError returned nil")
			}
			if errors.Is(got, nodeexec.ErrForbidden) != tt.wantForbidden {
				t.Errorf("errors.Is(%q, ErrForbidden) = %v, want %v", got, !tt.wantForbidden, tt.wantForbidden)
			}
			for _, s := range tt.want {
				if !strings.Contains(got.Error(), s) {
					t.Errorf("error %q does not contain %q", got, s)
				}
			}
			for _, s := range tt.notWant {
				if strings.Contains(got.Error(), s) {
					t.Errorf("error %q contains %q", got, s)
				}
			}
			if !tt.wantForbidden && !errors.Is(got, tt.err) {
				t.Errorf("error %q does not wrap the API error", got)
			}
		})
	}
}
