package cli

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeexec/nodeexec/internal/agentimage"
)

func fleetNode(name, arch string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelOSStable: "linux", corev1.LabelArchStable: arch}}}
	n.Status.NodeInfo.OperatingSystem, n.Status.NodeInfo.Architecture = "linux", arch
	return n
}

func fleetHash(c string) v1.Hash { return v1.Hash{Algorithm: "sha256", Hex: strings.Repeat(c, 64)} }

func TestExplainPlatforms(t *testing.T) {
	pis := []agentimage.PlatformImage{{Platform: v1.Platform{OS: "linux", Architecture: "amd64"}, Digest: fleetHash("a")}}
	var nodes []*corev1.Node
	for i := range 12 {
		nodes = append(nodes, fleetNode(fmt.Sprintf("x%d", i), "amd64"))
	}
	nodes = append(nodes, fleetNode("pi", "arm64"))
	per, err := agentimage.ForNodes(nodes, "reg.example/nodeexec:1", pis)
	lines := strings.Join(explainPlatforms("reg.example/nodeexec:1", pis, per, err), "\n")
	for _, want := range []string{
		"agent image reg.example/nodeexec:1 (single image): linux/amd64 sha256:" + strings.Repeat("a", 64),
		"linux/amd64: node x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, and 2 more gets reg.example/nodeexec@sha256:" + strings.Repeat("a", 64),
		"linux/arm64: node pi: NOT in the image: a run there is refused",
		"nodeexec image push --platform linux/amd64,linux/arm64",
	} {
		if !strings.Contains(lines, want) {
			t.Errorf("explain lines do not say %q:\n%s", want, lines)
		}
	}
}

func TestImagePlatformsText(t *testing.T) {
	var b bytes.Buffer
	printImagePlatforms(&b, &ImagePlatforms{Image: "reg/x:1", Platforms: []PlatformDigest{{"linux/amd64", "sha256:a"}},
		Nodes: []NodePlatformImage{{Platform: "linux/amd64", Nodes: 2, Digest: "sha256:a"}, {Platform: "linux/arm64", Nodes: 1, Missing: true}}})
	want := "Agent Image Platforms: linux/amd64 sha256:a (reg/x:1)\n" +
		"Node Platform: linux/amd64, 2 nodes: gets sha256:a\n" +
		"Node Platform: linux/arm64, 1 node: NOT in the agent image\n" +
		"  runs on linux/arm64 are refused: push an index for every platform: nodeexec image push --platform linux/amd64,linux/arm64 REGISTRY/REPOSITORY\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	printImagePlatforms(&b, &ImagePlatforms{Image: "reg/x:1", RegistryError: "no such host"})
	if b.String() != "Agent Image Platforms: unknown: the registry was not reached (no such host)\n" {
		t.Errorf("offline: %q", b.String())
	}
}

// An unreachable registry is a warning, once per image, and no refusal.
func TestWarnUnreadOnce(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	ctx := context.Background()
	var b bytes.Buffer
	image := "127.0.0.1:1/nodeexec:x"
	err := checkInstallPlatforms(ctx, &b, fake.NewClientset(fleetNode("pi", "arm64")), image)
	if err != nil || !strings.Contains(b.String(), "warning: agent image "+image+": its registry was not read") || !strings.Contains(b.String(), "linux/arm64") {
		t.Fatalf("unreachable registry: %v, %q", err, b.String())
	}
	b.Reset()
	if err := checkInstallPlatforms(ctx, &b, fake.NewClientset(fleetNode("pi", "arm64")), image); err != nil || b.Len() != 0 {
		t.Errorf("second time: %v, %q; want no warning", err, b.String())
	}
	forgetUnread(image)
	if checkInstallPlatforms(ctx, &b, fake.NewClientset(), image); b.Len() == 0 {
		t.Error("after a successful read (forgetUnread), no warning again")
	}
}
