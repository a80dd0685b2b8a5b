// Command nodeexec runs commands and scripts on Kubernetes nodes. Installed on
// PATH as kubectl-nodeexec it is also a kubectl plugin: kubectl nodeexec run ...
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	_ "time/tzdata" // NodeScript maintenance windows name IANA time zones; the image has no zoneinfo

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/nodeexec/nodeexec/internal/cli"
	_ "github.com/nodeexec/nodeexec/internal/noi18n" // before kubectl's packages initialise (import-path order)
)

// exitInterrupted is the exit status after a second SIGINT or SIGTERM, as a
// shell reports a process killed by SIGINT (128+2).
const exitInterrupted = 130

func main() {
	// client-go's remaining global klog calls (such as a cancelled stream's
	// "use of closed network connection") are not for the user; -v shows the
	// library's own logs through the context.
	klog.SetLogger(logr.Discard())
	// The first SIGINT/SIGTERM cancels the run, which deletes what it
	// created; a second one exits at once, saying what becomes of the rest.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-sigs
		cancel()
		<-sigs
		fmt.Fprintln(os.Stderr, cli.InterruptedAgainMessage)
		os.Exit(exitInterrupted)
	}()
	code := cli.Run(ctx, cli.Streams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}, os.Args)
	cancel()
	os.Exit(code)
}
