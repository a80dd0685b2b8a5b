//go:build e2e

package testcluster_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeexec/nodeexec/internal/testcluster"
)

// registryCluster starts (or reuses) the cluster and returns it with a clientset and
// a fresh namespace.
func registryCluster(t *testing.T, ctx context.Context) (*testcluster.Cluster, kubernetes.Interface, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the e2e tests need root")
	}
	c, err := testcluster.Start(ctx, testcluster.Options{Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "testcluster-registry-",
		Labels: map[string]string{"app.kubernetes.io/managed-by": "nodeexec"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	waitSA(t, ctx, cs, ns.Name)
	return c, cs, ns.Name
}

// markerImage is a new image (busybox plus a file with a unique marker), so that no
// node can have it before the test pulls it.
func markerImage(marker string) testcluster.ImageSpec {
	return testcluster.ImageSpec{
		Name: "nodeexec.local/e2e-marker:1",
		Files: []testcluster.ImageFile{
			{Src: "/bin/busybox", Dst: "/bin/busybox", Mode: 0o755},
			{Data: []byte(marker + "\n"), Dst: "/marker", Mode: 0o644},
		},
		BusyboxLinks: "/bin/busybox",
	}
}

// TestRegistry: the registry answers with TLS from the cluster CA and refuses
// anonymous requests; the docker config it writes works with authn.DefaultKeychain;
// every node pulls busybox (imagePullPolicy Always) and a freshly pushed image
// through the mirrored names with node credentials; the registry's own address needs
// an imagePullSecret: without it the kubelet reports the registry's 401, with it the
// pull succeeds.
func TestRegistry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, cs, ns := registryCluster(t, ctx)
	reg, err := c.Registry()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("registry %+v", reg)

	t.Run("tls-and-auth", func(t *testing.T) {
		// not trusted without the cluster CA
		if _, err := http.Get("https://" + reg.Host + "/v2/"); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("GET with the system roots: %v, want a certificate error", err)
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: caPool(t, reg.CAFile)}
		hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		resp, err := hc.Get("https://" + reg.Host + "/v2/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "Basic") {
			t.Errorf("anonymous GET /v2/: %s %q, want 401 with a Basic challenge", resp.Status, resp.Header.Get("WWW-Authenticate"))
		}
		// DOCKER_CONFIG + authn.DefaultKeychain, as `nodeexec image push` and crane use it
		t.Setenv("DOCKER_CONFIG", reg.DockerConfigDir)
		for _, ref := range []string{reg.Host + "/library/busybox:stable", reg.Host + "/pause:3.10"} {
			r, err := name.ParseReference(ref)
			if err != nil {
				t.Fatal(err)
			}
			d, err := remote.Head(r, remote.WithContext(ctx), remote.WithTransport(tr), remote.WithAuthFromKeychain(authn.DefaultKeychain))
			if err != nil {
				t.Errorf("HEAD %s with the default keychain: %v", ref, err)
				continue
			}
			t.Logf("%s: %s", ref, d.Digest)
		}
	})

	t.Run("pull-always/busybox", func(t *testing.T) {
		for _, node := range c.Nodes() {
			p := pod("bb-always", node, testcluster.BusyboxImage, false, "sh", "-c", "echo pulled busybox")
			p.Spec.Containers[0].ImagePullPolicy = corev1.PullAlways
			if out := runPod(t, ctx, cs, ns, p); !strings.Contains(out, "pulled busybox") {
				t.Errorf("%s: output %q", node, out)
			}
			requirePulled(t, ctx, cs, ns, p.Spec.Containers[0].Image, node)
		}
	})

	marker := fmt.Sprintf("marker-%d", time.Now().UnixNano())
	img, err := testcluster.NewImage(ctx, markerImage(marker))
	if err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("%d", time.Now().UnixNano())

	t.Run("push-then-pull", func(t *testing.T) {
		t0 := time.Now()
		ref, err := c.PushImage(ctx, "nodeexec.local/e2e-marker:"+tag, img)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("pushed %s in %s", ref, time.Since(t0).Round(time.Millisecond))
		if !strings.HasPrefix(ref, "nodeexec.local/e2e-marker@sha256:") {
			t.Errorf("PushImage returned %q", ref)
		}
		for _, node := range c.Nodes() {
			for _, image := range []string{"nodeexec.local/e2e-marker:" + tag, ref} {
				p := pod("marker", node, image, false, "cat", "/marker")
				if out := runPod(t, ctx, cs, ns, p); strings.TrimSpace(out) != marker {
					t.Errorf("%s on %s: output %q, want %q", image, node, out, marker)
				}
			}
		}
	})

	t.Run("pull-secret", func(t *testing.T) {
		private := reg.NodeHost + "/e2e-private/marker:" + tag
		if _, err := c.PushImage(ctx, private, img); err != nil {
			t.Fatal(err)
		}
		node := c.Nodes()[0]
		// no credentials: the kubelet reports the registry's refusal
		p, err := cs.CoreV1().Pods(ns).Create(ctx, pod("nosecret", node, private, false, "cat", "/marker"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		reason, msg := waitPullFailure(t, ctx, cs, ns, p.Name)
		t.Logf("without a pull secret: %s: %s", reason, msg)
		if !strings.Contains(msg, "401 Unauthorized") && !strings.Contains(strings.ToLower(msg), "unauthorized") {
			t.Errorf("pull failure message %q does not name the registry's refusal", msg)
		}
		// with a kubernetes.io/dockerconfigjson secret
		if _, err := cs.CoreV1().Secrets(ns).Create(ctx, reg.PullSecret(ns, "registry"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		q := pod("withsecret", node, private, false, "cat", "/marker")
		q.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry"}}
		if out := runPod(t, ctx, cs, ns, q); strings.TrimSpace(out) != marker {
			t.Errorf("with the pull secret: output %q, want %q", out, marker)
		}
		// the image is now on the node; imagePullPolicy Always still asks the registry,
		// which still refuses a pod without the secret
		r := pod("nosecret-always", node, private, false, "cat", "/marker")
		r.Spec.Containers[0].ImagePullPolicy = corev1.PullAlways
		r, err = cs.CoreV1().Pods(ns).Create(ctx, r, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		reason, msg = waitPullFailure(t, ctx, cs, ns, r.Name)
		t.Logf("without a pull secret, image present, Always: %s: %s", reason, msg)
	})

	t.Run("push-rejects", func(t *testing.T) {
		if _, err := c.PushImage(ctx, "quay.example/x:1", img); !errors.Is(err, testcluster.ErrNotServed) {
			t.Errorf("unserved registry: %v, want ErrNotServed", err)
		}
		if _, err := c.PushImage(ctx, "nodeexec.local/x", img); err == nil || !strings.Contains(err.Error(), "needs a tag") {
			t.Errorf("no tag: %v", err)
		}
	})
}

func caPool(t *testing.T, file string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("%s: no certificate", file)
	}
	return pool
}

// requirePulled checks that the kubelet pulled image on node (event "Pulled" or
// "Pulling" of a pod in ns on that node), i.e. the image came from the registry.
func requirePulled(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, image, node string) {
	t.Helper()
	evs, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason == "Pulled" && strings.Contains(e.Message, image) && e.Source.Host == node {
			t.Logf("%s: %s", node, e.Message)
			return
		}
	}
	// the kubelet may report the event a little later
	time.Sleep(2 * time.Second)
	evs, err = cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason == "Pulled" && strings.Contains(e.Message, image) && e.Source.Host == node {
			t.Logf("%s: %s", node, e.Message)
			return
		}
	}
	t.Errorf("no Pulled event for %s on %s", image, node)
}

// waitPullFailure waits (up to a minute) for the pod's container to wait with
// ErrImagePull or ImagePullBackOff, and returns the reason and message.
func waitPullFailure(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, name string) (string, string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodRunning {
			t.Fatalf("pod %s: %s, want an image pull failure", name, p.Status.Phase)
		}
		for _, s := range p.Status.ContainerStatuses {
			if w := s.State.Waiting; w != nil && (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff") {
				return w.Reason, w.Message
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("pod %s: no image pull failure within a minute", name)
	return "", ""
}

// TestRegistryGoneAfterStop stops the cluster and checks that the registry, its
// forwarders and its state are gone and its port is free, then starts the cluster
// again (the registry binary comes from the cache) and checks that busybox is
// served again. It takes the shared cluster down for the time of a warm Start.
func TestRegistryGoneAfterStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, _, _ := registryCluster(t, ctx)
	reg, err := c.Registry()
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, p := range []string{"registry", "registry-sock", "registry-fwd"} {
		b, err := os.ReadFile(filepath.Join(testcluster.DefaultRunDir, p+".pid"))
		if err != nil {
			t.Fatal(err)
		}
		var pid int
		if _, err := fmt.Sscan(string(b), &pid); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	t0 := time.Now()
	if err := testcluster.Stop(ctx, testcluster.Options{Log: testLog{t}}); err != nil {
		t.Fatal(err)
	}
	t.Logf("Stop took %s", time.Since(t0).Round(time.Millisecond))
	for _, pid := range pids {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !strings.Contains(string(b), ") Z ") {
			t.Errorf("registry process %d still runs after Stop", pid)
		}
	}
	if _, err := os.Stat(filepath.Join(testcluster.DefaultStateDir, "registry")); !os.IsNotExist(err) {
		t.Errorf("registry state after Stop: %v", err)
	}
	if _, err := (&http.Client{Timeout: 2 * time.Second}).Get("https://" + reg.Host + "/v2/"); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("registry port after Stop: %v, want connection refused", err)
	}
	bin := filepath.Join(testcluster.DefaultCacheDir, "registry", "v"+testcluster.DefaultRegistryVersion, "registry")
	if _, err := os.Stat(bin); err != nil {
		t.Errorf("the cached registry binary is gone: %v", err)
	}

	t0 = time.Now()
	c, cs, ns := registryCluster(t, ctx)
	t.Logf("Start (warm) took %s", time.Since(t0).Round(time.Millisecond))
	p := pod("bb-after-restart", c.Nodes()[0], testcluster.BusyboxImage, false, "sh", "-c", "echo back")
	p.Spec.Containers[0].ImagePullPolicy = corev1.PullAlways
	if out := runPod(t, ctx, cs, ns, p); !strings.Contains(out, "back") {
		t.Errorf("output %q", out)
	}
}
