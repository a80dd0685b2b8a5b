package agentimage

import (
	"debug/elf"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// testIndex is an OCI index of the agent images of fake amd64 and arm64
// binaries (nothing executes them), each listed with its platform.
func testIndex(t *testing.T) (v1.ImageIndex, map[string]v1.Hash) {
	t.Helper()
	digests := map[string]v1.Hash{}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, m := range []elf.Machine{elf.EM_X86_64, elf.EM_AARCH64} {
		img, err := Image(Binaries{Nodeexec: fakeELF(m, false, "agent")})
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		p := v1.Platform{OS: cf.OS, Architecture: cf.Architecture}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests[p.String()] = d
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return idx, digests
}

func TestPlatforms(t *testing.T) {
	srv := httptest.NewServer(basicAuth(registry.New(registry.Logger(log.New(io.Discard, "", 0)))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	auth := remote.WithAuthFromKeychain(staticKeychain{&authn.Basic{Username: "user", Password: "pass"}})
	ctx := t.Context()

	idx, digests := testIndex(t)
	indexRef, _ := name.NewTag(host + "/nodeexec:multi")
	if err := remote.WriteIndex(indexRef, idx, auth); err != nil {
		t.Fatal(err)
	}
	single, err := Image(Binaries{Nodeexec: fakeELF(elf.EM_X86_64, false, "agent")})
	if err != nil {
		t.Fatal(err)
	}
	singleRef, _ := name.NewTag(host + "/nodeexec:amd64")
	if err := remote.Write(singleRef, single, auth); err != nil {
		t.Fatal(err)
	}
	singleDigest, _ := single.Digest()

	got, err := Platforms(ctx, indexRef, auth)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Platform.String() != "linux/amd64" || got[1].Platform.String() != "linux/arm64" {
		t.Fatalf("index: got %v, want linux/amd64 and linux/arm64", got)
	}
	for _, pi := range got {
		if pi.Digest != digests[pi.Platform.String()] {
			t.Errorf("index: %s has digest %s, want the image's %s", pi.Platform, pi.Digest, digests[pi.Platform.String()])
		}
	}
	// By digest, as users pin it.
	idxDigest, _ := idx.Digest()
	byDigest, err := Platforms(ctx, indexRef.Context().Digest(idxDigest.String()), auth)
	if err != nil || len(byDigest) != 2 {
		t.Fatalf("index by digest: %v, %v", byDigest, err)
	}

	got, err = Platforms(ctx, singleRef, auth)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Platform.String() != "linux/amd64" || got[0].Digest != singleDigest {
		t.Fatalf("single image: got %v, want linux/amd64 %s", got, singleDigest)
	}

	missing, _ := name.NewTag(host + "/nodeexec:missing")
	if _, err := Platforms(ctx, missing, auth); !errors.Is(err, ErrImageNotFound) {
		t.Errorf("missing tag: %v, want ErrImageNotFound", err)
	}
	if _, err := Platforms(ctx, indexRef); !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "docker login "+host) {
		t.Errorf("no credentials: %v, want ErrUnauthorized naming docker login", err)
	}
	unreachable, _ := name.NewTag("127.0.0.1:1/nodeexec:x")
	if _, err := Platforms(ctx, unreachable); !errors.Is(err, ErrUnreachable) {
		t.Errorf("unreachable: %v, want ErrUnreachable", err)
	}
}

func testNode(name, os, arch string, labels bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if labels {
		n.Labels[corev1.LabelOSStable], n.Labels[corev1.LabelArchStable] = os, arch
	} else {
		n.Status.NodeInfo.OperatingSystem, n.Status.NodeInfo.Architecture = os, arch
	}
	return n
}

func TestNodePlatform(t *testing.T) {
	if p, err := NodePlatform(testNode("a", "linux", "arm64", false)); err != nil || p.String() != "linux/arm64" {
		t.Errorf("nodeInfo: %v, %v", p, err)
	}
	if p, err := NodePlatform(testNode("b", "linux", "amd64", true)); err != nil || p.String() != "linux/amd64" {
		t.Errorf("labels: %v, %v", p, err)
	}
	// nodeInfo wins over the labels.
	n := testNode("c", "linux", "arm64", false)
	n.Labels[corev1.LabelArchStable] = "amd64"
	if p, _ := NodePlatform(n); p.Architecture != "arm64" {
		t.Errorf("nodeInfo and labels: %v, want nodeInfo's arm64", p)
	}
	if _, err := NodePlatform(testNode("d", "", "", false)); err == nil || !strings.Contains(err.Error(), "node d") {
		t.Errorf("no platform: %v, want an error naming the node", err)
	}
}

func TestMatch(t *testing.T) {
	h := func(c string) v1.Hash { return v1.Hash{Algorithm: "sha256", Hex: strings.Repeat(c, 64)} }
	arm64 := v1.Platform{OS: "linux", Architecture: "arm64"}
	for name, tt := range map[string]struct {
		images []PlatformImage
		want   v1.Hash
		ok     bool
	}{
		"index":              {[]PlatformImage{{v1.Platform{OS: "linux", Architecture: "amd64"}, h("a")}, {arm64, h("b")}}, h("b"), true},
		"arm64 v8":           {[]PlatformImage{{v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}, h("c")}}, h("c"), true},
		"attestation":        {[]PlatformImage{{v1.Platform{OS: "unknown", Architecture: "unknown"}, h("d")}, {arm64, h("e")}}, h("e"), true},
		"amd64 only":         {[]PlatformImage{{v1.Platform{OS: "linux", Architecture: "amd64"}, h("f")}}, v1.Hash{}, false},
		"windows arm64":      {[]PlatformImage{{v1.Platform{OS: "windows", Architecture: "arm64"}, h("g")}}, v1.Hash{}, false},
		"no platform at all": {[]PlatformImage{{v1.Platform{}, h("1")}}, h("1"), true},
		"empty":              {nil, v1.Hash{}, false},
	} {
		got, ok := Match(arm64, tt.images)
		if ok != tt.ok || got.Digest != tt.want {
			t.Errorf("%s: Match = %v, %v; want %v, %v", name, got, ok, tt.want, tt.ok)
		}
	}
}

func TestForNodes(t *testing.T) {
	h := func(c string) v1.Hash { return v1.Hash{Algorithm: "sha256", Hex: strings.Repeat(c, 64)} }
	amd := PlatformImage{v1.Platform{OS: "linux", Architecture: "amd64"}, h("a")}
	arm := PlatformImage{v1.Platform{OS: "linux", Architecture: "arm64"}, h("b")}
	nodes := []*corev1.Node{
		testNode("x86-1", "linux", "amd64", false), testNode("pi-2", "linux", "arm64", false),
		testNode("pi-1", "linux", "arm64", true), testNode("bare", "", "", false),
	}
	got, err := ForNodes(nodes, "reg.example/nodeexec:1", []PlatformImage{amd, arm})
	if err != nil {
		t.Fatal(err)
	}
	if !got[0].OK || got[0].Image.Digest != amd.Digest || !got[1].OK || got[1].Image.Digest != arm.Digest || !got[2].OK || got[2].Image.Digest != arm.Digest || got[3].PlatformErr == nil {
		t.Fatalf("index: %+v", got)
	}

	got, err = ForNodes(nodes, "reg.example/nodeexec:1", []PlatformImage{amd})
	if !errors.Is(err, nodeexec.ErrPlatformNotInImage) {
		t.Fatalf("amd64 only: %v, want ErrPlatformNotInImage", err)
	}
	var pe *nodeexec.PlatformError
	if !errors.As(err, &pe) {
		t.Fatalf("amd64 only: %T is no *PlatformError", err)
	}
	want := nodeexec.PlatformError{Image: "reg.example/nodeexec:1", Platform: "linux/arm64", Nodes: []string{"pi-1", "pi-2"}, Available: []string{"linux/amd64"}, Fix: "linux/amd64,linux/arm64"}
	if pe.Image != want.Image || pe.Platform != want.Platform || strings.Join(pe.Nodes, ",") != "pi-1,pi-2" || strings.Join(pe.Available, ",") != "linux/amd64" || pe.Fix != want.Fix {
		t.Errorf("PlatformError = %+v, want %+v", *pe, want)
	}
	for _, s := range []string{"pi-1, pi-2", "linux/arm64", "reg.example/nodeexec:1", "nodeexec image push --platform linux/amd64,linux/arm64"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if !got[0].OK || got[1].OK || got[2].OK {
		t.Errorf("amd64 only: %+v", got)
	}
}
