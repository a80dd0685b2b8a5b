// Command testcluster manages the nodeexec end-to-end test cluster (a real local
// Kubernetes cluster; see package internal/testcluster). Run as root.
//
//	testcluster up [--nodes N]     start or reuse; prints "export KUBECONFIG=..." last, on stdout
//	testcluster build              build (or find cached) the Kubernetes binaries of --kubernetes-version; starts nothing
//	testcluster down               stop and remove everything but the build cache
//	testcluster add-node           start one more node; prints its name
//	testcluster remove-node NAME   stop a node and delete its Node object
//	testcluster import-image TAR   import a docker-archive tarball into every node
//	testcluster kubeconfig         print the admin kubeconfig path
//	testcluster registry           print the test registry's addresses, CA and credentials
//	                               (shell variables; `eval` them to use DOCKER_CONFIG)
//	testcluster kwok up N [--heartbeat] [--fail-nodes a,b] [--pod-complete-after D] [--pod-start-delay D] [--kwok-version V]
//	                   [--exec [--agent-binary bin/nodeexec]]
//	                               start (or reuse) kwok and N simulated nodes kwok-node-1..N
//	                               (label type=kwok), wait until all are Ready; with --exec the
//	                               nodes answer exec, attach, logs and port-forward (commands run
//	                               in kwok's sandbox, the agent binary at /usr/local/bin/nodeexec)
//	testcluster kwok down          delete the simulated nodes (and pods bound to them), stop kwok
//
// Fault injection (only processes the cluster started, by recorded PID; see
// testcluster.Cluster.RestartAPIServer and the methods after it):
//
//	testcluster apiserver restart [DOWN]  SIGKILL the API server, wait DOWN (e.g. 3s), start it, wait /readyz
//	testcluster apiserver stop|start      SIGKILL it / start it again (same flags) and wait /readyz
//	testcluster apiserver freeze|thaw     SIGSTOP / SIGCONT it
//	testcluster kubelet stop|start NODE   stop / start a node's kubelet (start waits for Ready)
//	testcluster containerd stop|start NODE
//	testcluster reboot NODE               kill the node's kubelet, containers and containerd, new boot ID, start again
//	testcluster restore                   start whatever a fault stopped, thaw, wait until all is Ready
//
// Progress goes to stderr. Directory and port flags (all commands): --cache-dir,
// --state-dir, --run-dir, --api-port, --kubernetes-version, --containerd-version; empty
// means the default (for up: Debian's containerd 1.6 for a new cluster, any for a
// running one).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
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
	fmt.Fprintln(w, `usage: testcluster [flags] up [--nodes N] | build | down | add-node | remove-node NAME | import-image TAR | kubeconfig | registry
       testcluster [flags] kwok up N [--heartbeat] [--fail-nodes a,b] [--pod-complete-after D] [--pod-start-delay D] [--exec [--agent-binary PATH]] | kwok down
`+faultUsage)
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
	fs.StringVar(&o.ContainerdVersion, "containerd-version", "", "nodes' containerd: "+testcluster.DebianContainerdVersion+
		" (Debian's package, the default for a new cluster) or a 2.x.y built from the Go module proxy, e.g. "+testcluster.Containerd2Version)
	fs.IntVar(&o.Nodes, "nodes", 0, fmt.Sprintf("nodes for up (default %d)", testcluster.DefaultNodes))
	var ko testcluster.KwokOptions
	var failNodes string
	fs.BoolVar(&ko.Heartbeat, "heartbeat", false, "kwok up: node lease heartbeats (heavy at thousands of nodes)")
	fs.StringVar(&failNodes, "fail-nodes", "", "kwok up: comma-separated simulated nodes on which nodeexec pods fail (exit code 1)")
	fs.DurationVar(&ko.PodCompleteAfter, "pod-complete-after", 0, "kwok up: how long a nodeexec pod runs on a simulated node (default 1s)")
	fs.DurationVar(&ko.PodStartDelay, "pod-start-delay", 0, "kwok up: each of kwok's two pod start stages waits between D and 2D (default: kwok's 1-5 s)")
	fs.StringVar(&ko.Version, "kwok-version", "", "kwok up: kwok version (default "+testcluster.DefaultKwokVersion+")")
	fs.BoolVar(&ko.Exec, "exec", false, "kwok up: simulated nodes answer exec, attach, logs and port-forward (commands run in kwok's sandbox)")
	fs.StringVar(&ko.AgentBinary, "agent-binary", "bin/nodeexec", "kwok up --exec: the static nodeexec binary put at /usr/local/bin/nodeexec in kwok's sandbox (make build)")
	// flags may come before and after the command and its arguments
	// (testcluster up --nodes 1, testcluster kwok up 1000 --heartbeat)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) == 0 {
		usage(stderr)
		return fmt.Errorf("no command")
	}
	cmd, rest := pos[0], pos[1:]
	if failNodes != "" {
		ko.FailNodes = strings.Split(failNodes, ",")
	}
	o.Log = stderr

	// a closed stderr (`testcluster down 2>&1 | head`) must not kill a half-done operation
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if cmd == "kwok" {
		return kwok(ctx, o, ko, rest, stdout, stderr)
	}
	if handled, err := fault(ctx, o, cmd, rest, stdout); handled {
		return err
	}
	want := map[string]int{"build": 0, "up": 0, "down": 0, "add-node": 0, "remove-node": 1, "import-image": 1, "kubeconfig": 0, "registry": 0}
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
	case "build":
		return testcluster.Build(ctx, o)
	case "up":
		c, err := testcluster.Start(ctx, o)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "Kubernetes %s\n", c.KubernetesVersion())
		fmt.Fprintf(stderr, "cluster containerd: %s\n", c.ContainerdVersion())
		fmt.Fprintf(stdout, "export KUBECONFIG=%s\n", c.Kubeconfig())
	case "down":
		return testcluster.Stop(ctx, o)
	case "kubeconfig":
		c, err := testcluster.Attach(ctx, o)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, c.Kubeconfig())
	case "registry":
		c, err := testcluster.Attach(ctx, o)
		if err != nil {
			return err
		}
		reg, err := c.Registry()
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "# push from this machine to REGISTRY; the nodes pull NODE_REGISTRY/<repo> (pull secret needed)\n")
		fmt.Fprintf(stdout, "# and %s names (node credentials) from the same repositories\n", strings.Join(reg.MirroredRegistries, ", "))
		fmt.Fprintf(stdout, "REGISTRY=%s\nNODE_REGISTRY=%s\nREGISTRY_CA=%s\nREGISTRY_USER=%s\nREGISTRY_PASSWORD=%s\nexport DOCKER_CONFIG=%s\n",
			reg.Host, reg.NodeHost, reg.CAFile, reg.Username, reg.Password, reg.DockerConfigDir)
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

