package testcluster

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ImageSpec describes a single-layer container image built from local files, with
// no registry and no base image.
type ImageSpec struct {
	// Name is the image reference written to the archive, e.g. "nodeexec.local/tools:1".
	// Required. It must carry an explicit tag other than "latest" (the API server turns
	// the pull policy of a ":latest" image into Always, and nothing can be pulled here).
	Name string
	// ExtraNames are further references for the same image, e.g. "busybox:stable".
	// Short names are normalized by containerd on import (docker.io/library/busybox:stable).
	ExtraNames []string
	// Files are copied into the image.
	Files []ImageFile
	// Dirs are created in the image (parents of files and links are created anyway,
	// mode 0755).
	Dirs []ImageDir
	// Symlinks are created in the image.
	Symlinks []ImageSymlink
	// BusyboxLinks, when set, is the path of a busybox binary inside the image (it must
	// be one of Files): one symlink to it is added per applet, as /<applet path>, for
	// every applet the source binary lists with --list-full. Existing entries win.
	BusyboxLinks string
	// Entrypoint and Cmd of the image config.
	Entrypoint []string
	Cmd        []string
	// Env of the image config, in addition to a default PATH.
	Env []string
}

// ImageFile is a regular file in an image: the contents of Src on this machine, or Data.
type ImageFile struct {
	Src  string      // file on this machine; empty to use Data
	Data []byte      // contents when Src is empty
	Dst  string      // absolute path in the image
	Mode fs.FileMode // permission bits; 0 means Src's (or 0644 for Data)
}

// ImageDir is a directory in an image.
type ImageDir struct {
	Path string
	Mode fs.FileMode // permission bits incl. sticky (e.g. 0o777|fs.ModeSticky for /tmp); 0 means 0755
}

// ImageSymlink is a symbolic link in an image.
type ImageSymlink struct {
	Path   string
	Target string
}

// NewImage builds spec as a single-layer image with go-containerregistry
// (mutate.ConfigFile and mutate.Append on empty.Image; docker schema 2 media types,
// the layer gzip-compressed when pushed). The image is deterministic: entries are
// sorted and all timestamps are the Unix epoch. spec.Name is not used (an image has
// no name until it is pushed or written; see Cluster.PushImage and BuildImage).
func NewImage(ctx context.Context, spec ImageSpec) (v1.Image, error) {
	var applets []string
	if spec.BusyboxLinks != "" {
		src := ""
		for _, f := range spec.Files {
			if path.Clean(f.Dst) == path.Clean(spec.BusyboxLinks) {
				src = f.Src
			}
		}
		if src == "" {
			return nil, fmt.Errorf("NewImage: BusyboxLinks %q is not the destination of a file with a Src", spec.BusyboxLinks)
		}
		b, err := exec.CommandContext(ctx, src, "--list-full").Output()
		if err != nil {
			return nil, fmt.Errorf("NewImage: %s --list-full: %w", src, err)
		}
		applets = strings.Fields(string(b))
	}
	layerTar, err := buildLayer(spec, applets)
	if err != nil {
		return nil, fmt.Errorf("NewImage %s: %w", spec.Name, err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("NewImage %s: %w", spec.Name, err)
	}
	epoch := v1.Time{Time: time.Unix(0, 0).UTC()}
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: runtime.GOARCH,
		OS:           "linux",
		Created:      epoch,
		Config: v1.Config{
			Env:        append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, spec.Env...),
			Entrypoint: spec.Entrypoint,
			Cmd:        spec.Cmd,
			WorkingDir: "/",
		},
	})
	if err != nil {
		return nil, fmt.Errorf("NewImage %s: %w", spec.Name, err)
	}
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer,
		History: v1.History{Created: epoch, CreatedBy: "nodeexec testcluster.NewImage"}})
	if err != nil {
		return nil, fmt.Errorf("NewImage %s: %w", spec.Name, err)
	}
	return img, nil
}

// BuildImage writes spec (see NewImage) as a docker-archive tarball (the `docker
// save` format, written by go-containerregistry's tarball package) tagged with
// spec.Name and spec.ExtraNames, to out. containerd imports it with `ctr images
// import` (1.6 and 2.x); see Cluster.ImportImage, for images a test needs on the
// nodes without a registry. Prefer Cluster.PushImage: the nodes then pull it.
func BuildImage(ctx context.Context, out string, spec ImageSpec) error {
	names := append([]string{spec.Name}, spec.ExtraNames...)
	refs := map[name.Reference]v1.Image{}
	img, err := NewImage(ctx, spec)
	if err != nil {
		return fmt.Errorf("BuildImage: %w", err)
	}
	for _, n := range names {
		if err := checkImageRef(n); err != nil {
			return fmt.Errorf("BuildImage: %w", err)
		}
		tag, err := name.NewTag(n)
		if err != nil {
			return fmt.Errorf("BuildImage: image name %q: %w", n, err)
		}
		refs[tag] = img
	}
	tmp := out + ".tmp"
	if err := tarball.MultiRefWriteToFile(tmp, refs); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("BuildImage %s: %w", spec.Name, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("BuildImage %s: %w", spec.Name, err)
	}
	return nil
}

