package cli

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	ucli "github.com/urfave/cli/v2"

	"github.com/nodeexec/nodeexec/internal/agentimage"
)

// platformBinaries parses `--binary PLATFORM=PATH` values against the
// platforms of --platform: each must have "=", a platform ParsePlatform
// accepts that is in platforms, and appear once. Nothing is read.
func platformBinaries(values []string, platforms []v1.Platform) (map[string]string, error) {
	asked := map[string]bool{}
	for _, p := range platforms {
		asked[p.String()] = true
	}
	out := map[string]string{}
	for _, v := range values {
		ps, path, ok := strings.Cut(v, "=")
		if !ok || strings.TrimSpace(ps) == "" || path == "" {
			return nil, fmt.Errorf("image push: --binary %q: with --platform give PLATFORM=PATH, e.g. --binary linux/arm64=./nodeexec-arm64", v)
		}
		p, err := agentimage.ParsePlatform(strings.TrimSpace(ps))
		if err != nil {
			return nil, fmt.Errorf("image push: --binary %q: %w", v, err)
		}
		if !asked[p.String()] {
			return nil, fmt.Errorf("image push: --binary %q: %s is not in --platform; add it to --platform or drop this --binary", v, p.String())
		}
		if _, dup := out[p.String()]; dup {
			return nil, fmt.Errorf("image push: --binary %q: a second binary for %s; give one --binary per platform", v, p.String())
		}
		out[p.String()] = path
	}
	return out, nil
}

// imagePushIndex is `nodeexec image push --platform ...`: every input is
// checked (platforms, --binary values, the binaries' ELF machines, static
// linking) before anything is built or pushed; platforms without --binary
// take this executable (its own platform) or are cross-compiled from the
// source tree of the working directory.
func imagePushIndex(c *ucli.Context, streams Streams, tag name.Tag) error {
	platforms, err := agentimage.ParsePlatforms(c.String("platform"))
	if err != nil {
		return fmt.Errorf("image push: --platform: %w", err)
	}
	given, err := platformBinaries(c.StringSlice("binary"), platforms)
	if err != nil {
		return err
	}
	self := runtime.GOOS + "/" + runtime.GOARCH
	paths := map[string]string{}
	var build []v1.Platform
	module, inTree := "", false
	for _, p := range platforms {
		if path, ok := given[p.String()]; ok {
			paths[p.String()] = path
			continue
		}
		if p.String() == self {
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("image push: finding this executable for %s: %w; give it with --binary %s=PATH", self, err, self)
			}
			paths[p.String()] = exe
			continue
		}
		if module == "" {
			module, inTree = agentimage.SourceTree(".")
		}
		if !inTree {
			return fmt.Errorf("image push: no binary for %s: give --binary %s=PATH (a static build: GOOS=%s GOARCH=%s %s; make dist's archives hold one), or run from nodeexec's source tree with the go command to cross-compile it",
				p.String(), p.String(), p.OS, p.Architecture, agentimage.StaticBuildHint)
		}
		build = append(build, p)
	}
	start := time.Now()
	bins := map[string]agentimage.Binaries{}
	// The binaries given (and this one) are checked before any build; each
	// takes the nodeexec-spool beside it, when there is one.
	for ps, path := range paths {
		p, _ := agentimage.ParsePlatform(ps)
		b, err := agentimage.ReadBinaries(path)
		if err != nil {
			return fmt.Errorf("image push: --binary %s=%s: %w", ps, path, err)
		}
		noSpoolNote(streams.ErrOut, path)
		if _, err := agentimage.ImageFor(p, b); err != nil {
			if errors.Is(err, agentimage.ErrNotStatic) && given[ps] == "" {
				return fmt.Errorf("image push: this nodeexec cannot be the agent for %s (%s): %w; give one with --binary %s=PATH", ps, path, err, ps)
			}
			return fmt.Errorf("image push: --binary %s=%s: %w", ps, path, err)
		}
		bins[ps] = b
	}
	if len(build) > 0 {
		tmp, err := os.MkdirTemp("", "nodeexec-image-")
		if err != nil {
			return fmt.Errorf("image push: %w", err)
		}
		defer os.RemoveAll(tmp)
		for _, p := range build {
			t0 := time.Now()
			fmt.Fprintf(streams.ErrOut, "building %s from the source tree %s (no --binary %s=PATH given)\n", p.String(), module, p.String())
			path, err := agentimage.BuildBinaryFor(c.Context, module, tmp, p)
			if err != nil {
				return fmt.Errorf("image push: %w", err)
			}
			b, err := agentimage.ReadBinaries(path)
			if err != nil {
				return fmt.Errorf("image push: %w", err)
			}
			bins[p.String()] = b
			fmt.Fprintf(streams.ErrOut, "built %s in %s\n", p.String(), time.Since(t0).Round(10*time.Millisecond))
		}
	}
	idx, err := agentimage.Index(bins)
	if err != nil {
		return fmt.Errorf("image push: %w", err)
	}
	images, err := agentimage.IndexImages(idx)
	if err != nil {
		return fmt.Errorf("image push: %w", err)
	}
	built := time.Since(start)
	ref, err := agentimage.PushIndex(c.Context, idx, tag, authn.DefaultKeychain)
	if err != nil {
		return err
	}
	fmt.Fprintln(streams.Out, ref.String())
	fmt.Fprintf(streams.ErrOut, "pushed %s: an image index for %d platforms (built in %s, pushed in %s)\n", tag.Name(), len(images),
		built.Round(10*time.Millisecond), (time.Since(start) - built).Round(10*time.Millisecond))
	for _, im := range images {
		fmt.Fprintf(streams.ErrOut, "  %-12s %s  %.1f MB compressed\n", im.Platform.String(), im.Digest, float64(im.Size)/1e6)
	}
	printUse(streams, ref)
	return nil
}
