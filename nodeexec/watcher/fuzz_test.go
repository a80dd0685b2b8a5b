package watcher

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// checkBuildsEveryPod is the property "Validate accepts ⇒ the watcher can
// build every pod": for each action, RunPod succeeds and the pod is one the
// API server and the node accept (image reference, deadline within the
// API's range, the script passed whole as one exec argument).
func checkBuildsEveryPod(t *testing.T, ns *v1alpha1.NodeScript) {
	t.Helper()
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	for action, script := range map[string]string{v1alpha1.ActionRun: ns.Spec.Script, v1alpha1.ActionVerify: ns.Spec.VerifyScript, v1alpha1.ActionRollback: ns.Spec.RollbackScript} {
		if script == "" {
			continue // nothing to run: the controller starts no such pod
		}
		pod, err := buildRunPod(runPodSpec{NodeScript: ns, Backend: testBackend(t, ns), Node: "node-1", Action: action, Attempt: 1, Now: now})
		if err != nil {
			t.Fatalf("Validate accepted the spec, RunPod(%s) refused it: %v\nspec: %+v", action, err, ns.Spec)
		}
		c := pod.Spec.Containers[0]
		if _, err := reference.ParseNormalizedNamed(c.Image); err != nil {
			t.Fatalf("%s pod: image %q: %v", action, c.Image, err)
		}
		if d := pod.Spec.ActiveDeadlineSeconds; d == nil || *d < 1 || *d > math.MaxInt32 {
			t.Fatalf("%s pod: activeDeadlineSeconds %v outside [1, 2^31-1]", action, d)
		}
		for _, a := range c.Command {
			if strings.IndexByte(a, 0) >= 0 || len(a) >= 128<<10 {
				t.Fatalf("%s pod: an argument the kernel cannot exec (%d bytes, NUL %v)", action, len(a), strings.IndexByte(a, 0) >= 0)
			}
		}
	}
}

// checkNamesFields is "Validate refuses ⇒ the message names a field".
func checkNamesFields(t *testing.T, errs field.ErrorList) {
	t.Helper()
	for _, e := range errs {
		if !strings.HasPrefix(e.Field, "spec.") && !strings.HasPrefix(e.Field, "metadata.") {
			t.Fatalf("error %q names no field", e.Error())
		}
		if !strings.Contains(errs.ToAggregate().Error(), e.Field) {
			t.Fatalf("message %q lacks %s", errs.ToAggregate(), e.Field)
		}
	}
}

// FuzzValidate drives v1alpha1.Validate with arbitrary values of the fields
// that reach the pod (scripts, backend, image, profile, namespaces, the
// durations, the startup taint) and checks both properties.
func FuzzValidate(f *testing.F) {
	type seed struct {
		script, backend, image, profile, namespace, nss, effect, key string
		timeout, soak, backoff                                       int64
	}
	for _, s := range []seed{
		{"true", "", "", "", "", "", "NoSchedule", "k", int64(time.Minute), 0, 0},
		{"kill -0 $$", "nsenter", "nodeexec.local/agent:0.2.0", "", "ops", "mnt,net", "NoExecute", "example.com/fix", 0, int64(time.Hour), int64(time.Second)},
		{"x", "debugpod", "busy box", "admin", "Bad_NS", "", "Sometimes", "", -1, -1, -1},
		{"a\x00b", "ssh", "", "sysadmin", "", "foo", "", "a b", math.MaxInt64, 0, 0},
		{strings.Repeat("y", 128<<10), "", "BusyBox", "", "", "", "PreferNoSchedule", "k", int64(math.MaxInt32) * int64(time.Second), 0, 0},
	} {
		f.Add(s.script, s.backend, s.image, s.profile, s.namespace, s.nss, s.effect, s.key, s.timeout, s.soak, s.backoff)
	}
	f.Fuzz(func(t *testing.T, script, backend, image, profile, namespace, nss, effect, key string, timeout, soak, backoff int64) {
		ns := &v1alpha1.NodeScript{ObjectMeta: metav1.ObjectMeta{Name: "fuzz"}, Spec: v1alpha1.NodeScriptSpec{
			Script: script, VerifyScript: script, RollbackScript: script,
			Backend: v1alpha1.BackendSpec{Name: backend, Image: image, Profile: profile, Namespace: namespace},
		}}
		if nss != "" {
			ns.Spec.Backend.Namespaces = strings.Split(nss, ",")
		}
		if timeout != 0 {
			ns.Spec.Timeout = &metav1.Duration{Duration: time.Duration(timeout)}
		}
		if soak != 0 {
			ns.Spec.Rollout.SoakTime = &metav1.Duration{Duration: time.Duration(soak)}
		}
		if backoff != 0 {
			ns.Spec.Retry.InitialBackoff = &metav1.Duration{Duration: time.Duration(backoff)}
		}
		if key != "" || effect != "" {
			ns.Spec.StartupTaint = taint(key, effect)
		}
		errs := v1alpha1.Validate(ns)
		if len(errs) > 0 {
			checkNamesFields(t, errs)
			return
		}
		checkBuildsEveryPod(t, ns)
		if effect != "" && !slices.Contains(v1alpha1.TaintEffects(), effect) {
			t.Fatalf("taint effect %q accepted", effect)
		}
	})
}

