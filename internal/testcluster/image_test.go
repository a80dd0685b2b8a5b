package testcluster

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
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
	out := filepath.Join(dir, "img.tar")
	if err := BuildImage(context.Background(), out, spec); err != nil {
		t.Fatal(err)
	}
	archive, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	hdrs, files := readTar(t, archive)

	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil {
		t.Fatal(err)
	}
	if len(manifest) != 1 || !slices.Equal(manifest[0].RepoTags, []string{"nodeexec.local/test:1", "busybox:stable"}) || len(manifest[0].Layers) != 1 {
		t.Fatalf("manifest %+v", manifest)
	}
	// content addressing: file names are the sha256 of their contents
	cfgBytes := files[manifest[0].Config]
	if sum := sha256.Sum256(cfgBytes); hex.EncodeToString(sum[:])+".json" != manifest[0].Config {
		t.Errorf("config name %s is not its digest", manifest[0].Config)
	}
	layer := files[manifest[0].Layers[0]]
	layerSum := sha256.Sum256(layer)
	layerHex := hex.EncodeToString(layerSum[:])
	if manifest[0].Layers[0] != layerHex+"/layer.tar" {
		t.Errorf("layer name %s is not its digest", manifest[0].Layers[0])
	}
	var cfg struct {
		Architecture, OS string
		Config           struct{ Env, Entrypoint, Cmd []string }
		RootFS           struct {
			Type    string
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(cfgBytes, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" || !slices.Equal(cfg.RootFS.DiffIDs, []string{"sha256:" + layerHex}) ||
		!slices.Equal(cfg.Config.Entrypoint, []string{"/bin/sh", "-c"}) || !slices.Equal(cfg.Config.Cmd, []string{"echo hi"}) ||
		!slices.Contains(cfg.Config.Env, "A=b") || !strings.HasPrefix(cfg.Config.Env[0], "PATH=") {
		t.Errorf("config %+v", cfg)
	}
	for _, h := range hdrs {
		if !h.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s: mtime %v", h.Name, h.ModTime)
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
	out2 := filepath.Join(dir, "img2.tar")
	if err := BuildImage(context.Background(), out2, spec); err != nil {
		t.Fatal(err)
	}
	if b2, _ := os.ReadFile(out2); !bytes.Equal(archive, b2) {
		t.Error("two builds of the same spec differ")
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
