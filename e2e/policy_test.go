//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// TestAdmissionPolicy: deploy/policy (a ValidatingAdmissionPolicy with its
// ConfigMap of parameters) refuses, at `nodeexec apply`, a NodeScript whose
// image is not under an allowed prefix or whose run namespace is not
// allowed, with the policy's message, and creates nothing; an allowed one
// is accepted.
func TestAdmissionPolicy(t *testing.T) {
	ctx := t.Context()
	dyn := watcherSetup(t)
	dir := t.TempDir()
	suffix := randomSuffix()
	write := func(name, backend string) (string, string) {
		name += suffix
		cleanupNodeScript(t, dyn, name)
		doc := "apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: " + name + "}\nspec:\n" +
			"  nodeSelector: {matchLabels: {nodeexec-e2e: none}}\n  script: 'true'\n  backend: " + backend + "\n"
		f := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return name, f
	}
	_, denied := write("e2e-policy-image-", "{name: nsenter, image: 'evil.example/root:1'}")
	nsName, badNS := write("e2e-policy-ns-", "{name: nsenter, namespace: kube-system}")
	okName, ok := write("e2e-policy-ok-", "{name: nsenter, image: 'nodeexec.local/agent:0.2.0', namespace: nodeexec-system}")

	// A new policy takes effect within seconds: wait for it with a dry-run
	// probe, not by applying the file until it is refused. An apply that
	// came first would create the NodeScript, and the policy does not check
	// an update that leaves the spec as it is.
	probe := nodeScriptObject(t, "e2e-policy-probe-"+suffix, "  script: 'true'\n  backend: {name: nsenter, image: 'evil.example/root:1'}\n")
	installPolicy(ctx, t, dyn, probe)
	_, stderr, code := cli(ctx, "", "apply", "-f", denied)
	if code == 0 {
		t.Fatalf("a disallowed image was accepted while the policy is enforced")
	}
	for _, want := range []string{"spec.backend.image evil.example/root:1 is not allowed on this cluster", "nodeexec.local/", "nodeexec-nodescripts"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("disallowed image: exit %d, stderr lacks %q:\n%s", code, want, stderr)
		}
	}
	_, stderr, code = cli(ctx, "", "apply", "-f", badNS)
	if code == 0 || !strings.Contains(stderr, "spec.backend.namespace kube-system is not allowed on this cluster") {
		t.Errorf("disallowed namespace: exit %d\n%s", code, stderr)
	}
	if _, err := dyn.Resource(v1alpha1.Resource).Get(ctx, nsName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused NodeScript %s exists (err %v)", nsName, err)
	}
	if _, stderr, code := cli(ctx, "", "apply", "-f", ok); code != 0 {
		t.Errorf("an allowed NodeScript was refused: exit %d\n%s", code, stderr)
	}
	if _, err := dyn.Resource(v1alpha1.Resource).Get(ctx, okName, metav1.GetOptions{}); err != nil {
		t.Errorf("the allowed NodeScript: %v", err)
	}
}
