package watcher

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeexec/nodeexec/internal/kubeexpand"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
	"github.com/nodeexec/nodeexec/nodeexec/nsenterpod"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// TestRunPodSurvivesExpansion: a NodeScript's script reaches the run
// pod's container byte for byte after the kubelet's $(VAR) expansion, for
// every backend the watcher builds run pods with (as
// internal/kubeexpand's TestBuildersSurviveExpansion checks the other
// builders).
func TestRunPodSurvivesExpansion(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	nasty := []string{
		"kill -0 $$", "awk '{print $1}'", "pa$$word", "$(HOME)", "$(NODEEXEC_NODE)", "$$(X)", "$", "a$", "$(unclosed",
		"`date`", `"quoted" 'single'`, "line1\nline2", "", "$$$", "tab\there", "$(",
	}
	envOf := func(env []corev1.EnvVar) map[string]string {
		out := map[string]string{}
		for _, e := range env {
			out[e.Name] = kubeexpand.Expand(e.Value, out)
		}
		return out
	}
	for _, backend := range []string{debugpod.Name, nsenterpod.Name} {
		t.Run("watcher/"+backend, func(t *testing.T) {
			for _, script := range nasty {
				if script == "" {
					continue
				}
				ns := &v1alpha1.NodeScript{ObjectMeta: metav1.ObjectMeta{Name: "fix"},
					Spec: v1alpha1.NodeScriptSpec{Script: script, Backend: v1alpha1.BackendSpec{Name: backend}}}
				pod, err := buildRunPod(runPodSpec{NodeScript: ns, Backend: mustNodeBackend(t, ns), Node: "n", Action: v1alpha1.ActionRun, Attempt: 1, Now: now})
				if err != nil {
					t.Fatal(err)
				}
				c := pod.Spec.Containers[0]
				cmd := kubeexpand.All(c.Command, envOf(c.Env))
				if got := cmd[len(cmd)-1]; got != script {
					t.Errorf("script %q reaches the container as %q", script, got)
				}
			}
		})
	}
}

func mustNodeBackend(t *testing.T, ns *v1alpha1.NodeScript) nodeexec.Backend {
	t.Helper()
	b, err := nodeBackend(ns, fake.NewClientset())
	if err != nil {
		t.Fatal(err)
	}
	return b
}
