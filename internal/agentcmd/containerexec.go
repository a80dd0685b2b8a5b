package agentcmd

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeexec/nodeexec/internal/envflag"
	"github.com/nodeexec/nodeexec/internal/spoolcmd"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/cri"
	"github.com/nodeexec/nodeexec/nsenter"
)

// agentContainerExecCommand is `nodeexec agent container-exec`, run by the
// runtime backend inside its agent pod (or a resident agent): CRI lookup of
// the container's PID, then nsenter into that PID's namespaces.
func agentContainerExecCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:      "container-exec",
		Usage:     "run a command inside a container's namespaces, found by its ID through the node's container runtime",
		UsageText: "container-exec --container-id ID [--runtime-endpoint PATH...] [--namespaces LIST] [-e KEY=VALUE...] [--timeout DURATION] -- COMMAND [ARGS...]",
		Description: "Asks the container runtime (CRI ContainerStatus, verbose) for the PID of the container, probing\n" +
			"--runtime-endpoint paths then the well-known sockets, all under --host-root; when none answers, scans\n" +
			"/proc/*/cgroup for the ID. Then enters the PID's namespaces (mount included: the container's own root\n" +
			"filesystem) and runs COMMAND there with the container's environment (plus --env-from-agent's and -e's),\n" +
			"exiting with its code.\n" +
			"Needs root, the host's PID namespace and the host's filesystem (the runtime backend's pod has them).",
		HideHelpCommand: true,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "container-id", Required: true, Usage: "container `ID`, as in status.containerStatuses[].containerID (containerd://ID, cri-o://ID or bare)"},
			&ucli.StringSliceFlag{Name: "runtime-endpoint", Usage: "runtime socket `PATH` on the host, tried before the well-known ones (repeatable)"},
			&ucli.StringFlag{Name: "host-root", Usage: "where the host's root filesystem is visible (default: /host when it exists, else /proc/1/root)"},
			&ucli.StringFlag{Name: "namespaces", Value: "mnt,uts,ipc,net,pid", Usage: "namespaces of the container to enter: a comma-separated `LIST` of mnt, uts, ipc, net, pid, cgroup, user, or all"},
			&ucli.BoolFlag{Name: "no-proc-fallback", Usage: "do not scan /proc/*/cgroup when no runtime socket answers"},
			envflag.Flag("environment variable `KEY=VALUE` added to the container's; repeat -e for several (never split on commas)"),
			&ucli.BoolFlag{Name: strings.TrimPrefix(agent.EnvFromAgentFlag, "--"), Usage: "add the variables of this agent's own " + agent.ExecEnvVar +
				" environment variable (a JSON object of names to values) to the container's, before -e: how the runtime backend and the resident agents pass -e, never on the command line"},
			&ucli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "say on stderr which runtime socket (or the /proc scan) found the container"},
			spoolcmd.TimeoutFlag(),
			spoolcmd.SpoolFlag(),
		},
		Action: func(c *ucli.Context) error {
			return spoolcmd.Spooled(c, streams, func(streams Streams) error {
				argv := c.Args().Slice()
				if len(argv) == 0 || argv[0] == "" {
					return agentFailure(streams, errors.New("no command: give it after --"))
				}
				nss, err := nsenter.ParseNamespaces(c.String("namespaces"))
				if err != nil {
					return agentFailure(streams, fmt.Errorf("--namespaces: %w", err))
				}
				extra, err := commandEnv(c)
				if err != nil {
					return agentFailure(streams, err)
				}
				root := c.String("host-root")
				if root == "" {
					root = defaultHostRoot()
				}
				res, err := cri.Lookup(c.Context, cri.Options{
					ContainerID:    c.String("container-id"),
					Endpoints:      c.StringSlice("runtime-endpoint"),
					HostRoot:       root,
					NoProcFallback: c.Bool("no-proc-fallback"),
				})
				if err != nil {
					return agentFailure(streams, err)
				}
				if c.Bool("verbose") {
					if res.Method == cri.MethodCRI {
						fmt.Fprintf(streams.ErrOut, "container %s: PID %d from %s at %s\n", res.ID, res.PID, res.Runtime, res.Endpoint)
					} else {
						fmt.Fprintf(streams.ErrOut, "container %s: PID %d from the /proc/*/cgroup scan (no runtime socket answered)\n", res.ID, res.PID)
					}
				}
				cmd := nsenter.Cmd{
					Target:     res.PID,
					Namespaces: nss,
					Args:       argv,
					Env:        mergeEnv(containerEnv(res.PID), extra),
					Stdin:      streams.In,
					Stdout:     streams.Out,
					Stderr:     streams.ErrOut,
				}
				ctx, cancel, err := agentTimeout(c, &cmd)
				if err != nil {
					return agentFailure(streams, err)
				}
				defer cancel()
				code, err := cmd.Run(ctx)
				if err != nil {
					if ok, exit := spoolcmd.TimeoutExit(ctx, c, streams); ok {
						return exit
					}
					return agentFailure(streams, fmt.Errorf("container %s (PID %d): %w", res.ID, res.PID, err))
				}
				if code != 0 {
					return ExitStatus{Code: code}
				}
				return nil
			})
		},
	}
}

// commandEnv is the variables container-exec adds to the container's: those
// of the agent's ExecEnvVar with --env-from-agent, then -e's.
func commandEnv(c *ucli.Context) (map[string]string, error) {
	extra, err := envflag.Parse(envflag.Values(c))
	if err != nil || !c.Bool(strings.TrimPrefix(agent.EnvFromAgentFlag, "--")) {
		return extra, err
	}
	v, ok := os.LookupEnv(agent.ExecEnvVar)
	if !ok {
		return nil, fmt.Errorf("%s: this agent's environment has no %s", agent.EnvFromAgentFlag, agent.ExecEnvVar)
	}
	env, err := agent.DecodeExecEnv(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", agent.EnvFromAgentFlag, err)
	}
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, extra)
	return env, nil
}

// agentFailure prints err on stderr as the last line and exits with
// agent.ErrorExitCode (127 when the program was not found), which
// the backend turns back into an error wrapping agent.ErrNotRun.
func agentFailure(streams Streams, err error) error {
	fmt.Fprintf(streams.ErrOut, "nodeexec agent: %v\n", err)
	if errors.Is(err, exec.ErrNotFound) {
		return ExitStatus{Code: 127}
	}
	return ExitStatus{Code: agent.ErrorExitCode}
}

// defaultHostRoot is /host when the agent's pod mounts the host there, else
// the host's root as seen through its PID 1 (the agent runs with hostPID).
func defaultHostRoot() string {
	if fi, err := os.Stat("/host"); err == nil && fi.IsDir() {
		return "/host"
	}
	return "/proc/1/root"
}

// containerEnv is the environment of process pid (the container's, as
// `kubectl exec` gives it), or a default PATH when it cannot be read.
func containerEnv(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil || len(b) == 0 {
		return []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	var env []string
	for kv := range strings.SplitSeq(strings.TrimRight(string(b), "\x00"), "\x00") {
		if kv != "" {
			env = append(env, kv)
		}
	}
	return env
}

// mergeEnv returns env with the variables of extra set (replacing same-named ones).
func mergeEnv(env []string, extra map[string]string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := extra[k]; !ok {
			out = append(out, kv)
		}
	}
	for k, v := range extra {
		out = append(out, k+"="+v)
	}
	return out
}
