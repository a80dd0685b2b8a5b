//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/resident"
)

// TestMixedFleet: a cluster with an arm64 node besides the amd64 ones.
// The arm64 node is simulated: a real Node object in the real API server
// (labels kubernetes.io/os=linux, kubernetes.io/arch=arm64, the same in
// status.nodeInfo, Ready, room for pods, and a NoSchedule taint that keeps
// everything off it that does not tolerate every taint), with no kubelet:
// pods are scheduled onto it and never run, which is all this test needs.
// Against it:
//   - the resident agents' DaemonSet (resident.BuildDaemonSet, as `agent
//     install` creates it) schedules an agent pod onto it;
//   - with an image index for linux/amd64 and linux/arm64 (the arm64 entry a
//     copy of the amd64 image with its config saying arm64: nothing runs it),
//     `run --explain` names the arm64 manifest's digest for that node and
//     `version` shows both platforms and which one the nodes get;
//   - with the single-arch (amd64) image, `run` on the node and `agent
//     install` are refused naming the node, its platform, the image and
//     `nodeexec image push --platform`, and nothing is created.
//
// The registry is the test cluster's, read by the CLI as a user's registry
// is: credentials of `docker login` (DOCKER_CONFIG) and its CA
// (SSL_CERT_FILE). What it creates (node, namespaces, the index's tags) is
// deleted.
func TestMixedFleet(t *testing.T) {
	if env.cluster == nil {
		t.Skip("needs the local test cluster's registry (NODEEXEC_E2E_KUBECONFIG is set)")
	}
	start := time.Now()
	ctx := t.Context()
	reg, err := env.cluster.Registry()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", reg.DockerConfigDir)
	t.Setenv("SSL_CERT_FILE", reg.CAFile)
	tr := fleetRegistryTransport(t, reg.CAFile)
	ropts := []remote.Option{remote.WithContext(ctx), remote.WithTransport(tr), remote.WithAuth(&authn.Basic{Username: reg.Username, Password: reg.Password})}

	// The suite's image (pushed by TestMain) is the amd64 one; by digest.
	suiteRef, err := name.ParseReference(reg.Host + "/" + strings.TrimPrefix(agent.DefaultImage, "nodeexec.local/"))
	if err != nil {
		t.Fatal(err)
	}
	amd, err := remote.Image(suiteRef, append(ropts, remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"}))...)
	if err != nil {
		t.Fatal(err)
	}
	amdDigest, err := amd.Digest()
	if err != nil {
		t.Fatal(err)
	}
	amdRef := suiteRef.Context().Digest(amdDigest.String()).String()
	cf, err := amd.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Architecture = "arm64"
	arm, err := mutate.ConfigFile(amd, cf)
	if err != nil {
		t.Fatal(err)
	}
	armDigest, err := arm.Digest()
	if err != nil {
		t.Fatal(err)
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, a := range []struct {
		img  v1.Image
		arch string
	}{{amd, "amd64"}, {arm, "arm64"}} {
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: a.img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: a.arch}}})
	}
	tag := randomSuffix()
	idxTag := suiteRef.Context().Tag("e2e-fleet-" + tag)
	if err := remote.WriteIndex(idxTag, idx, ropts...); err != nil {
		t.Fatal(err)
	}
	idxDigest, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The index and the arm64 copy; the amd64 image is the suite's.
		for _, d := range []v1.Hash{idxDigest, armDigest} {
			if err := remote.Delete(suiteRef.Context().Digest(d.String()), append(ropts[1:], remote.WithContext(context.WithoutCancel(ctx)))...); err != nil {
				t.Logf("deleting %s from the registry: %v", d, err)
			}
		}
	})
	indexRef := suiteRef.Context().Digest(idxDigest.String()).String()
	t.Logf("index %s: linux/amd64 %s, linux/arm64 %s (%s)", indexRef, amdDigest, armDigest, time.Since(start).Round(time.Millisecond))

	node := simulatedArm64Node(ctx, t, "nodeexec-e2e-arm64-"+tag)

	// The resident agents' DaemonSet schedules an agent onto the arm64
	// node. Its image is the index under the name the nodes pull through
	// the test registry (the real nodes pull and run its amd64 entry).
	agentNS := tempNamespace(ctx, t, "nodeexec-e2e-fleet-agents-", map[string]string{"pod-security.kubernetes.io/enforce": "privileged"})
	t.Cleanup(func() { fleetForceDeletePods(context.WithoutCancel(ctx), t, agentNS, node) })
	ds := resident.BuildDaemonSet(resident.Options{
		Namespace: agentNS, Image: "nodeexec.local/agent@" + idxDigest.String(), ImagePullPolicy: corev1.PullIfNotPresent,
		InstallID: "e2e-fleet-" + tag, Timeout: resident.DefaultTimeout,
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("5m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
	})
	if _, err := env.client.AppsV1().DaemonSets(agentNS).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The DaemonSet first (else it recreates the pod the simulated node's
	// missing kubelet never stops), then its pods: every one gone before the
	// next test counts nodeexec's pods.
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		if err := env.client.AppsV1().DaemonSets(agentNS).Delete(ctx, ds.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting DaemonSet %s/%s: %v", agentNS, ds.Name, err)
		}
		if !waitFor(60*time.Second, func() bool {
			fleetForceDeletePods(ctx, t, agentNS, node)
			pods, err := env.client.CoreV1().Pods(agentNS).List(ctx, metav1.ListOptions{})
			return err == nil && len(pods.Items) == 0
		}) {
			t.Errorf("the agent pods in %s were not gone within 60s", agentNS)
		}
	})
	var scheduled string
	if !waitFor(20*time.Second, func() bool {
		pods, err := env.client.CoreV1().Pods(agentNS).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err == nil && len(pods.Items) > 0 {
			scheduled = pods.Items[0].Name
		}
		return scheduled != ""
	}) {
		t.Fatalf("no agent pod of the DaemonSet was scheduled onto the arm64 node %s within 20s", node)
	}
	t.Logf("agent pod %s/%s scheduled onto %s (%s)", agentNS, scheduled, node, time.Since(start).Round(time.Millisecond))

	runNS := tempNamespace(ctx, t, "nodeexec-e2e-fleet-", map[string]string{"pod-security.kubernetes.io/enforce": "privileged"})

	// --explain names the manifest the arm64 node gets.
	out, errOut, code := cli(ctx, "", "run", "-n", runNS, "--node", node, "--agent-image", indexRef, "--explain", "--", "true")
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "agent image") || strings.Contains(l, ": node ") {
			t.Logf("--explain: %s", l)
		}
	}
	wantArm := "linux/arm64: node " + node + " gets " + suiteRef.Context().Name() + "@" + armDigest.String()
	if code != 0 || !strings.Contains(out, wantArm) || !strings.Contains(out, "linux/amd64 "+amdDigest.String()) {
		t.Errorf("run --explain with the index: exit %d, want 0 and %q and the amd64 digest in:\n%s\n%s", code, wantArm, out, errOut)
	}

	// version: the agent image's platforms and what the nodes get.
	vcmd := func(image string) string {
		t.Setenv("NODEEXEC_AGENT_IMAGE", image)
		out, errOut, code := cli(ctx, "", "version", "--agent-namespace", "nodeexec-e2e-no-agents-"+tag)
		if code != 0 {
			t.Errorf("version: exit %d\n%s%s", code, out, errOut)
		}
		return out
	}
	out = vcmd(indexRef)
	for _, want := range []string{"linux/amd64 " + amdDigest.String(), "linux/arm64 " + armDigest.String(), "Node Platform: linux/arm64, 1 node: gets " + armDigest.String()} {
		if !strings.Contains(out, want) {
			t.Errorf("version with the index does not say %q:\n%s", want, out)
		}
	}
	out = vcmd(amdRef)
	if !strings.Contains(out, "Node Platform: linux/arm64, 1 node: NOT in the agent image") || !strings.Contains(out, "--platform linux/amd64,linux/arm64") {
		t.Errorf("version with the amd64 image does not say the arm64 node lacks it:\n%s", out)
	}
	t.Setenv("NODEEXEC_AGENT_IMAGE", "")

	// The single-arch image: refused before anything is created.
	wants := []string{node, "linux/arm64", amdRef, "nodeexec image push --platform linux/amd64,linux/arm64"}
	refused := func(what string, code int, errOut string, took time.Duration) {
		t.Helper()
		t.Logf("%s refused in %s: %s", what, took.Round(time.Millisecond), strings.TrimSpace(errOut))
		if code != 2 {
			t.Errorf("%s with the amd64 image on the arm64 node: exit %d, want 2 (refused)\n%s", what, code, errOut)
		}
		for _, w := range wants {
			if !strings.Contains(errOut, w) {
				t.Errorf("%s: the refusal does not say %q:\n%s", what, w, errOut)
			}
		}
		if took > 10*time.Second {
			t.Errorf("%s: refused after %s, want at once", what, took)
		}
	}
	t0 := time.Now()
	_, errOut, code = cli(ctx, "", "run", "-n", runNS, "--node", node, "--agent-image", amdRef, "--", "true")
	refused("run", code, errOut, time.Since(t0))
	if pods := managedPods(ctx, t, runNS); len(pods) != 0 {
		t.Errorf("run refused, yet %d pods in %s", len(pods), runNS)
	}
	installNS := "nodeexec-e2e-fleet-install-" + tag
	t0 = time.Now()
	_, errOut, code = cli(ctx, "", "agent", "install", "--namespace", installNS, "--agent-image", amdRef)
	refused("agent install", code, errOut, time.Since(t0))
	if _, err := env.client.CoreV1().Namespaces().Get(ctx, installNS, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("agent install refused, yet namespace %s: %v", installNS, err)
		_ = env.client.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), installNS, metav1.DeleteOptions{})
	}
	t.Logf("TestMixedFleet: %s", time.Since(start).Round(time.Millisecond))
}

