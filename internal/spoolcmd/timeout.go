package spoolcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/moby/term"
	ucli "github.com/urfave/cli/v2"

	"github.com/nodeexec/nodeexec/nsenter"
)

// ErrTimeout is the cause of the command's context's end at --timeout.
var ErrTimeout = errors.New("time limit reached")

// TimeoutFlag is --timeout of the subcommands that run a command (run;
// the nodeexec binary's nsenter and container-exec). Clients give it
// (agent.WithTimeout), so that a command cannot outlive its client for
// long.
func TimeoutFlag() ucli.Flag {
	return &ucli.DurationFlag{Name: "timeout", Usage: "end the command after this `DURATION`: SIGTERM to its process group, SIGKILL 5s later; exit status 124 (0: no limit)"}
}

// TimeoutExit reports a run that --timeout ended: a line on stderr and
// exit status ExitTimedOut. timedOut is false when ctx did not end by
// --timeout (its cause is not ErrTimeout).
func TimeoutExit(ctx context.Context, c *ucli.Context, streams Streams) (timedOut bool, exit error) {
	if !errors.Is(context.Cause(ctx), ErrTimeout) {
		return false, nil
	}
	fmt.Fprintf(streams.ErrOut, "nodeexec agent: the command was ended after --timeout %s (SIGTERM to its process group, SIGKILL after %s)\n", c.Duration("timeout"), nsenter.DefaultKillAfter)
	return true, ExitStatus{Code: ExitTimedOut}
}

// IsTerminal reports whether r is a terminal.
func IsTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(f.Fd())
}
