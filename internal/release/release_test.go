package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// manifestFile is the committed manifest, from this package's directory.
var manifestFile = filepath.Join("..", "..", filepath.FromSlash(ManifestPath))

func TestManifest(t *testing.T) {
	b, err := os.ReadFile(manifestFile)
	if err != nil {
		t.Fatalf("%v (make krew-manifest writes it)", err)
	}
	p, err := ParseManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(p, manifestFile); err != nil {
		t.Errorf("%s breaks krew's rules:\n%v", ManifestPath, err)
	}
	// The file is exactly what the template renders for its own version
	// and hashes: edit the template (and run make krew-manifest), not the file.
	sums := map[Platform]string{}
	for _, pl := range p.Spec.Platforms {
		if pl.Selector != nil {
			sums[Platform{pl.Selector.MatchLabels["os"], pl.Selector.MatchLabels["arch"]}] = pl.Sha256
		}
	}
	want, err := Manifest(p.Spec.Version, sums)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, want) {
		t.Errorf("%s differs from what internal/release renders for %s and its sha256s: run make krew-manifest\n--- file\n%s\n--- rendered\n%s", ManifestPath, p.Spec.Version, b, want)
	}
}

// validManifest renders a manifest that passes Validate, for the tests of
// each rule.
func validManifest(t *testing.T) []byte {
	t.Helper()
	sums := map[Platform]string{}
	for _, p := range Platforms {
		sums[p] = strings.Repeat("a", 64)
	}
	b, err := Manifest("v1.2.3", sums)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestValidate(t *testing.T) {
	base := validManifest(t)
	p, err := ParseManifest(base)
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(p, "plugins/nodeexec.yaml"); err != nil {
		t.Fatalf("rendered manifest refused: %v", err)
	}
	tests := []struct {
		name   string
		file   string
		mutate func(*Plugin)
		want   string
	}{
		{"file name", "plugins/other.yaml", func(*Plugin) {}, `file name "other.yaml"`},
		{"no v", "", func(p *Plugin) { p.Spec.Version = "1.2.3" }, "semantic version with the v prefix"},
		{"not semver", "", func(p *Plugin) { p.Spec.Version = "v1.2" }, "semantic version"},
		{"long short description", "", func(p *Plugin) { p.Spec.ShortDescription = strings.Repeat("x", 50) }, "fewer than 50"},
		{"no selector", "", func(p *Plugin) { p.Spec.Platforms[1].Selector = nil }, "spec.platforms[1].selector is missing"},
		{"http", "", func(p *Plugin) { p.Spec.Platforms[0].URI = "http://x/v1.2.3/a.tar.gz" }, "want an https URL"},
		{"zip", "", func(p *Plugin) { p.Spec.Platforms[0].URI = "https://x/v1.2.3/a.zip" }, "want a .tar.gz archive"},
		{"other version", "", func(p *Plugin) {
			p.Spec.Platforms[0].URI = strings.ReplaceAll(p.Spec.Platforms[0].URI, "v1.2.3", "v1.2.4")
		}, "does not contain spec.version"},
		{"no uri", "", func(p *Plugin) { p.Spec.Platforms[2].URI = "" }, "spec.platforms[2].uri"},
		{"short sha", "", func(p *Plugin) { p.Spec.Platforms[0].Sha256 = "abc" }, "64 lower-case hex"},
		{"no bin", "", func(p *Plugin) { p.Spec.Platforms[3].Bin = "" }, "spec.platforms[3].bin is empty"},
		{"no files", "", func(p *Plugin) { p.Spec.Platforms[0].Files = nil }, "files is empty"},
		{"duplicate", "", func(p *Plugin) { p.Spec.Platforms[1].Selector = p.Spec.Platforms[0].Selector }, "listed twice"},
		{"missing platform", "", func(p *Plugin) { p.Spec.Platforms = p.Spec.Platforms[:3] }, "darwin/arm64 is missing"},
		{"kind", "", func(p *Plugin) { p.Kind = "Plug" }, `kind "Plug"`},
		{"name", "node.exec.yaml", func(p *Plugin) { p.Metadata.Name = "node.exec" }, `metadata.name "node.exec"`},
		{"selector key", "", func(p *Plugin) { p.Spec.Platforms[0].Selector.MatchLabels["libc"] = "musl" }, "want exactly os and arch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParseManifest(base)
			if err != nil {
				t.Fatal(err)
			}
			tt.mutate(p)
			file := tt.file
			if file == "" {
				file = "nodeexec.yaml"
			}
			err = Validate(p, file)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestParseManifestStrict(t *testing.T) {
	base := string(validManifest(t))
	for name, doc := range map[string]string{
		"unknown spec field":     strings.Replace(base, "  homepage:", "  website: x\n  homepage:", 1),
		"unknown platform field": strings.Replace(base, "    bin:", "    binary: x\n    bin:", 1),
		"duplicate field":        strings.Replace(base, "  homepage:", "  version: v9.9.9\n  homepage:", 1),
	} {
		if _, err := ParseManifest([]byte(doc)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestManifestRefusesBadInput(t *testing.T) {
	if _, err := Manifest("0.1.0", nil); err == nil || !strings.Contains(err.Error(), "VERSION=") {
		t.Errorf("version without v: %v", err)
	}
	if _, err := Manifest("v0.1.0", map[Platform]string{}); err == nil || !strings.Contains(err.Error(), "make dist") {
		t.Errorf("no hashes: %v", err)
	}
}

func TestArchiveReproducible(t *testing.T) {
	bin := []byte("\x7fELF fake binary\x00\x01")
	files := []File{{Name: BinaryName, Mode: 0o755, Data: bin}, {Name: "LICENSE", Mode: 0o644, Data: []byte("text\n")}}
	a1, sum1, err := Archive(files)
	if err != nil {
		t.Fatal(err)
	}
	// Another order and a pause (a build at another time) change nothing.
	time.Sleep(1100 * time.Millisecond)
	a2, sum2, err := Archive([]File{files[1], {Name: BinaryName, Mode: 0o755, Data: append([]byte(nil), bin...)}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a1, a2) || sum1 != sum2 {
		t.Fatalf("same files, different archives: %s vs %s", sum1, sum2)
	}
	// Different bytes, a different archive.
	if _, sum3, _ := Archive([]File{{Name: BinaryName, Mode: 0o755, Data: []byte("other")}}); sum3 == sum1 {
		t.Error("different files, same hash")
	}

	zr, err := gzip.NewReader(bytes.NewReader(a1))
	if err != nil {
		t.Fatal(err)
	}
	if !zr.ModTime.IsZero() || zr.Name != "" {
		t.Errorf("gzip header has a time %v or name %q", zr.ModTime, zr.Name)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(archiveTime) {
			t.Errorf("%s: uid %d gid %d %q %q mtime %v", h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime)
		}
		data, _ := io.ReadAll(tr)
		if h.Name == BinaryName && (!bytes.Equal(data, bin) || h.Mode != 0o755) {
			t.Errorf("%s: mode %o, %q", h.Name, h.Mode, data)
		}
	}
	if got := strings.Join(names, ","); got != "LICENSE,"+BinaryName {
		t.Errorf("entries %s, want sorted by name", got)
	}
	if _, _, err := Archive([]File{{Name: "../x", Data: nil}}); err == nil {
		t.Error("an entry outside the archive root was accepted")
	}
}
