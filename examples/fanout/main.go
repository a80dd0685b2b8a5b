// Command fanout runs a script on every node matching a label selector, at
// most five at a time, and prints a line per node.
//
//	go run ./examples/fanout 'kubernetes.io/os=linux' 'sysctl -n net.core.somaxconn'
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: fanout SELECTOR SCRIPT")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, selector, script string) error {
	cfg, ns, err := nodeexec.ClientOptions{}.RESTConfig()
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
	runner, err := nodeexec.NewRunner(nodeexec.RunnerOptions{Client: client, Backend: backend, MaxConcurrency: 5})
	if err != nil {
		return err
	}
	results, err := runner.Run(ctx, nodeexec.Targets{Selector: selector}, nodeexec.Request{
		Script:  script, // in chroot /host: the sysadmin profile mounts the node's root there
		Stdout:  os.Stdout,
		Stderr:  os.Stderr,
		Timeout: 2 * time.Minute,
	})
	if err != nil {
		return err // nothing was run: bad selector, no match, Pod Security refusal...
	}
	for _, r := range results {
		fmt.Printf("%-30s exit=%-3d %s %v\n", r.Node, r.ExitCode, r.Duration().Round(time.Millisecond), r.Err)
	}
	if failed := nodeexec.Failed(results); len(failed) > 0 {
		return fmt.Errorf("%d of %d nodes failed", len(failed), len(results))
	}
	return nil
}
