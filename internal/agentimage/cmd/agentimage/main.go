// Command agentimage builds nodeexec's image from this repository (see
// package internal/agentimage: FROM scratch plus the static binary; the
// agent's and the watcher's image) and pushes it to the running local test
// cluster's registry, from which the kubelets pull it as on a real cluster
// (`make agent-image`, `make controller-image`, and `make cluster-up` and
// `make demo` after bringing the cluster up). A cluster started without a
// registry gets the image imported into every node instead.
// Run as root from the module's root directory.
//
//	agentimage [--image REF] [--module DIR] [--out TAR]
//
// With --out it only writes the docker-archive tarball and touches no cluster.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/nodeexec/nodeexec/internal/agentimage"
	"github.com/nodeexec/nodeexec/internal/testcluster"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
)

func main() {
	ref := flag.String("image", agent.DefaultImage, "image reference to build")
	module := flag.String("module", ".", "root directory of the nodeexec module")
	out := flag.String("out", "", "write the docker-archive tarball here and do not import it")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "agentimage: no arguments expected; flags: --image REF --module DIR --out TAR")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *ref, *module, *out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, ref, module, out string) error {
	start := time.Now()
	img, err := agentimage.Build(ctx, module)
	if err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "agentimage: built %s (%s) in %s\n", ref, d, time.Since(start).Round(10*time.Millisecond))
	if out != "" {
		t, err := name.NewTag(ref)
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
		t0 := time.Now()
		digestRef, err := c.PushImage(ctx, ref, img)
		if err != nil {
			return fmt.Errorf("agentimage: pushing %s to the test cluster's registry: %w", ref, err)
		}
		fmt.Fprintf(os.Stderr, "agentimage: pushed %s (%s) to the test cluster's registry in %s\n", ref, digestRef, time.Since(t0).Round(10*time.Millisecond))
		return nil
	} else if !errors.Is(rerr, testcluster.ErrNotRunning) {
		return fmt.Errorf("agentimage: %w", rerr)
	}
	if err := agentimage.Import(ctx, c, img, ref); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "agentimage: the cluster has no registry; imported %s into nodes %v\n", ref, c.Nodes())
	return nil
}
