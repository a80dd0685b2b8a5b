//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"debug/elf"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/internal/agentimage"
)

// TestImageMultiArch: `nodeexec image push --platform linux/amd64,linux/arm64`
// through the real CLI to the test registry (the arm64 binary cross-compiled
// with make dist's flags), read back with remote: both platforms, each
// layer's ELF machine its platform's. The index's reference runs on a real
// (amd64) node: the kubelet picked the amd64 image. Bad inputs are refused
// and push nothing; a single-arch push still works.
func TestImageMultiArch(t *testing.T) {
	if env.cluster == nil {
		t.Skip("needs the local test cluster's registry (NODEEXEC_E2E_KUBECONFIG is set)")
	}
	ctx := t.Context()
	reg, err := env.cluster.Registry()
	if err != nil {
		t.Fatal(err)
	}
	arm, err := agentimage.BuildBinaryFor(ctx, "..", t.TempDir(), v1.Platform{OS: "linux", Architecture: "arm64"})
	if err != nil {
		t.Fatal(err)
	}
	push := func(args ...string) (string, string, error) {
		cmd := exec.CommandContext(ctx, env.cli, append([]string{"image", "push"}, args...)...)
		cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+reg.DockerConfigDir, "SSL_CERT_FILE="+reg.CAFile)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return strings.TrimSpace(out.String()), errOut.String(), err
	}
	tag := randomSuffix()
	ref := reg.Host + "/e2e/multiarch:" + tag
	start := time.Now()
	pushed, stderr, err := push("--platform", "linux/amd64,linux/arm64", "--binary", "linux/arm64="+arm, ref)
	if err != nil {
		t.Fatalf("image push --platform: %v\n%s", err, stderr)
	}
	t.Logf("image push --platform linux/amd64,linux/arm64 in %s: %s\n%s", time.Since(start).Round(time.Millisecond), pushed, stderr)

	t.Setenv("DOCKER_CONFIG", reg.DockerConfigDir)
	pem, err := os.ReadFile(reg.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	d, err := name.NewDigest(pushed)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(d, remote.WithTransport(tr), remote.WithAuthFromKeychain(authn.DefaultKeychain))
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]elf.Machine{"linux/amd64": elf.EM_X86_64, "linux/arm64": elf.EM_AARCH64}
	if len(m.Manifests) != 2 {
		t.Fatalf("index lists %d images, want 2", len(m.Manifests))
	}
	for _, desc := range m.Manifests {
		if desc.Platform == nil {
			t.Fatalf("%s has no platform", desc.Digest)
		}
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s: %d layers, %v", desc.Platform, len(layers), err)
		}
		rc, err := layers[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		bin := binaryFromLayer(t, rc)
		f, err := elf.NewFile(bytes.NewReader(bin))
		if err != nil {
			t.Fatal(err)
		}
		if f.Machine != want[desc.Platform.String()] {
			t.Errorf("%s: the layer's binary is %s", desc.Platform, f.Machine)
		}
		delete(want, desc.Platform.String())
	}
	if len(want) != 0 {
		t.Errorf("platforms missing from the index: %v", want)
	}

	// The index on a real node: the nsenter agent pulled by the index's
	// digest runs there, so the kubelet took the amd64 image (an arm64
	// binary cannot start on these nodes: exec format error).
	nodeRef := reg.NodeHost + strings.TrimPrefix(pushed, reg.Host)
	ns := tempNamespace(ctx, t, "nodeexec-e2e-multiarch-", map[string]string{"pod-security.kubernetes.io/enforce": "privileged"})
	if _, err := env.client.CoreV1().Secrets(ns).Create(ctx, reg.PullSecret(ns, "regcred"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, stderr2, code := cli(ctx, "", "-n", ns, "run", "--backend", "nsenter", "--agent-image", nodeRef, "--image-pull-secret", "regcred",
		"--node", env.nodes[0], "--timeout", "2m", "--no-prefix", "--", "uname", "-m")
	if code != 0 || strings.TrimSpace(out) != "x86_64" {
		t.Errorf("run with the index's reference: exit %d, stdout %q\n%s", code, out, stderr2)
	}

	// Bad inputs through the real CLI: refused, nothing pushed.
	bad := reg.Host + "/e2e/multiarch-bad:" + tag
	for _, args := range [][]string{
		{"--platform", "linux/s390x"},
		{"--platform", "linux/amd64,linux/amd64"},
		{"--platform", "linux/amd64", "--binary", "linux/arm64=" + arm},
		{"--platform", "linux/amd64,linux/arm64", "--binary", "linux/arm64=" + env.cli},
		{"--platform", "linux/amd64,linux/arm64", "--binary", arm},
		{"--platform", "linux/amd64,linux/arm64", "--binary", "linux/arm64=/bin/sh"},
	} {
		if _, stderr, err := push(append(args, bad)...); err == nil || !strings.Contains(stderr, "--") {
			t.Errorf("image push %v: %v, want a refusal naming the flag\n%s", args, err, stderr)
		}
	}
	badRef, err := name.ParseReference(bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Head(badRef, remote.WithTransport(tr), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err == nil {
		t.Errorf("%s exists after refused pushes", bad)
	}
	// A single-arch push keeps working.
	if single, stderr, err := push(reg.Host + "/e2e/multiarch-single:" + tag); err != nil || !strings.Contains(single, "@sha256:") {
		t.Errorf("single-arch image push: %v %q\n%s", err, single, stderr)
	}
}

// binaryFromLayer returns agentimage.BinaryPath's bytes from a layer's tar.
func binaryFromLayer(t *testing.T, rc io.ReadCloser) []byte {
	t.Helper()
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("no %s in the layer: %v", agentimage.BinaryPath, err)
		}
		if "/"+h.Name == agentimage.BinaryPath {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}
