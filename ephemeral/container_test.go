package ephemeral

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"github.com/nodeexec/nodeexec/internal/golden"
)

func targetPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", ResourceVersion: "42", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			NodeName:   "node-a",
			Containers: []corev1.Container{{Name: "app", Image: "nginx"}, {Name: "sidecar", Image: "envoy"}},
			EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debugger-abcde", Image: "busybox"}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
			{Name: "sidecar", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
		}},
	}
}

func spec(profile string) ContainerSpec {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	return ContainerSpec{
		Pod:             targetPod(),
		Target:          "app",
		Name:            "nodeexec-x2x2x2x2x2",
		Profile:         profile,
		Image:           DefaultImage,
		ImagePullPolicy: corev1.PullIfNotPresent,
		RunID:           "run1234567",
		Env:             map[string]string{"B": "cost $5", "A": "1"},
		Now:             now,
		Deadline:        now.Add(90*time.Second + 500*time.Millisecond),
		Command:         []string{"sh", "-c", `echo $$ $(HOME) "$1"`, "x"},
	}
}

// TestBuildContainerGolden pins the ephemeral container for every profile:
// kubectl's profile changes plus the gate, timeout and environment.
// Run with -update after a deliberate change.
func TestBuildContainerGolden(t *testing.T) {
	for _, profile := range Profiles() {
		t.Run(profile, func(t *testing.T) {
			_, ec, err := BuildContainer(spec(profile))
			if err != nil {
				t.Fatal(err)
			}
			golden.CheckYAML(t, profile+".yaml", ec)
		})
	}
}

