package spoolcmd

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeexec/nodeexec/nodeexec/spool"
)

// SpoolFlag is --spool of the agent's subcommands that run a command
// (nsenter, container-exec): the pod backends and the resident agents give
// it so that a run survives its exec stream being cut (nsenter.WithSpool).
func SpoolFlag() ucli.Flag {
	return &ucli.StringFlag{Name: "spool", Usage: "keep the command's output and exit status in `DIR` (" + spool.DefaultParent + "/NAME, which must not exist; any other path is refused) until `agent attach` has them: a cut stream loses nothing"}
}

// Spooled runs action, with --spool: the command's output goes to the spool
// and is streamed from there to streams (spool.Spool.Serve), and its exit
// status is recorded, so that `agent attach` can deliver the rest after
// the stream was cut. A stream that breaks (EPIPE) ends the streaming, not
// the command. When everything was streamed, the agent writes the spool's
// Trailer last on stderr: a client that does not read it knows the stream
// was cut. Without --spool it is action(streams).
func Spooled(c *ucli.Context, streams Streams, action func(Streams) error) error {
	dir := c.String("spool")
	if dir == "" {
		return action(streams)
	}
	// A write to a stdout whose reader went away fails with EPIPE instead of
	// killing the agent (and with it the command's output pipe).
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	defer signal.Stop(pipe)

	// Refused before anything is created or swept: a spool is
	// spool.DefaultParent/NAME, and the sweep looks there only.
	if err := spool.CheckDir(dir); err != nil {
		fmt.Fprintf(streams.ErrOut, "nodeexec agent: --spool: %v\n", err)
		return ExitStatus{Code: ExitFailed}
	}
	spool.Sweep(spool.DefaultParent, time.Now(), spool.DefaultRetention, spool.DefaultAbandoned)
	s, err := spool.Create(dir)
	if err != nil {
		fmt.Fprintf(streams.ErrOut, "nodeexec agent: --spool: %v\n", err)
		return ExitStatus{Code: ExitFailed}
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if end, err := s.Serve(c.Context, streams.Out, streams.ErrOut); err == nil {
			// Last: the mark by which the client knows it has everything.
			_, _ = streams.ErrOut.Write(end.Trailer())
		}
	}()
	err = action(Streams{In: streams.In, Out: s.Stdout(), ErrOut: s.Stderr()})
	code := 0
	var ec ExitStatus
	switch {
	case err == nil:
	case errors.As(err, &ec):
		code = ec.Code
	default:
		fmt.Fprintf(s.Stderr(), "nodeexec agent: %v\n", err)
		code = 2
	}
	if ferr := s.Finish(code); ferr != nil {
		fmt.Fprintf(streams.ErrOut, "nodeexec agent: %v\n", ferr)
	}
	<-served // until everything was streamed, the stream broke, or the agent was signalled
	if code == 0 {
		return nil
	}
	return ExitStatus{Code: code}
}

// Exit codes of `nodeexec agent attach`: the command's own status when it
// ended; these when the spool cannot give it.
const (
	// attachCheckMissing is --check's answer for a missing spool.
	attachCheckMissing = ExitSpoolMissing
	// attachFailed: the spool could not be streamed (the reason on
	// stderr); the client reports the outcome as unknown.
	attachFailed = ExitFailed
)

// attachCommand is `nodeexec agent attach --spool DIR`: what a client
// runs, over a new exec, after its stream was cut.
func attachCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:      "attach",
		Usage:     "stream a spooled command's output from the given offsets and exit with its status (what a client runs after its stream was cut)",
		UsageText: "attach --spool DIR [--stdout-offset BYTES] [--stderr-offset BYTES] | attach --spool DIR --check | attach --spool DIR --stop",
		Description: "Streams DIR/stdout and DIR/stderr (of `agent nsenter|container-exec --spool DIR`) from the offsets, following\n" +
			"them until the command ended and both were read to their end, and exits with the command's status.\n" +
			"With --check: exits 0 when DIR is a spool, 3 when it is not (the command never started there, or its\n" +
			"agent container was restarted). Exit status 125 when the spool cannot be streamed (the reason on stderr).\n" +
			"With --stop: ends the command (SIGTERM to the agent running it, which ends it as its --timeout does) and\n" +
			"exits 0 once its exit status is recorded (at once when it had ended), 3 when DIR is not a spool, 125\n" +
			"when it cannot be stopped (the reason on stderr).\n" +
			"DIR must be " + spool.DefaultParent + "/NAME (NAME one path element): any other path ends every mode at\n" +
			"once with exit status 125 and the reason on stderr. A directory is a spool only when it holds the\n" +
			"spool's own files (pid, stdout, stderr) and nothing else.",
		HideHelpCommand: true,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "spool", Required: true, Usage: "the spool `DIR` given to the command's --spool"},
			&ucli.Int64Flag{Name: "stdout-offset", Usage: "`BYTES` of stdout the client already has"},
			&ucli.Int64Flag{Name: "stderr-offset", Usage: "`BYTES` of stderr the client already has"},
			&ucli.BoolFlag{Name: "check", Usage: "only say, by the exit status, whether the spool exists"},
			&ucli.BoolFlag{Name: "stop", Usage: "end the spooled command and wait until it ended (what a client that gives up on the run runs)"},
		},
		Action: func(c *ucli.Context) error {
			dir := c.String("spool")
			if c.Bool("check") && c.Bool("stop") {
				return errors.New("--check and --stop: give one")
			}
			if err := spool.CheckDir(dir); err != nil {
				fmt.Fprintf(streams.ErrOut, "nodeexec agent attach: --spool: %v\n", err)
				return ExitStatus{Code: attachFailed}
			}
			if c.Bool("stop") {
				if err := spool.Stop(c.Context, dir, 0); err != nil {
					fmt.Fprintf(streams.ErrOut, "nodeexec agent attach: %v\n", err)
					if errors.Is(err, spool.ErrNotFound) {
						return ExitStatus{Code: attachCheckMissing}
					}
					return ExitStatus{Code: attachFailed}
				}
				return nil
			}
			if c.Bool("check") {
				if spool.Exists(dir) {
					return nil
				}
				fmt.Fprintf(streams.ErrOut, "nodeexec agent attach: %s: %v\n", dir, spool.ErrNotFound)
				return ExitStatus{Code: attachCheckMissing}
			}
			end, err := spool.Attach(c.Context, dir, c.Int64("stdout-offset"), c.Int64("stderr-offset"), streams.Out, streams.ErrOut, 0)
			if err != nil {
				fmt.Fprintf(streams.ErrOut, "nodeexec agent attach: %v: the command's outcome is unknown\n", err)
				return ExitStatus{Code: attachFailed}
			}
			_, _ = streams.ErrOut.Write(end.Trailer())
			if end.Code != 0 {
				return ExitStatus{Code: end.Code}
			}
			return nil
		},
	}
}
