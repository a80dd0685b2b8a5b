// Command testcluster manages the nodeexec end-to-end test cluster (a real local
// Kubernetes cluster; see package internal/testcluster). Run as root.
//
//	testcluster up [--nodes N]     start or reuse; prints "export KUBECONFIG=..." last, on stdout
//	testcluster down               stop and remove everything but the build cache
//	testcluster add-node           start one more node; prints its name
//	testcluster remove-node NAME   stop a node and delete its Node object
//	testcluster import-image TAR   import a docker-archive tarball into every node
//	testcluster kubeconfig         print the admin kubeconfig path
//
// Progress goes to stderr. Directory and port flags (all commands): --cache-dir,
// --state-dir, --run-dir, --api-port, --kubernetes-version; empty means the default.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/nodeexec/nodeexec/internal/testcluster"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		msg := err.Error()
		if !strings.HasPrefix(msg, "testcluster") {
			msg = "testcluster: " + msg
		}
		fmt.Fprintln(os.Stderr, msg)
		os.Exit(1)
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, `usage: testcluster [flags] up [--nodes N] | down | add-node | remove-node NAME | import-image TAR | kubeconfig`)
}

func run(args []string, stdout, stderr io.Writer) error {
	var o testcluster.Options
	fs := flag.NewFlagSet("testcluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { usage(stderr); fs.PrintDefaults() }
	fs.StringVar(&o.CacheDir, "cache-dir", "", "build cache (default $"+testcluster.CacheDirEnv+" or "+testcluster.DefaultCacheDir+")")
	fs.StringVar(&o.StateDir, "state-dir", "", "state directory (default "+testcluster.DefaultStateDir+")")
	fs.StringVar(&o.RunDir, "run-dir", "", "run directory (default "+testcluster.DefaultRunDir+")")
	fs.IntVar(&o.APIPort, "api-port", 0, fmt.Sprintf("API server port on 127.0.0.1 (default %d)", testcluster.DefaultAPIPort))
	fs.StringVar(&o.KubernetesVersion, "kubernetes-version", "", "Kubernetes version (default "+testcluster.DefaultKubernetesVersion+")")
	fs.IntVar(&o.Nodes, "nodes", 0, fmt.Sprintf("nodes for up (default %d)", testcluster.DefaultNodes))
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		usage(stderr)
		return fmt.Errorf("no command")
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	// flags may also follow the command (testcluster up --nodes 1)
	if err := fs.Parse(rest); err != nil {
		return err
	}
	rest = fs.Args()
	o.Log = stderr

	// a closed stderr (`testcluster down 2>&1 | head`) must not kill a half-done operation
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	want := map[string]int{"up": 0, "down": 0, "add-node": 0, "remove-node": 1, "import-image": 1, "kubeconfig": 0}
	n, ok := want[cmd]
	if !ok {
		usage(stderr)
		return fmt.Errorf("unknown command %q", cmd)
	}
	if len(rest) != n {
		usage(stderr)
		return fmt.Errorf("%s takes %d argument(s), got %d", cmd, n, len(rest))
	}

	switch cmd {
	case "up":
		c, err := testcluster.Start(ctx, o)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "export KUBECONFIG=%s\n", c.Kubeconfig())
	case "down":
		return testcluster.Stop(ctx, o)
	case "kubeconfig":
		c, err := testcluster.Attach(ctx, o)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, c.Kubeconfig())
	case "add-node":
		c, err := testcluster.Attach(ctx, o)
		if err != nil {
			return err
		}
		name, err := c.AddNode(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, name)
	case "remove-node":
		c, err := testcluster.Attach(ctx, o)
		if err != nil {
			return err
		}
		return c.RemoveNode(ctx, rest[0])
	case "import-image":
		c, err := testcluster.Attach(ctx, o)
		if err != nil {
			return err
		}
		return c.ImportImage(ctx, rest[0])
	}
	return nil
}