// FuzzParseNodeScripts: `nodeexec apply -f` on arbitrary documents. Never a
// panic; every accepted NodeScript builds every pod, and its spec hash is
// the same after a JSON round trip (what the watcher reads back from the
// API server); a refusal names the document.
func FuzzParseNodeScripts(f *testing.F) {
	head := "apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: fix}\nspec:\n  nodeSelector: {}\n  script: 'true'\n"
	for _, s := range []string{
		head,
		head + "  timeout: abc\n",
		head + "  timeout: 5\n",
		head + "  timeout: -5m\n",
		head + "  rollout: {soakTime: -1s, maxConcurrency: 150%, batches: [1, 20%]}\n",
		head + "  retry: {initialBackoff: -1s, maxBackoff: 1h}\n",
		head + "  onFailure: {cordon: true, drain: true, drainTimeout: 1h}\n",
		head + "  backend: {name: nsenter, image: 'a b', namespaces: [mnt, foo]}\n",
		head + "  startupTaint: {key: k, effect: Bogus}\n",
		head + "  timeout: 9999999999h\n",
		"---\n" + head + "---\n" + head,
		"{}",
		"",
		"spec: [",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		scripts, err := nodescripts.ParseNodeScripts(bytes.NewReader(doc))
		if err != nil {
			msg := err.Error()
			if !strings.Contains(msg, "document") && !strings.Contains(msg, "nodescript") && !strings.Contains(msg, "no NodeScript") {
				t.Fatalf("refusal names no document: %v", err)
			}
			return
		}
		for _, ns := range scripts {
			checkBuildsEveryPod(t, ns)
			b, err := json.Marshal(ns)
			if err != nil {
				t.Fatal(err)
			}
			var back v1alpha1.NodeScript
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatalf("accepted, but does not round-trip through JSON: %v", err)
			}
			if v1alpha1.SpecHash(&back.Spec) != v1alpha1.SpecHash(&ns.Spec) {
				t.Fatalf("spec hash changes through JSON: %+v", ns.Spec)
			}
		}
	})
}

// v1alpha1.Profiles (the CRD's enum) are debugpod's profiles.
func TestProfilesMatchDebugpod(t *testing.T) {
	if !slices.Equal(v1alpha1.Profiles(), debugpod.Profiles()) {
		t.Errorf("v1alpha1.Profiles() %v, debugpod.Profiles() %v", v1alpha1.Profiles(), debugpod.Profiles())
	}
	if got := v1alpha1.MaxTimeout + podexec.DeadlineSlack; got > math.MaxInt32*time.Second {
		t.Errorf("MaxTimeout + podexec.DeadlineSlack = %s exceeds activeDeadlineSeconds' limit", got)
	}
}

func taint(key, effect string) *corev1.Taint {
	return &corev1.Taint{Key: key, Effect: corev1.TaintEffect(effect)}
}
