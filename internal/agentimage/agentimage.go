// Package agentimage builds nodeexec's one container image, with
// go-containerregistry and nothing else: FROM scratch plus the static
// nodeexec binary at /usr/local/bin/nodeexec (agent.Path) and, beside it,
// nodeexec-spool (agent.SpoolPath: the small program the debugpod backend
// runs in the user's image, cmd/nodeexec-spool). The same
// image is the agent of the nsenter and runtime backends and of the resident
// DaemonSet (whose holder process is `nodeexec agent hold`) and the
// NodeScript watcher's controller (deploy/, `nodeexec watch`), so client,
// agent and controller are one build and cannot drift. There is no shell, no
// busybox, no /etc/passwd: the agent runs as root and the controller as a
// numeric UID (deploy/deployment.yaml), and neither looks up a user name.
//
// Image is a pure function of the binaries' bytes: one layer with fixed
// timestamps, owners and modes, entries in order, gzip with a fixed level
// and no header time, a config with no creation time. Built twice from the
// same binaries it has the same digest.
//
// `nodeexec image push` (internal/cli) pushes the image of the running
// executable; BuildBinary and Build serve the e2e suite and `make
// agent-image` (cmd/agentimage), which build it from the source tree.
package agentimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
)

// The image's layout and configuration. The Dockerfile at the repository's
// root says the same (a unit test compares them).
const (
	// BinaryPath is where the image holds the nodeexec binary.
	BinaryPath = agent.Path
	// SpoolBinaryPath is where the image holds nodeexec-spool, when it
	// has it (Binaries.Spool).
	SpoolBinaryPath = agent.SpoolPath
	// PathEnv is the image's only environment variable. The agent passes its
	// environment to the commands it starts in the node's namespaces, where
	// they are looked up in this PATH.
	PathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// User is the image's user: empty, i.e. root (the agent needs it; the
	// controller's Deployment sets a non-root UID itself).
	User = ""
)

// Entrypoint is the image's entrypoint: the binary. Pods set their own
// command (`nodeexec agent hold`, `nodeexec watch`, ...).
func Entrypoint() []string { return []string{BinaryPath} }

// ErrNotStatic is wrapped by Check's error for a file that cannot be the
// agent: not a Linux ELF executable, or dynamically linked.
var ErrNotStatic = errors.New("not a statically linked Linux executable")

// StaticBuildHint is the command that builds a binary Check accepts.
const StaticBuildHint = "CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags '-s -w' -o nodeexec ./cmd/nodeexec"

// layerModTime is the modification time of every layer entry: the Unix
// epoch, so that the layer depends only on the binary.
var layerModTime = time.Unix(0, 0).UTC()

// Check reads the binary in r and returns its GOARCH-style architecture
// (amd64, arm64, ...). The error wraps ErrNotStatic, naming the reason and
// StaticBuildHint, when r is not an ELF file, is not a Linux executable,
// asks for a program interpreter (PT_INTERP) or for shared libraries
// (DT_NEEDED): in a scratch image such a binary cannot start.
func Check(r io.ReaderAt) (arch string, err error) {
	f, err := elf.NewFile(r)
	if err != nil {
		return "", fmt.Errorf("%w: not an ELF file (%v); the agent runs on Linux nodes: build it with %s", ErrNotStatic, err, StaticBuildHint)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return "", fmt.Errorf("%w: ELF type %s is not an executable; build it with %s", ErrNotStatic, f.Type, StaticBuildHint)
	}
	if f.OSABI != elf.ELFOSABI_NONE && f.OSABI != elf.ELFOSABI_LINUX {
		return "", fmt.Errorf("%w: built for %s, not Linux; build it with %s", ErrNotStatic, f.OSABI, StaticBuildHint)
	}
	if bi, err := buildinfo.Read(r); err == nil {
		for _, s := range bi.Settings {
			if s.Key == "GOOS" && s.Value != "linux" {
				return "", fmt.Errorf("%w: built for GOOS=%s; build it with %s", ErrNotStatic, s.Value, StaticBuildHint)
			}
		}
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("%w: dynamically linked (it has a program interpreter, PT_INTERP; typically a cgo build): a scratch image has no libc; build it with %s", ErrNotStatic, StaticBuildHint)
		}
	}
	if libs, err := f.ImportedLibraries(); err == nil && len(libs) > 0 {
		return "", fmt.Errorf("%w: needs shared libraries %s (DT_NEEDED): a scratch image has none; build it with %s", ErrNotStatic, strings.Join(libs, ", "), StaticBuildHint)
	}
	arch, ok := goArch(f.Machine, f.Class)
	if !ok {
		return "", fmt.Errorf("%w: ELF machine %s is not an architecture Kubernetes nodes run; build it for the nodes (GOARCH=amd64, arm64, ...) with %s", ErrNotStatic, f.Machine, StaticBuildHint)
	}
	return arch, nil
}

