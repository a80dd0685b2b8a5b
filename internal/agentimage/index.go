package agentimage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/nodeexec/nodeexec/internal/release"
)

// Module is the Go module nodeexec is built from; SourceTree looks for it.
const Module = "github.com/nodeexec/nodeexec"

// SupportedPlatforms are the platforms nodeexec's image can be built for,
// in an index's order: the agent is a static Linux binary.
func SupportedPlatforms() []string { return []string{"linux/amd64", "linux/arm64"} }

// ErrPlatform is wrapped by ParsePlatform's and ParsePlatforms' errors: a
// platform that is malformed, not supported (SupportedPlatforms) or listed
// twice.
var ErrPlatform = errors.New("unsupported platform")

// ErrWrongArch is wrapped by ImageFor's error for a binary whose ELF machine
// is not its platform's architecture.
var ErrWrongArch = errors.New("the binary's architecture is not its platform's")

// ParsePlatform parses s, an os/arch string, with go-containerregistry's
// v1.ParsePlatform and accepts only SupportedPlatforms (no variant, no OS
// version). The error wraps ErrPlatform and names s and the supported list.
func ParsePlatform(s string) (v1.Platform, error) {
	supported := SupportedPlatforms()
	if strings.TrimSpace(s) == "" {
		return v1.Platform{}, fmt.Errorf("%w: empty platform; give one of %s", ErrPlatform, strings.Join(supported, ", "))
	}
	p, err := v1.ParsePlatform(s)
	if err != nil {
		return v1.Platform{}, fmt.Errorf("%w %q: %v; give one of %s", ErrPlatform, s, err, strings.Join(supported, ", "))
	}
	if p.OS != "linux" {
		return v1.Platform{}, fmt.Errorf("%w %q: OS %q: the agent runs on Linux nodes only; give one of %s", ErrPlatform, s, p.OS, strings.Join(supported, ", "))
	}
	for _, ok := range supported {
		if p.String() == ok && s == ok {
			return *p, nil
		}
	}
	if p.Variant != "" || p.OSVersion != "" {
		return v1.Platform{}, fmt.Errorf("%w %q: give the platform without a variant or OS version, one of %s", ErrPlatform, s, strings.Join(supported, ", "))
	}
	return v1.Platform{}, fmt.Errorf("%w %q: architecture %q is not built; give one of %s", ErrPlatform, s, p.Architecture, strings.Join(supported, ", "))
}

// ParsePlatforms parses s, a comma-separated list of platforms (e.g.
// "linux/amd64,linux/arm64"), each with ParsePlatform, in the order given.
// An empty list, an empty item and a platform listed twice are refused;
// the error wraps ErrPlatform.
func ParsePlatforms(s string) ([]v1.Platform, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("%w: no platform given; give a comma-separated list such as %s", ErrPlatform, strings.Join(SupportedPlatforms(), ","))
	}
	var out []v1.Platform
	seen := map[string]bool{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		p, err := ParsePlatform(item)
		if err != nil {
			return nil, err
		}
		if seen[p.String()] {
			return nil, fmt.Errorf("%w: %s is listed twice in %q; list each platform once", ErrPlatform, p.String(), s)
		}
		seen[p.String()] = true
		out = append(out, p)
	}
	return out, nil
}

// ImageFor is Image(b) for platform p: Check's architecture of b's
// binaries must be p's (else the error wraps ErrWrongArch and names p and
// the binary's ELF architecture); the image's config says p's OS and
// architecture. Check's errors (ErrNotStatic) are returned wrapped with p.
func ImageFor(p v1.Platform, b Binaries) (v1.Image, error) {
	arch, err := Check(bytes.NewReader(b.Nodeexec))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.String(), err)
	}
	if p.OS != "linux" || arch != p.Architecture {
		return nil, fmt.Errorf("%s: %w: it is a linux/%s ELF executable; build it with GOOS=%s GOARCH=%s %s",
			p.String(), ErrWrongArch, arch, p.OS, p.Architecture, StaticBuildHint)
	}
	img, err := Image(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.String(), err)
	}
	return img, nil
}

