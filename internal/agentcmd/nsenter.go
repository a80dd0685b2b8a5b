package agentcmd

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeexec/nodeexec/internal/spoolcmd"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nsenter"
)

// Exit codes of `nodeexec agent nsenter` when the command did not run, as
// util-linux nsenter and docker run have them; the reason is the last line
// on stderr. Otherwise the agent exits with the command's own code.
const (
	agentNsenterFailed      = spoolcmd.ExitFailed        // namespaces not entered, command not started or not waited for
	agentNsenterNotExecable = spoolcmd.ExitNotExecutable // the program is not executable
	agentNsenterNotFound    = spoolcmd.ExitNotFound      // the program is not in the target's filesystem
)

// agentNsenterCommand is `nodeexec agent nsenter --target PID [--namespaces
// LIST] -- CMD [ARGS...]`: nsenter.Cmd with the process's stdio and
// environment, exiting with the command's exit code.
func agentNsenterCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:      "nsenter",
		Usage:     "run a command inside the namespaces of a process (what the nsenter backend's agent runs)",
		UsageText: "nsenter --target PID [--namespaces mnt,uts,ipc,net,pid|all] [--timeout DURATION] -- COMMAND [ARGS...]",
		Description: "Enters the listed namespaces of process PID (as seen from this process's PID namespace) and runs\n" +
			"COMMAND there, looked up in the PATH of this environment inside the target's filesystem, with this\n" +
			"process's standard streams and environment, in the target's / when mnt is entered.\n" +
			"Exit status: the command's (128+N when killed by signal N); 125 when the namespaces could not be\n" +
			"entered or the command not started, 126 when it is not executable, 127 when it is not found (the\n" +
			"reason on stderr); 124 when --timeout ended it; 2 for bad usage. Needs root (CAP_SYS_ADMIN) and,\n" +
			"for node processes, hostPID.",
		HideHelpCommand: true,
		Flags: []ucli.Flag{
			&ucli.IntFlag{Name: "target", Aliases: []string{"t"}, Required: true, Usage: "`PID` of the process whose namespaces to enter (> 0)"},
			&ucli.StringFlag{Name: "namespaces", Value: nsenter.JoinNamespaces(nsenter.DefaultNamespaces()),
				Usage: "namespaces to enter: a comma-separated `LIST` of mnt, uts, ipc, net, pid, cgroup, user, or all (user only when the target shares ours)"},
			spoolcmd.TimeoutFlag(),
			spoolcmd.SpoolFlag(),
			&ucli.BoolFlag{Name: strings.TrimPrefix(agent.EnvFromAgentFlag, "--"), Usage: "add the variables of this agent's own " + agent.ExecEnvVar +
				" (a JSON object, set by a resident agent from its client's request) to COMMAND's environment"},
		},
		Action: func(c *ucli.Context) error {
			return spoolcmd.Spooled(c, streams, func(streams Streams) error {
				target := c.Int("target")
				if target <= 0 {
					return fmt.Errorf("--target %d: give the PID (> 0) of the process whose namespaces to enter", target)
				}
				nss, err := nsenter.ParseNamespaces(c.String("namespaces"))
				if err != nil {
					return fmt.Errorf("--namespaces: %w", err)
				}
				argv := c.Args().Slice()
				if len(argv) == 0 || argv[0] == "" {
					return errors.New("no command: give it after --, as in `nsenter --target 1 -- hostname`")
				}
				env, err := nsenterEnv(c)
				if err != nil {
					return err
				}
				cmd := nsenter.Cmd{
					Target:     target,
					Namespaces: nss,
					Args:       argv,
					Env:        env,
					Stdin:      streams.In,
					Stdout:     streams.Out,
					Stderr:     streams.ErrOut,
				}
				ctx, cancel, err := agentTimeout(c, &cmd)
				if err != nil {
					return err
				}
				defer cancel()
				code, err := cmd.Run(ctx)
				if err != nil {
					if ok, exit := spoolcmd.TimeoutExit(ctx, c, streams); ok {
						return exit
					}
					fmt.Fprintf(streams.ErrOut, "nodeexec agent nsenter: %v\n", err)
					switch {
					case errors.Is(err, exec.ErrNotFound):
						return ExitStatus{Code: agentNsenterNotFound}
					case errors.Is(err, nsenter.ErrNotExecutable):
						return ExitStatus{Code: agentNsenterNotExecable}
					}
					return ExitStatus{Code: agentNsenterFailed}
				}
				if code != 0 {
					return ExitStatus{Code: code}
				}
				return nil
			})
		},
	}
}

// nsenterEnv is nsenter's command environment: nil (the agent's own) or,
// with --env-from-agent, the agent's own without ExecEnvVar, and the
// variables it carries.
func nsenterEnv(c *ucli.Context) ([]string, error) {
	if !c.Bool(strings.TrimPrefix(agent.EnvFromAgentFlag, "--")) {
		return nil, nil
	}
	vars, err := commandEnv(c)
	if err != nil {
		return nil, err
	}
	env := make([]string, 0, len(os.Environ())+len(vars))
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, set := vars[k]; !set && k != agent.ExecEnvVar {
			env = append(env, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		env = append(env, k+"="+vars[k])
	}
	return env, nil
}

// agentTimeout applies --timeout to cmd: it returns the context to run cmd
// with, ending at --timeout with spoolcmd.ErrTimeout as its cause, and puts the
// command in a process group of its own when its stdin is not a terminal
// (see nsenter.Cmd.ProcessGroup).
func agentTimeout(c *ucli.Context, cmd *nsenter.Cmd) (context.Context, context.CancelFunc, error) {
	d := c.Duration("timeout")
	if d < 0 {
		return nil, nil, fmt.Errorf("--timeout %s: give a positive duration such as 35s, or 0 for no limit", d)
	}
	if d == 0 {
		ctx, cancel := context.WithCancel(c.Context)
		return ctx, cancel, nil
	}
	cmd.ProcessGroup = !spoolcmd.IsTerminal(cmd.Stdin)
	ctx, cancel := context.WithTimeoutCause(c.Context, d, spoolcmd.ErrTimeout)
	return ctx, cancel, nil
}