// goArch maps an ELF machine to the image platform's architecture.
func goArch(m elf.Machine, c elf.Class) (string, bool) {
	switch m {
	case elf.EM_X86_64:
		return "amd64", true
	case elf.EM_AARCH64:
		return "arm64", true
	case elf.EM_ARM:
		return "arm", true
	case elf.EM_386:
		return "386", true
	case elf.EM_PPC64:
		return "ppc64le", true
	case elf.EM_S390:
		return "s390x", true
	case elf.EM_RISCV:
		if c == elf.ELFCLASS64 {
			return "riscv64", true
		}
	case elf.EM_LOONGARCH:
		return "loong64", true
	}
	return "", false
}

// Binaries are the programs of one platform's image, by their bytes.
type Binaries struct {
	// Nodeexec is the nodeexec binary, at BinaryPath. Required.
	Nodeexec []byte
	// Spool is nodeexec-spool, at SpoolBinaryPath, or nil: an image
	// without it still serves every backend, but the debugpod backend's
	// agent container then copies the whole nodeexec binary into its pods
	// (tens of MB, hundreds of milliseconds), and its --agent-image-volume
	// finds no program to run.
	Spool []byte
}

// Image returns the image of the binaries b: an OCI image for
// linux/<Check's architecture of b.Nodeexec> with one gzip layer holding
// /usr/local, /usr/local/bin, BinaryPath and, when b.Spool is set,
// SpoolBinaryPath (mode 0755, owner 0:0, time the Unix epoch), and a config
// with Entrypoint(), PathEnv and User. The same bytes always give the same
// digest. Errors: Check's for either binary (b.Spool's names it), one
// wrapping ErrWrongArch when the two are for different architectures, or
// a layer or config error from go-containerregistry.
func Image(b Binaries) (v1.Image, error) {
	arch, err := Check(bytes.NewReader(b.Nodeexec))
	if err != nil {
		return nil, err
	}
	if b.Spool != nil {
		spoolArch, err := Check(bytes.NewReader(b.Spool))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Base(SpoolBinaryPath), err)
		}
		if spoolArch != arch {
			return nil, fmt.Errorf("%s: %w: it is a linux/%s ELF executable, nodeexec a linux/%s one; build both for the same GOARCH",
				filepath.Base(SpoolBinaryPath), ErrWrongArch, spoolArch, arch)
		}
	}
	layerTar, err := layerTar(b)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithCompressionLevel(gzip.BestCompression), tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("agentimage: layer: %w", err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, fmt.Errorf("agentimage: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("agentimage: config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: layerModTime}
	cf.Config = v1.Config{
		Entrypoint: Entrypoint(),
		Env:        []string{PathEnv},
		User:       User,
	}
	cf.History = nil
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("agentimage: config: %w", err)
	}
	return img, nil
}