// Index returns the OCI image index of nodeexec's image for several
// platforms: bins maps a platform (ParsePlatform's syntax, e.g.
// "linux/arm64") to the binaries for it; each platform's image is
// ImageFor(platform, binaries) and its descriptor in the index carries the
// platform. Manifests are in SupportedPlatforms' order, and the index has
// no annotations or times, so the same binaries always give the same
// digest. Errors: an empty map, ParsePlatform's, ImageFor's.
func Index(bins map[string]Binaries) (v1.ImageIndex, error) {
	if len(bins) == 0 {
		return nil, fmt.Errorf("agentimage: no binary for any platform; give one for each of %s", strings.Join(SupportedPlatforms(), ", "))
	}
	platforms := make([]v1.Platform, 0, len(bins))
	for s := range bins {
		p, err := ParsePlatform(s)
		if err != nil {
			return nil, err
		}
		platforms = append(platforms, p)
	}
	order := map[string]int{}
	for i, s := range SupportedPlatforms() {
		order[s] = i
	}
	sort.Slice(platforms, func(i, j int) bool { return order[platforms[i].String()] < order[platforms[j].String()] })
	var adds []mutate.IndexAddendum
	for _, p := range platforms {
		img, err := ImageFor(p, bins[p.String()])
		if err != nil {
			return nil, err
		}
		p := p
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{MediaType: types.OCIManifestSchema1, Platform: &p}})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	if _, err := idx.Digest(); err != nil {
		return nil, fmt.Errorf("agentimage: index: %w", err)
	}
	return idx, nil
}

// PlatformImageSize is one image of an index: its platform, manifest digest and
// compressed size (the sum of its layers' sizes, bytes).
type PlatformImageSize struct {
	Platform v1.Platform
	Digest   v1.Hash
	Size     int64
}

// IndexImages lists idx's images in its order, with their compressed
// sizes. The error is go-containerregistry's.
func IndexImages(idx v1.ImageIndex) ([]PlatformImageSize, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("agentimage: index: %w", err)
	}
	var out []PlatformImageSize
	for _, d := range m.Manifests {
		pi := PlatformImageSize{Digest: d.Digest}
		if d.Platform != nil {
			pi.Platform = *d.Platform
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("agentimage: index: %s: %w", d.Digest, err)
		}
		layers, err := img.Layers()
		if err != nil {
			return nil, fmt.Errorf("agentimage: index: %s: %w", d.Digest, err)
		}
		for _, l := range layers {
			n, err := l.Size()
			if err != nil {
				return nil, fmt.Errorf("agentimage: index: %s: %w", d.Digest, err)
			}
			pi.Size += n
		}
		out = append(out, pi)
	}
	return out, nil
}

// PushIndex is Push for an index: it uploads every image of idx, then idx,
// under tag, and returns REPOSITORY@sha256:... of the index. Errors as
// Push's.
func PushIndex(ctx context.Context, idx v1.ImageIndex, tag name.Tag, keychain authn.Keychain, opts ...remote.Option) (name.Digest, error) {
	d, err := idx.Digest()
	if err != nil {
		return name.Digest{}, fmt.Errorf("agentimage: %w", err)
	}
	opts = append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(keychain), remote.WithUserAgent("nodeexec")}, opts...)
	if err := remote.WriteIndex(tag, idx, opts...); err != nil {
		return name.Digest{}, classify(tag.RegistryStr(), err)
	}
	return tag.Context().Digest(d.String()), nil
}

// BuildBinaryFor compiles ./cmd/nodeexec of the module in moduleDir into
// dir/OS-ARCH/nodeexec, a static binary for platform p, and
// ./cmd/nodeexec-spool beside it (SpoolFile), with make dist's reproducible flags
// (release.GoBuildArgs without a version, release.GoBuildSpoolArgs,
// release.GoBuildEnv: CGO_ENABLED=0, -trimpath, no VCS stamp, no build
// ID), and returns the nodeexec binary's path (ReadBinaries reads both).
// The error carries `go build`'s output.
func BuildBinaryFor(ctx context.Context, moduleDir, dir string, p v1.Platform) (string, error) {
	goBin, err := goTool()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, p.OS+"-"+p.Architecture, "nodeexec")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", fmt.Errorf("agentimage: %w", err)
	}
	for _, args := range [][]string{release.GoBuildArgs("", bin), release.GoBuildSpoolArgs(SpoolFile(bin))} {
		cmd := exec.CommandContext(ctx, goBin, args...)
		cmd.Dir = moduleDir
		cmd.Env = append(os.Environ(), release.GoBuildEnv(p.OS, p.Architecture)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("agentimage: go build %s for %s in %s: %w\n%s", args[len(args)-1], p.String(), moduleDir, err, strings.TrimSpace(string(b)))
		}
	}
	return bin, nil
}

// SourceTree returns the root of nodeexec's module holding dir (dir or a
// parent whose go.mod declares Module and which has cmd/nodeexec), and
// whether there is one and the go command to build it.
func SourceTree(dir string) (string, bool) {
	if _, err := goTool(); err != nil {
		return "", false
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", false
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if f := strings.Fields(line); len(f) == 2 && f[0] == "module" && strings.Trim(f[1], `"`) == Module {
					if st, err := os.Stat(filepath.Join(dir, "cmd", "nodeexec")); err == nil && st.IsDir() {
						return dir, true
					}
				}
			}
			return "", false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}
