// Command oneshot runs one command on one node with the debug-pod backend and
// exits with the command's exit code.
//
//	go run ./examples/oneshot NODE -- uname -a
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
)

func main() {
	if len(os.Args) < 4 || os.Args[2] != "--" {
		fmt.Fprintln(os.Stderr, "usage: oneshot NODE -- COMMAND [ARGS...]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	cfg, ns, err := nodeexec.ClientOptions{}.RESTConfig() // kubectl's kubeconfig rules
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	client, err := nodeexec.Clientset(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	backend, err := debugpod.New(debugpod.Options{PodOptions: debugpod.PodOptions{Client: client, Config: cfg, Namespace: ns}, Profile: "sysadmin"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	res, err := backend.Run(ctx, nodeexec.Request{
		Node:    os.Args[1],
		Command: os.Args[3:],
		Stdout:  os.Stdout,
		Stderr:  os.Stderr,
	})
	var exitErr *nodeexec.ExitError
	switch {
	case errors.As(err, &exitErr):
		os.Exit(exitErr.Code)
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(nodeexec.ExitCode(err))
	}
	fmt.Fprintf(os.Stderr, "ran in pod %s/%s in %s\n", res.Namespace, res.Pod, res.Duration())
}
