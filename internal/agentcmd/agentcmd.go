// Package agentcmd is the program that runs inside nodeexec's agent pods:
// the subcommands of the nodeexec binary's hidden `agent` command that the
// backends' command lines (package nodeexec/agent) call — nsenter (enter the
// node's namespaces with package nsenter and run a command), container-exec
// (find a container through the container runtime and enter its namespaces),
// hold (the pods' main process), serve (the resident agents' main
// process, which runs those command lines for port-forwarded clients), and
// nodeexec-spool's (package spoolcmd): attach (stream a run's spool after a
// cut exec stream), run and copy (the debugpod backend). They are not for people: the user-facing CLI (package
// internal/cli) mounts them under `nodeexec agent`, hidden from help and
// completion, beside its own `agent install` and `agent uninstall`.
package agentcmd

import (
	ucli "github.com/urfave/cli/v2"

	"github.com/nodeexec/nodeexec/internal/spoolcmd"
)

// Streams are the agent process's standard streams.
type Streams = spoolcmd.Streams

// ExitStatus carries the agent's process exit status out of an Action
// without printing: the command's own exit code, or one of the agent's
// (125 the command did not run, 126 not executable, 127 not found).
type ExitStatus = spoolcmd.ExitStatus

// Commands are the in-pod subcommands: nsenter, container-exec, hold,
// serve and warm, then nodeexec-spool's attach, run and copy
// (spoolcmd.Commands). Errors other than ExitStatus are usage errors: the
// caller prints them and exits 2.
func Commands(streams Streams) []*ucli.Command {
	return append([]*ucli.Command{
		agentNsenterCommand(streams),
		agentContainerExecCommand(streams),
		agentHoldCommand(),
		agentServeCommand(),
		agentWarmCommand(streams),
	}, spoolcmd.Commands(streams)...)
}
