package watcher

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// podJSON is the stored pod name in the run namespace, as JSON.
func (e *env) podJSON(name string) string {
	e.t.Helper()
	p, err := e.cs.CoreV1().Pods(v1alpha1.DefaultNamespace).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	b, _ := json.Marshal(p)
	return string(b)
}

// spec.scriptFrom.configMapKeyRef: the ConfigMap's script runs; editing
// it changes the spec hash and runs the new script where the old one ran.
func TestScriptFromConfigMap(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.Script = ""
		s.ScriptFrom = &v1alpha1.ScriptSource{ConfigMapKeyRef: &v1alpha1.KeyRef{Name: "fix", Key: "run.sh"}}
	})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fix", Namespace: v1alpha1.DefaultNamespace}, Data: map[string]string{"run.sh": "echo v1"}}
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), cm)
	e.reconcile()
	s := e.state("n1")
	if s.Phase != v1alpha1.PhaseRunning || !strings.Contains(e.podJSON(s.Pod), "echo v1") {
		t.Fatalf("first run: %+v", s)
	}
	e.setPod(s.Pod, exited(0))
	e.reconcile()
	h1 := e.nodeScript().Status.SpecHash
	if st := e.nodeScript().Status; st.Stage != v1alpha1.StageComplete || h1 == "" || h1 != nodescript.CurrentHash(e.nodeScript()) {
		t.Fatalf("status %+v", st)
	}
	cm.Data["run.sh"] = "echo v2"
	if _, err := e.cs.CoreV1().ConfigMaps(v1alpha1.DefaultNamespace).Update(e.ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.reconcile()
	s = e.state("n1")
	if s.Phase != v1alpha1.PhaseRunning || s.Hash == h1 || !strings.Contains(e.podJSON(s.Pod), "echo v2") {
		t.Errorf("after the edit: %+v (hash was %s)", s, h1)
	}
}

// spec.scriptFrom.secretKeyRef: the script never appears in the pod, the
// node's state, the status or an Event; the pod evaluates it from a
// secretKeyRef variable (the container's command escapes $ as $$, which
// the kubelet turns back); the hash follows it.
func TestScriptFromSecret(t *testing.T) {
	const value = "echo topsecret-4711"
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.Script = ""
		s.ScriptFrom = &v1alpha1.ScriptSource{SecretKeyRef: &v1alpha1.KeyRef{Name: "fix", Key: "run.sh"}}
	})
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "fix", Namespace: v1alpha1.DefaultNamespace}, Data: map[string][]byte{"run.sh": []byte(value)}}
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"), sec)
	e.reconcile()
	s := e.state("n1")
	pod := e.podJSON(s.Pod)
	if strings.Contains(pod, "topsecret") || !strings.Contains(pod, `eval \"$$NODESCRIPT_SCRIPT\"`) ||
		!strings.Contains(pod, `{"name":"NODESCRIPT_SCRIPT","valueFrom":{"secretKeyRef":{"name":"fix","key":"run.sh"}}}`) {
		t.Errorf("run pod: %s", pod)
	}
	e.setPod(s.Pod, exited(0))
	e.reconcile()
	b, _ := json.Marshal(e.node("n1"))
	st, _ := json.Marshal(e.nodeScript())
	for what, text := range map[string]string{"node": string(b), "nodescript": string(st), "events": strings.Join(e.recorded(), "\n")} {
		if strings.Contains(text, "topsecret") {
			t.Errorf("the secret script is in the %s: %s", what, text)
		}
	}
	h1 := e.nodeScript().Status.SpecHash
	sec.Data["run.sh"] = []byte("echo other")
	if _, err := e.cs.CoreV1().Secrets(v1alpha1.DefaultNamespace).Update(e.ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.reconcile()
	if h2 := e.nodeScript().Status.SpecHash; h2 == h1 || e.state("n1").Hash != h2 {
		t.Errorf("hash %s -> %s after the Secret changed; node %+v", h1, h2, e.state("n1"))
	}
}

// A missing ConfigMap (or key) starts nothing: an error and an Event
// naming the reference.
func TestScriptFromMissing(t *testing.T) {
	ns := script(func(s *v1alpha1.NodeScriptSpec) {
		s.Script = ""
		s.ScriptFrom = &v1alpha1.ScriptSource{ConfigMapKeyRef: &v1alpha1.KeyRef{Name: "nope", Key: "run.sh"}}
	})
	e := newEnv(t, []*v1alpha1.NodeScript{ns}, testNode("n1"))
	e.sync()
	_, err := e.c.reconcile(e.ctx, "fix")
	if err == nil || !strings.Contains(err.Error(), "spec.scriptFrom.configMapKeyRef: ConfigMap nodeexec-system/nope key run.sh") {
		t.Errorf("reconcile: %v", err)
	}
	if got := e.pods(); len(got) != 0 {
		t.Errorf("pods %v", got)
	}
	e.checkEvents("missing", v1alpha1.ReasonScriptFromFailed)
}
