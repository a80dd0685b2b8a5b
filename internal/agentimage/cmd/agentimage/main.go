// Command agentimage builds the nodeexec agent image from this repository
// (see package internal/agentimage) and imports it into every node of the
// running local test cluster (`make agent-image`). Run as root from the
// module's root directory.
//
//	agentimage [--image REF] [--module DIR] [--out TAR]
//
// With --out it only writes the tarball and touches no cluster.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/nodeexec/nodeexec/internal/agentimage"
	"github.com/nodeexec/nodeexec/internal/testcluster"
	"github.com/nodeexec/nodeexec/nsenter"
)

func main() {
	ref := flag.String("image", nsenter.DefaultAgentImage, "image reference to build")
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
	if out != "" {
		if err := agentimage.Build(ctx, module, ref, out); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "agentimage: wrote %s to %s\n", ref, out)
		return nil
	}
	c, err := testcluster.Attach(ctx, testcluster.Options{Log: os.Stderr})
	if err != nil {
		return err
	}
	if err := agentimage.BuildAndImport(ctx, c, module, ref); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "agentimage: imported %s into nodes %v\n", ref, c.Nodes())
	return nil
}
