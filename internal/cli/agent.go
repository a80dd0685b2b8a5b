package cli

import (
	"fmt"
	"slices"
	"time"

	ucli "github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodeexec/nodeexec/internal/agentcmd"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/resident"
)

// agentExtraCommands are the `nodeexec agent` subcommands of the runtime
// backend and the resident agents: container-exec, install, uninstall, hold, attach
// (registered in cli.go as agentCommand(streams, agentExtraCommands(streams)...)).

func residentFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "namespace", Value: resident.DefaultNamespace, Usage: "namespace of the resident agents (created by install unless it exists; deleted by uninstall only if install created it)"},
		&ucli.DurationFlag{Name: "timeout", Value: resident.DefaultTimeout, Usage: "how long to wait for the agents to be available (install) or gone (uninstall)"},
	}
}

func agentInstallCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:  "install",
		Usage: "install resident agents: a privileged hostPID DaemonSet, so that runs with --use-resident run in it (through pods/portforward) instead of creating a pod",
		Description: "Creates the namespace (default " + resident.DefaultNamespace + ", Pod Security level privileged) unless nodeexec already\n" +
			"manages it, and the DaemonSet " + resident.DaemonSetName + ", labelled app.kubernetes.io/managed-by=nodeexec and\n" +
			"app.kubernetes.io/component=agent, and waits until an agent is available on every node. Running it again updates the\n" +
			"DaemonSet. An image the nodes cannot pull fails it within seconds, naming the image and the registry's reason, and\n" +
			"rolls back what it created. `nodeexec agent uninstall` removes what it created, nothing else.\n" +
			"--transport exec: the agents do not listen; every run reaches them over pods/exec, so the API server's audit\n" +
			"log records each command line with its user and pod (with portforward, the default and fastest, it records\n" +
			"the port-forward, not the command).\n" +
			"--transport recorded: port-forward, but before each command the client creates a run record (a Lease\n" +
			"nodeexec-record-... in the namespace naming the node and the command line), which the API server's audit log\n" +
			"attributes to the user; the agent reads and deletes it (service account " + resident.RecordServiceAccount + ": get and delete\n" +
			"leases there, nothing else) and refuses a command without one. Record Lease creations at the Request level in\n" +
			"the audit policy to keep the command lines (docs/security.md). Users need create and delete on leases there.",
		Flags: append(residentFlags(),
			&ucli.StringFlag{Name: "transport", Value: string(resident.TransportPortForward), Usage: "how runs reach the agents: portforward (fastest; the audit log records the port-forward), recorded (port-forward, each command first in a run record the audit log attributes to its user) or exec (the audit log records every command line)"},
			&ucli.StringFlag{Name: "priority-class", Usage: "priorityClassName of the agent pods (e.g. system-node-critical)"},
			&ucli.StringFlag{Name: "agent-image", Value: envOr("NODEEXEC_AGENT_IMAGE", agent.DefaultImage), Usage: "the agent image (default: $NODEEXEC_AGENT_IMAGE when set and not empty)"},
			&ucli.StringFlag{Name: "image-pull-policy", Value: string(corev1.PullIfNotPresent), Usage: "Always, IfNotPresent or Never"},
			&ucli.StringSliceFlag{Name: "image-pull-secret", Usage: "secret `NAME` in the namespace for pulling the image (repeatable)"},
		),
		Action: func(c *ucli.Context) error {
			if err := checkResidentFlags(c, true); err != nil {
				return err
			}
			transport := resident.Transport(c.String("transport"))
			switch transport {
			case resident.TransportPortForward, resident.TransportExec, resident.TransportRecorded:
			default:
				return fmt.Errorf("--transport %q: want %s, %s or %s", c.String("transport"), resident.TransportPortForward, resident.TransportRecorded, resident.TransportExec)
			}
			cs, _, _, err := client(c)
			if err != nil {
				return err
			}
			ctx := withLogger(c.Context, streams.ErrOut, c.Int("v"))
			if err := checkInstallPlatforms(ctx, streams.ErrOut, cs, c.String("agent-image")); err != nil {
				return err
			}
			start := time.Now()
			err = resident.Install(ctx, cs, resident.Options{
				Namespace:         c.String("namespace"),
				Image:             c.String("agent-image"),
				ImagePullPolicy:   corev1.PullPolicy(c.String("image-pull-policy")),
				ImagePullSecrets:  c.StringSlice("image-pull-secret"),
				PriorityClassName: c.String("priority-class"),
				Timeout:           c.Duration("timeout"),
				Transport:         transport,
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
			ns := c.String("namespace")
			// What is there decides what is said; uninstalling nothing is
			// not an error (uninstall is idempotent).
			_, dsErr := cs.AppsV1().DaemonSets(ns).Get(ctx, resident.DaemonSetName, metav1.GetOptions{})
			nsObj, nsErr := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			agentLabels, _ := labels.Parse(resident.Selector())
			agentNS := nsErr == nil && agentLabels.Matches(labels.Set(nsObj.Labels))
			switch {
			case apierrors.IsNotFound(nsErr):
				fmt.Fprintf(streams.ErrOut, "no resident agents: namespace %s does not exist; nothing removed\n", ns)
				return nil
			case apierrors.IsNotFound(dsErr) && nsErr == nil && !agentNS:
				fmt.Fprintf(streams.ErrOut, "no resident agents in namespace %s (no daemonset %s); nothing removed\n", ns, resident.DaemonSetName)
				return nil
			}
			if err := resident.Uninstall(ctx, cs, resident.Options{Namespace: ns, Timeout: c.Duration("timeout")}); err != nil {
				return err
			}
			if apierrors.IsNotFound(dsErr) {
				fmt.Fprintf(streams.ErrOut, "namespace %s removed (agent install had created it; it held no agents)\n", ns)
				return nil
			}
			fmt.Fprintf(streams.ErrOut, "resident agents removed (namespace %s)\n", ns)
			return nil
		},
	}
}

// agentCommand is `nodeexec agent`: install and uninstall of the resident
// agents for users, and (hidden from help and completion, still callable)
// what runs inside nodeexec's agent pods (package internal/agentcmd).
func agentCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:            "agent",
		Usage:           "install or uninstall the resident agents (a DaemonSet that makes a run one port-forward request)",
		HideHelpCommand: true,
		Subcommands: userFacing(append(agentcmd.Commands(agentcmd.Streams(streams)),
			agentInstallCommand(streams), agentUninstallCommand(streams)), "install", "uninstall"),
	}
}

// userFacing hides from help and completion every command of cmds not
// named in visible (they stay callable) and returns cmds.
func userFacing(cmds []*ucli.Command, visible ...string) []*ucli.Command {
	for _, c := range cmds {
		c.Hidden = !slices.Contains(visible, c.Name)
	}
	return cmds
}
