//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/resource"
	"k8s.io/client-go/dynamic"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// chartCRDs are the CRDs of charts/nodeexec/crds (deploy/crd).
var chartCRDs = []string{"nodescripts.nodeexec.io", "maintenancebudgets.nodeexec.io", "maintenancecalendars.nodeexec.io"}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// helmConfig is Helm's action configuration on the suite's cluster, with
// releases recorded as Secrets in namespace ns.
func helmConfig(t *testing.T, ns string) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = &env.kubeconfig, &ns
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, ns, "secret", func(string, ...any) {}); err != nil {
		t.Fatalf("helm: %v", err)
	}
	return cfg
}

// chartImage is the watcher's image for the chart's values: on the local
// test cluster, the image TestMain pushed, pinned by the digest the registry
// serves under its tag (as docs/helm.md advises); elsewhere agentImage() by
// tag.
func chartImage(ctx context.Context, t *testing.T) map[string]any {
	t.Helper()
	ref, err := name.NewTag(agentImage())
	if err != nil {
		t.Fatalf("agent image %s: %v", agentImage(), err)
	}
	img := map[string]any{"repository": ref.Context().Name(), "tag": ref.TagStr()}
	if env.cluster == nil {
		return img
	}
	reg, err := env.cluster.Registry()
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(reg.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	// agentImage() names the mirrored registry (nodeexec.local); this
	// machine reaches the same repository at reg.Host.
	local, err := name.NewTag(reg.Host + "/" + ref.RepositoryStr() + ":" + ref.TagStr())
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Head(local, remote.WithContext(ctx), remote.WithTransport(tr), remote.WithAuth(&authn.Basic{Username: reg.Username, Password: reg.Password}))
	if err != nil {
		t.Fatalf("the digest of %s: %v", local, err)
	}
	img["digest"] = desc.Digest.String()
	return img
}

// existingCRDs returns which of chartCRDs the cluster serves.
func existingCRDs(ctx context.Context, t *testing.T, dyn dynamic.Interface) map[string]bool {
	t.Helper()
	m := map[string]bool{}
	for _, n := range chartCRDs {
		_, err := dyn.Resource(crdResource).Get(ctx, n, metav1.GetOptions{})
		switch {
		case err == nil:
			m[n] = true
		case !apierrors.IsNotFound(err):
			t.Fatal(err)
		}
	}
	return m
}

// TestHelmChart installs charts/nodeexec with Helm's Go SDK (a release in
// namespace default; the watcher, two replicas with leader election, in a
// namespace of its own with the image TestMain pushed, by digest; the
// admission policy with its parameters in another), applies a NodeScript
// that the deployed watcher runs on the real nodes, and uninstalls the
// release: nothing of it is left but the CRDs (Helm never deletes crds/),
// which the test then removes if they were not there before. Also: values
// the schema refuses, and a release refused while deploy/'s watcher (its
// ClusterRole) is installed, install nothing.
func TestHelmChart(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	dyn := dynamic.NewForConfigOrDie(env.config)
	chrt, err := loader.Load("../charts/nodeexec")
	if err != nil {
		t.Fatal(err)
	}
	before := existingCRDs(ctx, t, dyn)
	t.Cleanup(func() {
		// Helm installs missing CRDs and never deletes them: put the
		// cluster back as it was.
		for _, n := range chartCRDs {
			if !before[n] {
				deleteCRD(t, dyn, n)
			}
		}
	})
	suffix := randomSuffix()
	relName, ns, policyNS := "nodeexec-e2e-"+suffix, "nodeexec-e2e-helm-"+suffix, "nodeexec-e2e-helm-policy-"+suffix
	values := map[string]any{
		"namespace": ns,
		"image":     chartImage(ctx, t),
		"policy":    map[string]any{"namespace": policyNS},
	}
	cfg := helmConfig(t, "default")
	t.Logf("image %v (at %s)", values["image"], time.Since(start).Round(time.Millisecond))

	// Refused: bad values (the schema), then a second watcher beside
	// deploy/'s (here its ClusterRole): no release, no namespace.
	refused := func(what string, vals map[string]any, want ...string) {
		t.Helper()
		in := action.NewInstall(cfg)
		in.ReleaseName, in.Namespace, in.Timeout = relName, "default", time.Minute
		_, err := in.RunWithContext(ctx, chrt, vals)
		if err == nil {
			t.Fatalf("%s: installed", what)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", what, err, w)
			}
		}
		if _, err := cfg.Releases.History(relName); !errors.Is(err, driver.ErrReleaseNotFound) {
			t.Errorf("%s: release %s recorded (%v)", what, relName, err)
		}
		for _, n := range []string{ns, policyNS} {
			if _, err := env.client.CoreV1().Namespaces().Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("%s: namespace %s created (%v)", what, n, err)
			}
		}
		t.Logf("%s: refused (at %s): %v", what, time.Since(start).Round(time.Millisecond), err)
	}
	refused("replicas 0", map[string]any{"namespace": ns, "replicas": 0}, "/replicas", "minimum")
	refused("a digest without its algorithm", map[string]any{"namespace": ns, "image": map[string]any{"digest": strings.Repeat("a", 64)}}, "/image/digest")
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "nodeexec-watcher"}}
	if _, err := env.client.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil {
		t.Fatalf("deploy/'s ClusterRole nodeexec-watcher (is deploy/ installed?): %v", err)
	}
	refused("beside deploy/", values, "ClusterRole", "nodeexec-watcher", "exists")
	if err := env.client.RbacV1().ClusterRoles().Delete(ctx, cr.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	in := action.NewInstall(cfg)
	in.ReleaseName, in.Namespace = relName, "default"
	in.Wait, in.Timeout = true, 2*time.Minute // the Deployment's replicas ready
	installed := true
	uninstall := func() (*release.UninstallReleaseResponse, error) {
		u := action.NewUninstall(cfg)
		u.Wait, u.Timeout = true, 2*time.Minute
		installed = false
		return u.Run(relName)
	}
	t.Cleanup(func() {
		if installed {
			_, _ = uninstall()
		}
	})
	t0 := time.Now()
	rel, err := in.RunWithContext(ctx, chrt, values)
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	t.Logf("installed %s (%s) in %s", rel.Name, rel.Info.Status, time.Since(t0).Round(time.Millisecond))
	if !strings.Contains(rel.Info.Notes, "namespace "+ns) {
		t.Errorf("NOTES:\n%s", rel.Info.Notes)
	}
	for _, n := range chartCRDs {
		if _, err := dyn.Resource(crdResource).Get(ctx, n, metav1.GetOptions{}); err != nil {
			t.Errorf("CRD %s after install: %v", n, err)
		}
	}
	var holder string
	if !waitFor(60*time.Second, func() bool {
		l, err := env.client.CoordinationV1().Leases(ns).Get(ctx, "nodeexec-watcher", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false
		}
		holder = *l.Spec.HolderIdentity
		return strings.HasPrefix(holder, "nodeexec-watcher-")
	}) {
		t.Fatalf("no replica holds the Lease %s/nodeexec-watcher (holder %q)", ns, holder)
	}

	// The chart's policy: an image outside its prefixes is refused, naming
	// its parameters' ConfigMap.
	bad := uniqueName("e2e-helm-bad-")
	cleanupNodeScript(t, dyn, bad)
	scripts, err := nodescripts.ParseNodeScripts(strings.NewReader(fmt.Sprintf("apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: %s}\nspec:\n  script: 'true'\n  backend: {name: nsenter, namespace: %s, image: registry.example.com/other:1}\n", bad, ns)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodescripts.Apply(ctx, dyn, scripts); err == nil || !strings.Contains(err.Error(), "ConfigMap "+policyNS+"/nodeexec-policy") {
		t.Errorf("a NodeScript with an image the chart's policy does not allow: %v", err)
	}

	name := uniqueName("e2e-helm-")
	cleanupNodeScript(t, dyn, name)
	applyNodeScript(ctx, t, dyn, fmt.Sprintf(`
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  script: 'echo "chart watcher on $NODE_NAME"'
  backend: {name: nsenter, namespace: %s}
  recordOutput: true
  rollout: {maxConcurrency: 2}
`, name, realNodes, ns))
	waitNodeScript(ctx, t, dyn, name, 90*time.Second, "complete by the chart's watcher", func(s *v1alpha1.NodeScript) bool {
		return s.Status.Stage == v1alpha1.StageComplete && s.Status.Succeeded == 2
	})
	for _, n := range env.nodes[:2] {
		if s, _ := nodeState(ctx, t, n, name); s.Phase != v1alpha1.PhaseSucceeded || nodeOutput(ctx, t, ns, name, n, v1alpha1.ActionRun) != "chart watcher on "+n+"\n" {
			t.Errorf("node %s: state %+v", n, s)
		}
	}
	t.Logf("%s complete on %d nodes %s after the install began", name, 2, time.Since(t0).Round(time.Millisecond))
	// Deleted while the watcher runs: its finalizer clears the nodes.
	if err := dyn.Resource(v1alpha1.Resource).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if !waitFor(30*time.Second, func() bool {
		_, err := dyn.Resource(v1alpha1.Resource).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}) {
		t.Errorf("NodeScript %s not deleted by the chart's watcher", name)
	}

	t1 := time.Now()
	res, err := uninstall()
	if err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	t.Logf("uninstalled in %s %s", time.Since(t1).Round(time.Millisecond), res.Info)
	// Nothing of the release is left: each object of its manifest is gone,
	// and so is its record.
	left := leftObjects(t, cfg, rel.Manifest)
	if len(left) > 0 {
		t.Errorf("left after helm uninstall: %v", left)
	}
	if _, err := cfg.Releases.History(relName); !errors.Is(err, driver.ErrReleaseNotFound) {
		t.Errorf("release %s still recorded (%v)", relName, err)
	}
	for _, n := range chartCRDs {
		if _, err := dyn.Resource(crdResource).Get(ctx, n, metav1.GetOptions{}); err != nil {
			t.Errorf("CRD %s after uninstall (Helm keeps crds/): %v", n, err)
		}
	}
	t.Logf("TestHelmChart: %s in all", time.Since(start).Round(time.Millisecond))
}

// leftObjects returns the objects of a release manifest that still exist.
func leftObjects(t *testing.T, cfg *action.Configuration, manifest string) []string {
	t.Helper()
	list, err := cfg.KubeClient.Build(bytes.NewBufferString(manifest), false)
	if err != nil {
		t.Fatalf("the release's manifest: %v", err)
	}
	var left []string
	err = list.Visit(func(info *resource.Info, err error) error {
		if err != nil {
			return err
		}
		if gerr := info.Get(); gerr == nil {
			left = append(left, fmt.Sprintf("%s %s/%s", info.Mapping.GroupVersionKind.Kind, info.Namespace, info.Name))
		} else if !apierrors.IsNotFound(gerr) {
			return gerr
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return left
}
