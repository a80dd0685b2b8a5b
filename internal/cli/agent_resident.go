package cli

import (
	"context"
	"fmt"
	"time"

	ucli "github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodeexec/nodeexec/nodeexec/resident"
	"github.com/nodeexec/nodeexec/nsenter"
)

// agentExtraCommands are the `nodeexec agent` subcommands of the runtime
// backend and the resident agents: container-exec, install, uninstall, hold, attach
// (registered in cli.go as agentCommand(streams, agentExtraCommands(streams)...)).
func agentExtraCommands(streams Streams) []*ucli.Command {
	return []*ucli.Command{
		agentContainerExecCommand(streams),
		agentInstallCommand(streams),
		agentUninstallCommand(streams),
		agentHoldCommand(),
		agentAttachCommand(streams),
	}
}

func residentFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "namespace", Value: resident.DefaultNamespace, Usage: "namespace of the resident agents (created by install unless it exists; deleted by uninstall only if install created it)"},
		&ucli.DurationFlag{Name: "timeout", Value: resident.DefaultTimeout, Usage: "how long to wait for the agents to be available (install) or gone (uninstall)"},
	}
}

func agentInstallCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:  "install",
		Usage: "install resident agents: a privileged hostPID DaemonSet, so that runs with --use-resident exec into it instead of creating a pod",
		Description: "Creates the namespace (default " + resident.DefaultNamespace + ", Pod Security level privileged) unless nodeexec already\n" +
			"manages it, and the DaemonSet " + resident.DaemonSetName + ", labelled app.kubernetes.io/managed-by=nodeexec and\n" +
			"app.kubernetes.io/component=agent, and waits until an agent is available on every node. Running it again updates the\n" +
			"DaemonSet. An image the nodes cannot pull fails it within seconds, naming the image and the registry's reason, and\n" +
			"rolls back what it created. `nodeexec agent uninstall` removes what it created, nothing else.",
		Flags: append(residentFlags(),
			&ucli.StringFlag{Name: "priority-class", Usage: "priorityClassName of the agent pods (e.g. system-node-critical)"},
			&ucli.StringFlag{Name: "agent-image", Value: envOr("NODEEXEC_AGENT_IMAGE", nsenter.DefaultAgentImage), Usage: "the agent image (default: $NODEEXEC_AGENT_IMAGE when set and not empty)"},
			&ucli.StringFlag{Name: "image-pull-policy", Value: string(corev1.PullIfNotPresent), Usage: "Always, IfNotPresent or Never"},
			&ucli.StringSliceFlag{Name: "image-pull-secret", Usage: "secret `NAME` in the namespace for pulling the image (repeatable)"},
		),
		Action: func(c *ucli.Context) error {
			if err := checkResidentFlags(c, true); err != nil {
				return err
			}
			cs, _, _, err := client(c)
			if err != nil {
				return err
			}
			ctx := withLogger(c.Context, streams.ErrOut, c.Int("v"))
			start := time.Now()
			err = resident.Install(ctx, cs, resident.Options{
				Namespace:         c.String("namespace"),
				Image:             c.String("agent-image"),
				ImagePullPolicy:   corev1.PullPolicy(c.String("image-pull-policy")),
				ImagePullSecrets:  c.StringSlice("image-pull-secret"),
				PriorityClassName: c.String("priority-class"),
				Timeout:           c.Duration("timeout"),
			})
			if h := pullHint(err, "agent install", ""); h != "" {
				return fmt.Errorf("%w\n%s", err, h)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(streams.ErrOut, "resident agents available on every node (namespace %s, %s)\n", c.String("namespace"), time.Since(start).Round(10*time.Millisecond))
			return nil
		},
	}
}

func agentUninstallCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:  "uninstall",
		Usage: "remove the resident agents: the DaemonSet, its pods and the namespace install created",
		Flags: residentFlags(),
		Action: func(c *ucli.Context) error {
			if err := checkResidentFlags(c, false); err != nil {
				return err
			}
			cs, _, _, err := client(c)
			if err != nil {
				return err
			}
			ctx := withLogger(c.Context, streams.ErrOut, c.Int("v"))
			if err := resident.Uninstall(ctx, cs, resident.Options{Namespace: c.String("namespace"), Timeout: c.Duration("timeout")}); err != nil {
				return err
			}
			fmt.Fprintf(streams.ErrOut, "resident agents removed (namespace %s)\n", c.String("namespace"))
			return nil
		},
	}
}

// agentHoldCommand is the main process of the agent pods (nsenter.HoldArgv)
// and of the resident agents: it does nothing until SIGTERM or SIGINT
// (which cancel the command's context) or until --duration has passed, then
// exits 0. It replaces `sleep`, so the agent image needs nothing but the
// nodeexec binary.
func agentHoldCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "hold",
		Usage:     "wait for SIGTERM, or --duration (the agent pods' main process)",
		UsageText: "hold [--duration 630s]",
		Hidden:    true,
		Flags: []ucli.Flag{
			&ucli.DurationFlag{Name: "duration", Usage: "exit 0 after this long (0: wait for SIGTERM only)"},
		},
		Action: func(c *ucli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("hold takes no arguments (got %q): give the time as --duration 630s", c.Args().Slice())
			}
			d := c.Duration("duration")
			if d < 0 {
				return fmt.Errorf("--duration %s: give a positive duration such as 630s, or 0 to wait for SIGTERM only", d)
			}
			ctx := c.Context
			if d > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, d)
				defer cancel()
			}
			<-ctx.Done()
			return nil
		},
	}
}
