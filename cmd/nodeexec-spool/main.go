// Command nodeexec-spool is the small program nodeexec's debugpod backend
// runs in the user's image: `nodeexec-spool agent run --spool DIR -- CMD`
// runs CMD as it is, keeping its output and exit status so that a cut exec
// stream is resumed (`agent attach`) rather than taken for a success. The
// agent image carries it at /usr/local/bin/nodeexec-spool, beside nodeexec,
// whose hidden `agent` command runs the same command lines; it imports no
// Kubernetes client, so that it is small to copy into a pod and quick to
// start. See package internal/spoolcmd.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/nodeexec/nodeexec/internal/spoolcmd"
)

// exitInterrupted is the exit status after a second SIGINT or SIGTERM, as
// the nodeexec binary's.
const exitInterrupted = 130

func main() {
	// As the nodeexec binary's agent: the first SIGINT or SIGTERM ends the
	// command (its context; `agent attach --stop` sends SIGTERM), a second
	// one exits at once.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-sigs
		cancel()
		<-sigs
		os.Exit(exitInterrupted)
	}()
	err := spoolcmd.App(spoolcmd.Streams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}).RunContext(ctx, os.Args)
	cancel()
	os.Exit(exitCode(err))
}

// exitCode is the process's exit status for the app's error: 0, an
// ExitStatus's code, or 2 for a usage error (printed).
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if es, ok := err.(spoolcmd.ExitStatus); ok {
		return es.Code
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", spoolcmd.BinaryName, err)
	return 2
}
