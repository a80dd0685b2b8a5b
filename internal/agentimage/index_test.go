package agentimage

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func TestParsePlatforms(t *testing.T) {
	got, err := ParsePlatforms("linux/amd64, linux/arm64")
	if err != nil || len(got) != 2 || got[0].String() != "linux/amd64" || got[1].String() != "linux/arm64" {
		t.Fatalf("ParsePlatforms: %v, %v", got, err)
	}
	for in, want := range map[string]string{
		"":                        "no platform given",
		"linux/amd64,":            "empty platform",
		"linux/s390x":             `"linux/s390x": architecture "s390x" is not built`,
		"windows/amd64":           `"windows/amd64": OS "windows"`,
		"darwin/arm64":            `OS "darwin"`,
		"linux/arm64/v8":          "without a variant",
		"linux/amd64,linux/amd64": "linux/amd64 is listed twice",
		"linux":                   `"linux"`,
		"a/b/c/d":                 `"a/b/c/d"`,
	} {
		_, err := ParsePlatforms(in)
		if !errors.Is(err, ErrPlatform) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParsePlatforms(%q) = %v, want ErrPlatform saying %q", in, err, want)
		}
	}
}

// layerMachine reads the binary out of img's one layer and returns its ELF
// machine.
func layerMachine(t *testing.T, img v1.Image) elf.Machine {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("no %s in the layer: %v", BinaryPath, err)
		}
		if "/"+h.Name != BinaryPath {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		f, err := elf.NewFile(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		return f.Machine
	}
}

func testBins() map[string]Binaries {
	return map[string]Binaries{
		"linux/arm64": {Nodeexec: fakeELF(elf.EM_AARCH64, false, strings.Repeat("arm", 500)), Spool: fakeELF(elf.EM_AARCH64, false, "arm spool")},
		"linux/amd64": {Nodeexec: fakeELF(elf.EM_X86_64, false, strings.Repeat("x86", 500))},
	}
}

// nodeexecOnly is bins as Binaries without nodeexec-spool.
func nodeexecOnly(bins map[string][]byte) map[string]Binaries {
	out := make(map[string]Binaries, len(bins))
	for p, b := range bins {
		out[p] = Binaries{Nodeexec: b}
	}
	return out
}

func TestIndex(t *testing.T) {
	idx, err := Index(testBins())
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIImageIndex || len(m.Manifests) != 2 {
		t.Fatalf("index: media type %s, %d manifests", m.MediaType, len(m.Manifests))
	}
	want := map[string]elf.Machine{"linux/amd64": elf.EM_X86_64, "linux/arm64": elf.EM_AARCH64}
	for i, d := range m.Manifests {
		if d.Platform == nil || d.Platform.String() != SupportedPlatforms()[i] {
			t.Fatalf("manifest %d: platform %v, want %s (SupportedPlatforms' order)", i, d.Platform, SupportedPlatforms()[i])
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS+"/"+cf.Architecture != d.Platform.String() {
			t.Errorf("%s: config says %s/%s", d.Platform, cf.OS, cf.Architecture)
		}
		if got := layerMachine(t, img); got != want[d.Platform.String()] {
			t.Errorf("%s: the layer's binary is %s, want %s", d.Platform, got, want[d.Platform.String()])
		}
	}
	imgs, err := IndexImages(idx)
	if err != nil || len(imgs) != 2 || imgs[1].Platform.Architecture != "arm64" || imgs[1].Size <= 0 {
		t.Fatalf("IndexImages: %+v, %v", imgs, err)
	}
}

func TestIndexReproducible(t *testing.T) {
	a, err := Index(testBins())
	if err != nil {
		t.Fatal(err)
	}
	b, err := Index(testBins())
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Fatalf("same binaries, digests %s and %s", da, db)
	}
	// The amd64 image of the index is the single-arch image of the binary.
	single, err := Image(testBins()["linux/amd64"])
	if err != nil {
		t.Fatal(err)
	}
	ds, _ := single.Digest()
	m, _ := a.IndexManifest()
	if m.Manifests[0].Digest != ds {
		t.Errorf("index's linux/amd64 image %s, single-arch image %s", m.Manifests[0].Digest, ds)
	}
	other := testBins()
	arm := other["linux/arm64"]
	arm.Spool = append(arm.Spool, '!')
	other["linux/arm64"] = arm
	c, err := Index(other)
	if err != nil {
		t.Fatal(err)
	}
	if dc, _ := c.Digest(); dc == da {
		t.Error("another arm64 nodeexec-spool, same index digest")
	}
}