// simulatedArm64Node creates the Node name: linux/arm64 in its labels and
// status.nodeInfo, Ready (a heartbeat now: the node lifecycle controller
// marks it Unknown only after its 50 s grace period), 4 CPUs, 8Gi and 110
// pods allocatable, tainted nodeexec.io/e2e-simulated:NoSchedule. Cleanup
// deletes it and force-deletes the pods bound to it (no kubelet ends them).
func simulatedArm64Node(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			corev1.LabelOSStable: "linux", corev1.LabelArchStable: "arm64", corev1.LabelHostname: name,
		}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "nodeexec.io/e2e-simulated", Effect: corev1.TaintEffectNoSchedule}}},
	}
	created, err := env.client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		if err := env.client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting node %s: %v", name, err)
		}
		fleetForceDeletePods(ctx, t, "", name)
	})
	now := metav1.Now()
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")}
	// The node controllers update the new node too (taints): retried on a conflict.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := env.client.CoreV1().Nodes().Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status = corev1.NodeStatus{
			Capacity: res, Allocatable: res,
			NodeInfo:   corev1.NodeSystemInfo{OperatingSystem: "linux", Architecture: "arm64", KubeletVersion: "v1.37.1", ContainerRuntimeVersion: "containerd://2.1.0"},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}},
		}
		_, err = env.client.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// fleetForceDeletePods deletes at once (grace period 0) the pods bound to node
// in namespace ns ("" for all).
func fleetForceDeletePods(ctx context.Context, t *testing.T, ns, node string) {
	pods, err := env.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Logf("listing pods on %s: %v", node, err)
		return
	}
	for _, p := range pods.Items {
		if err := env.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("deleting pod %s/%s: %v", p.Namespace, p.Name, err)
		}
	}
}

// fleetRegistryTransport trusts the CA in caFile (the test registry's).
func fleetRegistryTransport(t *testing.T, caFile string) http.RoundTripper {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("%s: no certificate", caFile)
	}
	tr := remote.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return tr
}
