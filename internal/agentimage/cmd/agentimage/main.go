// Command agentimage builds nodeexec's image from this repository (see
// package internal/agentimage: FROM scratch plus the static binary; the
// agent's and the watcher's image) and pushes it to the running local test
// cluster's registry, from which the kubelets pull it as on a real cluster
// (`make agent-image`, `make controller-image`, and `make cluster-up` and
// `make demo` after bringing the cluster up). A cluster started without a
// registry gets the image imported into every node instead.
// Run as root from the module's root directory.
//
//	agentimage [--image REF] [--module DIR] [--platform LIST] [--out TAR]
//
// To the registry it pushes an OCI image index with one image per platform of
// --platform (default linux/amd64,linux/arm64: each cross-compiled with make
// dist's reproducible flags), so the image works on a mixed fleet as
// `nodeexec image push --platform` makes it. With --out it only writes the
// docker-archive tarball of the host's platform and touches no cluster; a
// cluster without a registry gets the host's platform imported.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/nodeexec/nodeexec/internal/agentimage"
	"github.com/nodeexec/nodeexec/internal/testcluster"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
)

func main() {
	ref := flag.String("image", agent.DefaultImage, "image reference to build")
	module := flag.String("module", ".", "root directory of the nodeexec module")
	out := flag.String("out", "", "write the docker-archive tarball here and do not import it")
	platforms := flag.String("platform", strings.Join(agentimage.SupportedPlatforms(), ","), "platforms of the index pushed to the registry (comma-separated os/arch)")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "agentimage: no arguments expected; flags: --image REF --module DIR --platform LIST --out TAR")
		os.Exit(2)
	}
	plats, err := agentimage.ParsePlatforms(*platforms)
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentimage: --platform: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *ref, *module, *out, plats); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, ref, module, out string, plats []v1.Platform) error {
	// the host's platform only: a tarball, or a cluster without a registry
	single := func() (v1.Image, error) {
		start := time.Now()
		img, err := agentimage.Build(ctx, module)
		if err != nil {
			return nil, err
		}
		d, err := img.Digest()
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "agentimage: built %s (%s) in %s\n", ref, d, time.Since(start).Round(10*time.Millisecond))
		return img, nil
	}
	if out != "" {
		t, err := name.NewTag(ref)
		if err != nil {
			return err
		}
		img, err := single()
		if err != nil {
			return err
		}
		if err := tarball.WriteToFile(out, t, img); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "agentimage: wrote %s to %s\n", ref, out)
		return nil
	}
	c, err := testcluster.Attach(ctx, testcluster.Options{Log: os.Stderr})
	if err != nil {
		return err
	}
	if _, rerr := c.Registry(); rerr == nil {
		idx, err := buildIndex(ctx, module, plats)
		if err != nil {
			return err
		}
		t0 := time.Now()
		digestRef, err := c.PushIndex(ctx, ref, idx)
		if err != nil {
			return fmt.Errorf("agentimage: pushing %s to the test cluster's registry: %w", ref, err)
		}
		fmt.Fprintf(os.Stderr, "agentimage: pushed %s (index %s, %d platforms) to the test cluster's registry in %s\n", ref, digestRef, len(plats), time.Since(t0).Round(10*time.Millisecond))
		return nil
	} else if !errors.Is(rerr, testcluster.ErrNotRunning) {
		return fmt.Errorf("agentimage: %w", rerr)
	}
	img, err := single()
	if err != nil {
		return err
	}
	if err := agentimage.Import(ctx, c, img, ref); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "agentimage: the cluster has no registry; imported %s into nodes %v\n", ref, c.Nodes())
	return nil
}

// buildIndex cross-compiles the static binaries for each platform (one go
// build at a time: on a small machine two at once are not faster) and
// returns their index.
func buildIndex(ctx context.Context, module string, plats []v1.Platform) (v1.ImageIndex, error) {
	dir, err := os.MkdirTemp("", "agentimage")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bins := map[string]agentimage.Binaries{}
	for _, p := range plats {
		t0 := time.Now()
		path, err := agentimage.BuildBinaryFor(ctx, module, dir, p)
		if err != nil {
			return nil, err
		}
		b, err := agentimage.ReadBinaries(path)
		if err != nil {
			return nil, err
		}
		bins[p.String()] = b
		fmt.Fprintf(os.Stderr, "agentimage: built the %s binary in %s\n", p.String(), time.Since(t0).Round(10*time.Millisecond))
	}
	return agentimage.Index(bins)
}
