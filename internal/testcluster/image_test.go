package testcluster

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// readTar returns the headers and contents of a tarball, in order.
func readTar(t *testing.T, b []byte) ([]*tar.Header, map[string][]byte) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	var hdrs []*tar.Header
	data := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return hdrs, data
		}
		if err != nil {
			t.Fatal(err)
		}
		c, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		hdrs = append(hdrs, h)
		data[h.Name] = c
	}
}

func TestBuildImageLayout(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho tool\n"), 0o750); err != nil {
		t.Fatal(err)
	}
	// a fake busybox that lists its applets like the real one
	bb := filepath.Join(dir, "busybox")
	if err := os.WriteFile(bb, []byte("#!/bin/sh\necho bin/sh; echo usr/bin/nsenter; echo bin/busybox; echo sbin/ip\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := ImageSpec{
		Name:       "nodeexec.local/test:1",
		ExtraNames: []string{"busybox:stable"},
		Files: []ImageFile{
			{Src: bb, Dst: "/bin/busybox", Mode: 0o755},
			{Src: bin, Dst: "/usr/local/bin/tool"}, // mode from the source file
			{Data: []byte("root:x:0:0::/root:/bin/sh\n"), Dst: "/etc/passwd"},
		},
		Dirs:         []ImageDir{{Path: "/tmp", Mode: 0o777 | fs.ModeSticky}},
		Symlinks:     []ImageSymlink{{Path: "/sbin/ip", Target: "/usr/local/bin/tool"}}, // wins over the applet
		BusyboxLinks: "/bin/busybox",
		Entrypoint:   []string{"/bin/sh", "-c"},
		Cmd:          []string{"echo hi"},
		Env:          []string{"A=b"},
	}
	img, err := NewImage(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %v, %v", layers, err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	layer, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	diffID, err := layers[0].DiffID()
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(layer); diffID.Hex != hex.EncodeToString(sum[:]) {
		t.Errorf("diff ID %s is not the digest of the uncompressed layer", diffID)
	}
	if cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH || !slices.Equal(cfg.RootFS.DiffIDs, []v1.Hash{diffID}) ||
		!slices.Equal(cfg.Config.Entrypoint, []string{"/bin/sh", "-c"}) || !slices.Equal(cfg.Config.Cmd, []string{"echo hi"}) ||
		!slices.Contains(cfg.Config.Env, "A=b") || !strings.HasPrefix(cfg.Config.Env[0], "PATH=") ||
		!cfg.Created.Equal(time.Unix(0, 0)) {
		t.Errorf("config %+v", cfg)
	}

	// the docker archive holds the image under every name
	out := filepath.Join(dir, "img.tar")
	if err := BuildImage(context.Background(), out, spec); err != nil {
		t.Fatal(err)
	}
	want, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"nodeexec.local/test:1", "busybox:stable"} {
		tag, err := name.NewTag(n)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tarball.ImageFromPath(out, &tag)
		if err != nil {
			t.Fatalf("%s in the archive: %v", n, err)
		}
		if d, err := got.Digest(); err != nil || d != want {
			t.Errorf("%s in the archive: digest %v (%v), want %v", n, d, err, want)
		}
	}

	lh, lfiles := readTar(t, layer)
	byName := map[string]*tar.Header{}
	var names []string
	for _, h := range lh {
		byName[h.Name] = h
		names = append(names, h.Name)
	}
	if !slices.IsSorted(names) {
		t.Errorf("layer entries not sorted: %v", names)
	}
	check := func(name string, typ byte, mode int64, link string) {
		t.Helper()
		h := byName[name]
		if h == nil {
			t.Errorf("layer lacks %s (has %v)", name, names)
			return
		}
		if h.Typeflag != typ || h.Mode != mode || h.Linkname != link || !h.ModTime.Equal(time.Unix(0, 0)) || h.Uid != 0 {
			t.Errorf("%s: type %c mode %o link %q uid %d mtime %v", name, h.Typeflag, h.Mode, h.Linkname, h.Uid, h.ModTime)
		}
	}
	check("bin/", tar.TypeDir, 0o755, "")
	check("bin/busybox", tar.TypeReg, 0o755, "")
	check("usr/local/bin/tool", tar.TypeReg, 0o750, "")
	check("etc/passwd", tar.TypeReg, 0o644, "")
	check("tmp/", tar.TypeDir, 0o1777, "")
	check("bin/sh", tar.TypeSymlink, 0o777, "/bin/busybox")
	check("usr/bin/nsenter", tar.TypeSymlink, 0o777, "/bin/busybox")
	check("sbin/ip", tar.TypeSymlink, 0o777, "/usr/local/bin/tool")
	if string(lfiles["etc/passwd"]) != "root:x:0:0::/root:/bin/sh\n" {
		t.Errorf("passwd %q", lfiles["etc/passwd"])
	}

	// deterministic
	img2, err := NewImage(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if d2, err := img2.Digest(); err != nil || d2 != want {
		t.Errorf("two builds of the same spec differ: %v, %v (%v)", want, d2, err)
	}
}

func TestBuildImageRejects(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x.tar")
	for _, name := range []string{"", "nodeexec.local/x", "nodeexec.local/x:latest", "x:", "Upper/x:1", "x@sha256:abcd", "localhost:5000/x"} {
		if err := BuildImage(context.Background(), out, ImageSpec{Name: name}); err == nil {
			t.Errorf("name %q accepted", name)
		}
	}
	if err := BuildImage(context.Background(), out, ImageSpec{Name: "a:1", ExtraNames: []string{"b:latest"}}); err == nil {
		t.Error("extra name :latest accepted")
	}
	if err := BuildImage(context.Background(), out, ImageSpec{Name: "a:1", BusyboxLinks: "/bin/busybox"}); err == nil {
		t.Error("BusyboxLinks without a matching file accepted")
	}
	if err := BuildImage(context.Background(), out, ImageSpec{Name: "localhost:5000/x:1"}); err != nil {
		t.Errorf("registry with port: %v", err)
	}
}

func TestToolsAndPauseSpecs(t *testing.T) {
	ts := toolsImageSpec("/bin/busybox")
	if ts.Name != ToolsImage || !slices.Equal(ts.ExtraNames, []string{BusyboxImage}) || ts.BusyboxLinks != "/bin/busybox" {
		t.Errorf("tools spec %+v", ts)
	}
	ps := pauseImageSpec("/x/pause")
	if ps.Name != PauseImage || ps.Files[0].Dst != "/pause" || !slices.Equal(ps.Entrypoint, []string{"/pause"}) {
		t.Errorf("pause spec %+v", ps)
	}
}