// ReadBinaries reads the nodeexec binary at path and nodeexec-spool from
// the same directory (SpoolFile(path)), which may be absent (Binaries.Spool
// nil). Errors: reading either file.
func ReadBinaries(path string) (Binaries, error) {
	bin, err := os.ReadFile(path)
	if err != nil {
		return Binaries{}, fmt.Errorf("agentimage: %w", err)
	}
	spool, err := os.ReadFile(SpoolFile(path))
	if errors.Is(err, os.ErrNotExist) {
		return Binaries{Nodeexec: bin}, nil
	}
	if err != nil {
		return Binaries{}, fmt.Errorf("agentimage: %w", err)
	}
	return Binaries{Nodeexec: bin, Spool: spool}, nil
}

// SpoolFile is where nodeexec-spool is for the nodeexec binary at path:
// beside it, as `make build` (bin/), BuildBinary and the release archives
// put it.
func SpoolFile(path string) string {
	return filepath.Join(filepath.Dir(path), filepath.Base(SpoolBinaryPath))
}

// ImageFromFile is Image of ReadBinaries(path).
func ImageFromFile(path string) (v1.Image, error) {
	b, err := ReadBinaries(path)
	if err != nil {
		return nil, err
	}
	img, err := Image(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return img, nil
}

// layerTar is the uncompressed layer: the directories down to the
// binaries, then the binaries, in that (sorted) order, with fixed metadata.
func layerTar(b Binaries) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := strings.TrimPrefix(filepath.Dir(BinaryPath), "/")
	var dirs []string
	for d := dir; d != "." && d != ""; d = filepath.Dir(d) {
		dirs = append([]string{d + "/"}, dirs...)
	}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: layerModTime, Format: tar.FormatPAX}); err != nil {
			return nil, fmt.Errorf("agentimage: layer: %w", err)
		}
	}
	files := []struct {
		path string
		data []byte
	}{{BinaryPath, b.Nodeexec}}
	if b.Spool != nil {
		files = append(files, struct {
			path string
			data []byte
		}{SpoolBinaryPath, b.Spool})
	}
	for _, f := range files {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f.path, "/"), Mode: 0o755, Size: int64(len(f.data)), ModTime: layerModTime, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("agentimage: layer: %w", err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, fmt.Errorf("agentimage: layer: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("agentimage: layer: %w", err)
	}
	return buf.Bytes(), nil
}

// BuildBinary compiles ./cmd/nodeexec of the module in moduleDir into
// dir/nodeexec and ./cmd/nodeexec-spool into dir/nodeexec-spool, static
// Linux binaries for GOARCH of the environment (CGO_ENABLED=0, -trimpath,
// -ldflags "-s -w"), and returns the nodeexec binary's path (ReadBinaries
// reads both). The error carries `go build`'s output.
func BuildBinary(ctx context.Context, moduleDir, dir string) (string, error) {
	goBin, err := goTool()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "nodeexec")
	for _, b := range []struct{ out, pkg string }{{bin, "./cmd/nodeexec"}, {SpoolFile(bin), "./cmd/nodeexec-spool"}} {
		cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-ldflags", "-s -w", "-o", b.out, b.pkg)
		cmd.Dir = moduleDir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("agentimage: go build %s in %s: %w\n%s", b.pkg, moduleDir, err, strings.TrimSpace(string(out)))
		}
	}
	return bin, nil
}

// Build compiles the module in moduleDir (BuildBinary) and returns its image.
func Build(ctx context.Context, moduleDir string) (v1.Image, error) {
	tmp, err := os.MkdirTemp("", "nodeexec-agent-")
	if err != nil {
		return nil, fmt.Errorf("agentimage: %w", err)
	}
	defer os.RemoveAll(tmp)
	bin, err := BuildBinary(ctx, moduleDir, tmp)
	if err != nil {
		return nil, err
	}
	// ImageFromFile reads the whole binary now; the layer is kept in memory,
	// so the temporary directory may go.
	return ImageFromFile(bin)
}

// goTool finds the go command: on PATH, else /usr/local/go/bin/go.
func goTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/local/go/bin/go"); err == nil {
		return "/usr/local/go/bin/go", nil
	}
	return "", errors.New("agentimage: the go command is needed to build the agent (not on PATH nor in /usr/local/go/bin)")
}
