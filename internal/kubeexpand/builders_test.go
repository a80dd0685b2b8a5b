package kubeexpand_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/ephemeral"
	"github.com/nodeexec/nodeexec/internal/kubeexpand"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
)

// nasty are strings the kubelet's expansion would change if a builder put
// them in a container's command or environment unescaped.
var nasty = []string{
	"kill -0 $$", "awk '{print $1}'", "pa$$word", "$(HOME)", "$(NODEEXEC_NODE)", "$$(X)", "$", "a$", "$(unclosed",
	"`date`", `"quoted" 'single'`, "line1\nline2", "", "$$$", "tab\there", "$(", "x$(Y)z$$",
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"HOME": "/root", "Y": "y"}
	for in, want := range map[string]string{
		"$$": "$", "$(HOME)": "/root", "$(NOPE)": "$(NOPE)", "a$b": "a$b", "$": "$", "$(unclosed": "$(unclosed",
		"x$(Y)z$$": "xyz$", "$$$$": "$$", "$$(HOME)": "$(HOME)",
	} {
		if got := kubeexpand.Expand(in, vars); got != want {
			t.Errorf("Expand(%q) = %q, want %q", in, got, want)
		}
	}
}

// envOf returns a container's environment as the kubelet gives it to the
// process: each value expanded with the variables defined before it.
func envOf(env []corev1.EnvVar) map[string]string {
	out := map[string]string{}
	for _, e := range env {
		out[e.Name] = kubeexpand.Expand(e.Value, out)
	}
	return out
}

// TestBuildersSurviveExpansion: what every pod builder puts in a container's
// command and environment reaches the process byte for byte after the
// kubelet's expansion.
func TestBuildersSurviveExpansion(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	env := map[string]string{}
	for i, s := range nasty {
		env["V"+string(rune('A'+i))] = s
	}
	env["HOME"] = "/root"
	checkEnv := func(t *testing.T, c corev1.Container) {
		t.Helper()
		got := envOf(c.Env)
		for k, v := range env {
			if got[k] != v {
				t.Errorf("env %s = %q after expansion, want %q", k, got[k], v)
			}
		}
	}

	t.Run("debugpod", func(t *testing.T) {
		pod, err := debugpod.BuildPod(debugpod.PodSpec{
			PodBase: debugpod.PodBase{
				Node:      "n",
				Name:      "p",
				Namespace: "ns",
				RunID:     "r",
				Image:     "busybox",
				Env:       env,
				Now:       now,
				Deadline:  now.Add(time.Minute),
				Command:   []string{"true"},
			},
			Profile: debugpod.DefaultProfile,
		})
		if err != nil {
			t.Fatal(err)
		}
		checkEnv(t, pod.Spec.Containers[0])
	})
	t.Run("nsenter", func(t *testing.T) {
		pod, err := agent.BuildPod(agent.PodSpec{
			PodBase: agent.PodBase{
				Node:      "n",
				Name:      "p",
				Namespace: "ns",
				RunID:     "r",
				Image:     "agent",
				Env:       env,
				Now:       now,
				Deadline:  now.Add(time.Minute),
				Command:   []string{"true"},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		checkEnv(t, pod.Spec.Containers[0])
	})
	t.Run("ephemeral", func(t *testing.T) {
		target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
			Spec: corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "app", Image: "nginx"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
				{Name: "app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}
		_, ec, err := ephemeral.BuildContainer(ephemeral.ContainerSpec{Pod: target, Target: "app", Name: ephemeral.NamePrefix + "x", Profile: "general",
			Image: "busybox", RunID: "r", Env: env, Now: now, Deadline: now.Add(time.Minute), Command: nasty})
		if err != nil {
			t.Fatal(err)
		}
		c := corev1.Container(ec.EphemeralContainerCommon)
		checkEnv(t, c)
		cmd := kubeexpand.All(c.Command, envOf(c.Env))
		if diff := cmp.Diff(nasty, cmd[len(cmd)-len(nasty):]); diff != "" {
			t.Errorf("command after expansion (-want +got):\n%s", diff)
		}
	})
}

// TestSecretEnvByReference: variables from Secrets are references in the
// pod spec (secretKeyRef, envFrom), never values.
func TestSecretEnvByReference(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	secrets := []nodeexec.SecretEnv{{Secret: "db", Key: "PASSWORD"}, {Secret: "all"}}
	pod, err := debugpod.BuildPod(debugpod.PodSpec{
		PodBase: debugpod.PodBase{
			Node:      "n",
			Name:      "p",
			Namespace: "ns",
			RunID:     "r",
			Image:     "busybox",
			Env:       map[string]string{"A": "1"},
			SecretEnv: secrets,
			Now:       now,
			Deadline:  now.Add(time.Minute),
			Command:   []string{"true"},
		},
		Profile: debugpod.DefaultProfile,
	})
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	wantEnv := []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "PASSWORD"}}}}
	wantFrom := []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "all"}}}}
	if diff := cmp.Diff(wantEnv, c.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantFrom, c.EnvFrom); diff != "" {
		t.Errorf("envFrom (-want +got):\n%s", diff)
	}
	if err := (&nodeexec.Request{Command: []string{"x"}, SecretEnv: []nodeexec.SecretEnv{{Secret: "Bad Name"}}}).Validate(); err == nil || !strings.Contains(err.Error(), "SecretEnv[0].Secret") {
		t.Errorf("Validate: %v", err)
	}
}
