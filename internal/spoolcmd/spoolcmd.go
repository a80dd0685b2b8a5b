// Package spoolcmd is nodeexec-spool, the small program that runs inside
// the user's image for the debugpod backend: `agent run` (a command run as
// it is, under the spool and its end mark), `agent attach` (a spool
// streamed after a cut exec stream; --check, --stop) and `agent copy` (the
// agent container putting the program in the pod). It imports no client
// library, so that the binary is a few megabytes and starts in about a
// millisecond where the nodeexec binary needs tens (package initialisation
// of client-go and kubectl) and weighs about 80 MB to copy.
//
// The agent image carries it at /usr/local/bin/nodeexec-spool beside
// nodeexec (BinaryName); cmd/nodeexec-spool is its main package. Its
// command lines are the nodeexec binary's (`BIN agent run --spool DIR --
// CMD`, package nodeexec/agent), and the nodeexec binary mounts the same
// commands under its hidden `agent` command (package agentcmd), so either
// binary runs what the other would.
package spoolcmd

import (
	"fmt"
	"io"
	"runtime/debug"

	ucli "github.com/urfave/cli/v2"
)

// BinaryName is the program's file name, in the agent image beside the
// nodeexec binary (/usr/local/bin/nodeexec-spool).
const BinaryName = "nodeexec-spool"

// Streams are the process's standard streams.
type Streams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
}

// ExitStatus carries the process's exit status out of an Action without
// printing: the command's own exit code, or one of ExitFailed,
// ExitNotExecutable, ExitNotFound, ExitTimedOut.
type ExitStatus struct{ Code int }

func (e ExitStatus) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// Exit codes when the command did not run or did not end by itself, as
// util-linux nsenter, docker run and timeout(1) have them; the reason is the
// last line on stderr. Otherwise the program exits with the command's own
// code.
const (
	// ExitTimedOut: --timeout ended the command.
	ExitTimedOut = 124
	// ExitFailed: the command was not started or not waited for (and
	// `attach`: the spool could not be streamed).
	ExitFailed = 125
	// ExitNotExecutable: the program is not executable.
	ExitNotExecutable = 126
	// ExitNotFound: the program is not in the container's filesystem.
	ExitNotFound = 127
	// ExitSpoolMissing: `attach --check` or `--stop` on a directory that
	// is not a spool (agent.SpoolMissingExitCode).
	ExitSpoolMissing = 3
)

// Commands are run, attach and copy, the subcommands of `agent`. Errors
// other than ExitStatus are usage errors: the caller prints them and exits 2.
func Commands(streams Streams) []*ucli.Command {
	return []*ucli.Command{
		attachCommand(streams),
		runCommand(streams),
		copyCommand(),
	}
}

// App is the nodeexec-spool program: `agent` with Commands, and `version`
// (the module's version from the build information), which is what the
// debugpod backend runs to learn that the copy is in place.
func App(streams Streams) *ucli.App {
	return &ucli.App{
		Name:            BinaryName,
		Usage:           "run a command under nodeexec's spool in this container (what nodeexec's debugpod backend runs in the user's image)",
		HideHelpCommand: true,
		Writer:          streams.ErrOut,
		ErrWriter:       streams.ErrOut,
		ExitErrHandler:  func(*ucli.Context, error) {},
		Commands: []*ucli.Command{
			{Name: "agent", Usage: "the in-pod commands", HideHelpCommand: true, Subcommands: Commands(streams)},
			{
				Name:  "version",
				Usage: "print the version",
				Flags: []ucli.Flag{&ucli.BoolFlag{Name: "client", Usage: "accepted for the nodeexec binary's command line; there is no server to ask"}},
				Action: func(*ucli.Context) error {
					v := "(devel)"
					if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
						v = bi.Main.Version
					}
					_, err := fmt.Fprintf(streams.Out, "%s %s\n", BinaryName, v)
					return err
				},
			},
		},
	}
}
