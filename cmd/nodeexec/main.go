// Command nodeexec runs commands and scripts on Kubernetes nodes. Installed on
// PATH as kubectl-nodeexec it is also a kubectl plugin: kubectl nodeexec run ...
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/nodeexec/nodeexec/internal/cli"
)

func main() {
	// client-go's remaining global klog calls (such as a cancelled stream's
	// "use of closed network connection") are not for the user; -v shows the
	// library's own logs through the context.
	klog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() { <-ctx.Done(); stop() }() // a second signal kills at once
	code := cli.Run(ctx, cli.Streams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}, os.Args)
	stop()
	os.Exit(code)
}