func TestIndexRefuses(t *testing.T) {
	for label, c := range map[string]struct {
		bins    map[string][]byte
		is      error
		wantErr string
	}{
		"empty":           {map[string][]byte{}, nil, "no binary"},
		"unknown":         {map[string][]byte{"linux/riscv64": fakeELF(elf.EM_RISCV, false, "x")}, ErrPlatform, "linux/riscv64"},
		"wrong machine":   {map[string][]byte{"linux/arm64": fakeELF(elf.EM_X86_64, false, "x")}, ErrWrongArch, "linux/arm64: the binary's architecture is not its platform's: it is a linux/amd64"},
		"not static":      {map[string][]byte{"linux/arm64": fakeELF(elf.EM_AARCH64, true, "x")}, ErrNotStatic, "linux/arm64: not a statically linked"},
		"not ELF":         {map[string][]byte{"linux/amd64": []byte("#!/bin/sh\n")}, ErrNotStatic, "linux/amd64"},
		"one bad of two":  {map[string][]byte{"linux/amd64": fakeELF(elf.EM_X86_64, false, "x"), "linux/arm64": fakeELF(elf.EM_ARM, false, "x")}, ErrWrongArch, "linux/arm64"},
		"windows":         {map[string][]byte{"windows/amd64": fakeELF(elf.EM_X86_64, false, "x")}, ErrPlatform, "windows/amd64"},
		"variant":         {map[string][]byte{"linux/arm64/v8": fakeELF(elf.EM_AARCH64, false, "x")}, ErrPlatform, "variant"},
		"nil binary":      {map[string][]byte{"linux/amd64": nil}, ErrNotStatic, "linux/amd64"},
		"amd64 for amd64": {map[string][]byte{"linux/amd64": fakeELF(elf.EM_AARCH64, false, "x")}, ErrWrongArch, "linux/amd64"},
	} {
		_, err := Index(nodeexecOnly(c.bins))
		if err == nil || (c.is != nil && !errors.Is(err, c.is)) || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: Index = %v, want an error (%v) saying %q", label, err, c.is, c.wantErr)
		}
	}
}

func TestPushIndex(t *testing.T) {
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	idx, err := Index(testBins())
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(strings.TrimPrefix(srv.URL, "http://") + "/nodeexec:multi")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := PushIndex(t.Context(), idx, tag, authn.NewMultiKeychain())
	if err != nil {
		t.Fatal(err)
	}
	want, _ := idx.Digest()
	if ref.DigestStr() != want.String() {
		t.Errorf("pushed %s, want the index's digest %s", ref, want)
	}
	got, err := remote.Index(tag)
	if err != nil {
		t.Fatal(err)
	}
	m, err := got.IndexManifest()
	if err != nil || len(m.Manifests) != 2 || m.Manifests[1].Platform.Architecture != "arm64" {
		t.Fatalf("read back: %+v, %v", m, err)
	}
	img, err := got.Image(m.Manifests[1].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if layerMachine(t, img) != elf.EM_AARCH64 {
		t.Error("the pushed arm64 image's binary is not aarch64")
	}
}

func TestSourceTree(t *testing.T) {
	root, ok := SourceTree(".")
	if !ok {
		t.Skip("no go command: SourceTree needs it")
	}
	if _, err := os.Stat(filepath.Join(root, "cmd", "nodeexec")); err != nil {
		t.Errorf("SourceTree(.) = %s: %v", root, err)
	}
	if _, ok := SourceTree(t.TempDir()); ok {
		t.Error("SourceTree of a temporary directory found a module")
	}
}