// checkImageRef rejects references without an explicit tag, with tag "latest", or
// with a digest.
func checkImageRef(ref string) error {
	if ref == "" {
		return fmt.Errorf("empty image name")
	}
	if strings.Contains(ref, "@") {
		return fmt.Errorf("image name %q: digests are not supported", ref)
	}
	last := ref[strings.LastIndex(ref, "/")+1:]
	i := strings.LastIndex(last, ":")
	if i < 0 || i == len(last)-1 {
		return fmt.Errorf("image name %q needs an explicit tag (and not :latest)", ref)
	}
	if last[i+1:] == "latest" {
		return fmt.Errorf("image name %q: never tag local images :latest (pull policy would become Always)", ref)
	}
	if repo := ref[:len(ref)-len(last)+i]; repo != strings.ToLower(repo) || strings.ContainsAny(ref, " \t\n") {
		return fmt.Errorf("image name %q: repository must be lower case, without spaces", ref)
	}
	return nil
}

type layerEntry struct {
	hdr  tar.Header
	data []byte
}

// buildLayer returns the layer tarball of spec; applets are busybox applet paths.
func buildLayer(spec ImageSpec, applets []string) ([]byte, error) {
	epoch := time.Unix(0, 0)
	ents := map[string]*layerEntry{}
	clean := func(p string) string { return strings.Trim(path.Clean("/"+p), "/") }
	var addDir func(p string, mode int64, explicit bool)
	addDir = func(p string, mode int64, explicit bool) {
		if p == "" || p == "." {
			return
		}
		addDir(clean(path.Dir(p)), 0o755, false)
		if e, ok := ents[p]; ok {
			if e.hdr.Typeflag == tar.TypeDir && explicit {
				e.hdr.Mode = mode
			}
			return
		}
		ents[p] = &layerEntry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: mode, ModTime: epoch}}
	}
	for _, d := range spec.Dirs {
		p := clean(d.Path)
		if p == "" {
			return nil, fmt.Errorf("bad dir %q", d.Path)
		}
		addDir(p, tarMode(d.Mode, 0o755), true)
	}
	for _, f := range spec.Files {
		p := clean(f.Dst)
		if p == "" {
			return nil, fmt.Errorf("bad file destination %q", f.Dst)
		}
		data, mode := f.Data, f.Mode
		if f.Src != "" {
			b, err := os.ReadFile(f.Src)
			if err != nil {
				return nil, err
			}
			data = b
			if mode == 0 {
				st, err := os.Stat(f.Src)
				if err != nil {
					return nil, err
				}
				mode = st.Mode().Perm()
			}
		}
		addDir(clean(path.Dir(p)), 0o755, false)
		ents[p] = &layerEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: tarMode(mode, 0o644),
			Size: int64(len(data)), ModTime: epoch}, data: data}
	}
	addLink := func(p, target string) error {
		p = clean(p)
		if p == "" {
			return fmt.Errorf("bad symlink path")
		}
		if _, exists := ents[p]; exists {
			return nil
		}
		addDir(clean(path.Dir(p)), 0o755, false)
		ents[p] = &layerEntry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: p, Linkname: target, Mode: 0o777, ModTime: epoch}}
		return nil
	}
	for _, s := range spec.Symlinks {
		if err := addLink(s.Path, s.Target); err != nil {
			return nil, fmt.Errorf("symlink %q: %w", s.Path, err)
		}
	}
	bb := "/" + clean(spec.BusyboxLinks)
	for _, a := range applets {
		if "/"+clean(a) == bb {
			continue
		}
		if err := addLink(a, bb); err != nil {
			return nil, fmt.Errorf("applet %q: %w", a, err)
		}
	}

	keys := make([]string, 0, len(ents))
	for k := range ents {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, k := range keys {
		e := ents[k]
		e.hdr.Format = tar.FormatPAX
		e.hdr.Uname, e.hdr.Gname = "", ""
		if err := tw.WriteHeader(&e.hdr); err != nil {
			return nil, err
		}
		if e.data != nil {
			if _, err := tw.Write(e.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tarMode converts permission bits (and setuid/setgid/sticky) to a tar header mode.
func tarMode(m fs.FileMode, def int64) int64 {
	if m == 0 {
		return def
	}
	v := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		v |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		v |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		v |= 0o1000
	}
	return v
}

// toolsImageSpec is busybox-static with a symlink per applet, /etc/passwd,
// /etc/group, /tmp and /root, under ToolsImage and BusyboxImage.
func toolsImageSpec(busybox string) ImageSpec {
	return ImageSpec{
		Name:       ToolsImage,
		ExtraNames: []string{BusyboxImage},
		Files: []ImageFile{
			{Src: busybox, Dst: "/bin/busybox", Mode: 0o755},
			{Data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"), Dst: "/etc/passwd", Mode: 0o644},
			{Data: []byte("root:x:0:\nnogroup:x:65534:\n"), Dst: "/etc/group", Mode: 0o644},
		},
		Dirs:         []ImageDir{{Path: "/tmp", Mode: 0o777 | fs.ModeSticky}, {Path: "/root", Mode: 0o700}},
		BusyboxLinks: "/bin/busybox",
		Cmd:          []string{"/bin/sh"},
	}
}

// pauseImageSpec is the sandbox image: the pause binary as /pause.
func pauseImageSpec(pauseBin string) ImageSpec {
	return ImageSpec{
		Name:       PauseImage,
		Files:      []ImageFile{{Src: pauseBin, Dst: "/pause", Mode: 0o755}},
		Entrypoint: []string{"/pause"},
	}
}