// TestBuildContainerProfiles checks, independently of the golden files, what
// each profile does to an ephemeral container (kubectl's ephemeral style) and
// that the rest of the pod is untouched.
func TestBuildContainerProfiles(t *testing.T) {
	type props struct {
		privileged, nonRoot bool
		addCaps             []corev1.Capability
	}
	tests := map[string]props{
		"legacy":     {},
		"general":    {addCaps: []corev1.Capability{"SYS_PTRACE"}},
		"baseline":   {},
		"restricted": {nonRoot: true},
		"netadmin":   {addCaps: []corev1.Capability{"NET_ADMIN", "NET_RAW"}},
		"sysadmin":   {privileged: true},
	}
	for profile, want := range tests {
		t.Run(profile, func(t *testing.T) {
			s := spec(profile)
			pod, ec, err := BuildContainer(s)
			if err != nil {
				t.Fatal(err)
			}
			var got props
			if sc := ec.SecurityContext; sc != nil {
				got.privileged = sc.Privileged != nil && *sc.Privileged
				got.nonRoot = sc.RunAsNonRoot != nil && *sc.RunAsNonRoot
				if sc.Capabilities != nil {
					got.addCaps = sc.Capabilities.Add
				}
			}
			if diff := cmp.Diff(want, got, cmp.AllowUnexported(props{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if ec.TargetContainerName != "app" || !ec.Stdin || !ec.StdinOnce || ec.TTY {
				t.Errorf("target=%q stdin=%v stdinOnce=%v tty=%v", ec.TargetContainerName, ec.Stdin, ec.StdinOnce, ec.TTY)
			}
			if diff := cmp.Diff(targetPod(), s.Pod); diff != "" {
				t.Errorf("the input pod was modified (-want +got):\n%s", diff)
			}
			// Only the new ephemeral container differs.
			rest := pod.DeepCopy()
			rest.Spec.EphemeralContainers = rest.Spec.EphemeralContainers[:1]
			if diff := cmp.Diff(targetPod(), rest); diff != "" {
				t.Errorf("the pod changed beyond the appended container (-want +got):\n%s", diff)
			}
			if len(pod.Spec.EphemeralContainers) != 2 || &pod.Spec.EphemeralContainers[1] != ec {
				t.Errorf("the container is not the last of the pod's ephemeral containers")
			}
		})
	}
}

// TestBuildContainerCommand checks the gate, the on-node timeout and the
// escaping that gives the user's argv back after the kubelet's $(VAR) expansion.
func TestBuildContainerCommand(t *testing.T) {
	_, ec, err := BuildContainer(spec(DefaultProfile))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"timeout", "-s", "KILL", "91", "sh", "-c", gateScript, GateArg0, "sh", "-c", `echo $$$$ $$(HOME) "$$1"`, "x"}
	if diff := cmp.Diff(want, ec.Command); diff != "" {
		t.Errorf("command (-want +got):\n%s", diff)
	}
	// What the kubelet runs after expansion ($$ -> $).
	if got := expand(gateScript); !strings.HasPrefix(got, "echo $$ >"+PIDFile) || !strings.Contains(got, `read -r _ ||`) || !strings.HasSuffix(got, `exec "$@"`) {
		t.Errorf("expanded gate script = %q", got)
	}
	for i, a := range spec(DefaultProfile).Command {
		if got := expand(ec.Command[8+i]); got != a {
			t.Errorf("argv[%d] after expansion = %q, want %q", i, got, a)
		}
	}
	wantEnv := []corev1.EnvVar{
		{Name: EnvRunID, Value: "run1234567"},
		{Name: EnvDeadline, Value: "2026-11-21T12:01:30Z"},
		{Name: "A", Value: "1"},
		{Name: "B", Value: "cost $$5"},
	}
	if diff := cmp.Diff(wantEnv, ec.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
}

// expand mimics the kubelet's expansion of a command with no variables
// defined: $$ becomes $, and $(NAME) of an undefined NAME stays.
func expand(s string) string { return strings.ReplaceAll(s, "$$", "$") }

func TestBuildContainerErrors(t *testing.T) {
	tests := map[string]struct {
		mutate func(*ContainerSpec)
		want   string
	}{
		"unknown profile":  {func(s *ContainerSpec) { s.Profile = "admin" }, `unknown profile "admin": want one of legacy, general, baseline, restricted, netadmin, sysadmin`},
		"no pod":           {func(s *ContainerSpec) { s.Pod = nil }, "Pod is nil"},
		"bad prefix":       {func(s *ContainerSpec) { s.Name = "debugger-1" }, `does not start with "nodeexec-"`},
		"bad name":         {func(s *ContainerSpec) { s.Name = "nodeexec-A_B" }, `Name "nodeexec-A_B"`},
		"taken name":       {func(s *ContainerSpec) { s.Name = "nodeexec-x"; s.Pod.Spec.EphemeralContainers[0].Name = "nodeexec-x" }, `already has a container named "nodeexec-x"`},
		"no target":        {func(s *ContainerSpec) { s.Target = "db" }, `pod shop/web-1 has no container "db"`},
		"no image":         {func(s *ContainerSpec) { s.Image = "" }, "Image is empty"},
		"no run ID":        {func(s *ContainerSpec) { s.RunID = "" }, "RunID is empty"},
		"no command":       {func(s *ContainerSpec) { s.Command = nil }, "Command is empty"},
		"deadline not set": {func(s *ContainerSpec) { s.Deadline = s.Now }, "Deadline must be after Now"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := spec(DefaultProfile)
			tc.mutate(&s)
			_, _, err := BuildContainer(s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("BuildContainer error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestPatch checks that the patch adds exactly the new container, keeps the
// existing one, and carries the resourceVersion precondition.
func TestPatch(t *testing.T) {
	s := spec(DefaultProfile)
	updated, ec, err := BuildContainer(s)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := Patch(s.Pod, updated)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Metadata map[string]any `json:"metadata"`
		Spec     map[string]any `json:"spec"`
	}
	if err := json.Unmarshal(patch, &m); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]any{"resourceVersion": "42"}, m.Metadata); diff != "" {
		t.Errorf("metadata (-want +got):\n%s", diff)
	}
	oldJS, _ := json.Marshal(s.Pod)
	applied, err := strategicpatch.StrategicMergePatch(oldJS, patch, corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	var got corev1.Pod
	if err := json.Unmarshal(applied, &got); err != nil {
		t.Fatal(err)
	}
	want := updated.DeepCopy()
	if diff := cmp.Diff(want, &got); diff != "" {
		t.Errorf("pod after the patch (-want +got):\n%s", diff)
	}
	if got.Spec.EphemeralContainers[1].Name != ec.Name {
		t.Errorf("ephemeral containers = %v", got.Spec.EphemeralContainers)
	}
}

func TestCountOursAndDefaultTarget(t *testing.T) {
	pod := targetPod()
	for _, n := range []string{"nodeexec-a", "nodeexec-b", "other"} {
		pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: n}})
	}
	if got := CountOurs(pod); got != 2 {
		t.Errorf("CountOurs = %d, want 2", got)
	}
	if got := DefaultTarget(pod); got != "app" {
		t.Errorf("DefaultTarget = %q, want app", got)
	}
	pod.Annotations = map[string]string{"kubectl.kubernetes.io/default-container": "sidecar"}
	if got := DefaultTarget(pod); got != "sidecar" {
		t.Errorf("DefaultTarget with annotation = %q, want sidecar", got)
	}
	if !HasContainer(pod, "other") || !HasContainer(pod, "app") || HasContainer(pod, "db") {
		t.Errorf("HasContainer wrong")
	}
}
