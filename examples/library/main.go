// Command library is the library guide's program (docs/library.md shows the
// part between its docs:begin and docs:end lines; `make docs` copies it
// there): a script on every Linux node through the Runner, with the debugpod
// backend, each node's output streamed to this process's stdout and stderr.
//
//	go run ./examples/library
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(nodeexec.ExitCode(err))
	}
}

func run(ctx context.Context) error {
	// docs:begin
	cfg, ns, err := nodeexec.ClientOptions{}.RESTConfig() // kubectl's kubeconfig rules
	if err != nil {
		return err
	}
	client, err := nodeexec.Clientset(cfg)
	if err != nil {
		return err
	}
	backend, err := debugpod.New(debugpod.Options{PodOptions: debugpod.PodOptions{Client: client, Config: cfg, Namespace: ns}})
	if err != nil {
		return err
	}
	runner, err := nodeexec.NewRunner(nodeexec.RunnerOptions{Client: client, Backend: backend})
	if err != nil {
		return err
	}
	results, err := runner.Run(ctx, nodeexec.Targets{Selector: "kubernetes.io/os=linux"},
		nodeexec.Request{Script: "sysctl -w net.core.somaxconn=4096", Stdout: os.Stdout, Stderr: os.Stderr})
	if err != nil {
		return err // nothing ran: bad targets or request, no such node, Pod Security refused
	}
	for _, r := range results {
		fmt.Printf("%s: exit %d, %v\n", r.Node, r.ExitCode, r.Err)
	}
	// docs:end
	return nil
}