// kwok runs `kwok up N` and `kwok down` on the running cluster.
func kwok(ctx context.Context, o testcluster.Options, ko testcluster.KwokOptions, args []string, stdout, stderr io.Writer) error {
	switch {
	case len(args) == 2 && args[0] == "up":
		n, err := strconv.Atoi(args[1])
		if err != nil || n < 0 {
			usage(stderr)
			return fmt.Errorf("kwok up: N must be a number of nodes, got %q", args[1])
		}
		c, err := testcluster.Attach(ctx, o)
		if err != nil {
			return err
		}
		k, err := c.StartKwok(ctx, ko)
		if err != nil {
			return err
		}
		names, err := k.CreateNodes(ctx, n, nil)
		if err != nil {
			return err
		}
		if len(names) > 0 {
			fmt.Fprintf(stdout, "%d simulated nodes Ready: %s..%s (label %s)\n", len(names), names[0], names[len(names)-1], testcluster.KwokNodeSelector)
		} else {
			fmt.Fprintln(stdout, "kwok runs; no simulated nodes")
		}
		return nil
	case len(args) == 1 && args[0] == "down":
		c, err := testcluster.Attach(ctx, o)
		if err != nil {
			return err
		}
		k, err := c.AttachKwok()
		if err != nil {
			return err
		}
		if err := k.DeleteNodes(ctx); err != nil {
			return err
		}
		return k.Stop(ctx)
	}
	usage(stderr)
	return fmt.Errorf("kwok: want `kwok up N` or `kwok down`, got %q", strings.Join(args, " "))
}
