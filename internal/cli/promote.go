package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	ucli "github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/labels"
)

// promoteCommand promotes a manual rollout beyond its canaries.
func promoteCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:      "promote",
		Usage:     "let a NodeScript with manual promotion run beyond its canaries",
		ArgsUsage: "NAME",
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "to", Required: true, Usage: "\"all\", or a label `SELECTOR` of the nodes to promote to"},
		},
		Action: func(c *ucli.Context) error {
			nsName, to, err := promoteOptions(c)
			if err != nil {
				return err
			}
			_, dyn, err := watcherClients(c)
			if err != nil {
				return err
			}
			ns, err := nodescripts.Promote(c.Context, dyn, nsName, to)
			if err != nil {
				return err
			}
			fmt.Fprintf(streams.Out, "nodescript.nodeexec.io/%s promoted to %s\n", ns.Name, ns.Spec.Rollout.PromoteTo)
			return nil
		},
	}
}

// promoteOptions maps promote's NAME and --to onto the NodeScript and the
// nodes to promote to ("all" or a label selector), checked.
func promoteOptions(c *ucli.Context) (string, string, error) {
	nsName, err := nodeScriptArg(c, "promote")
	if err != nil {
		return "", "", err
	}
	if to := c.String("to"); to != "all" {
		_, err := labels.Parse(to)
		if err == nil && strings.TrimSpace(to) == "" {
			err = errors.New("empty")
		}
		if err != nil {
			return "", "", fmt.Errorf("--to %q: want \"all\" or a label selector such as pool=gpu (%v)", to, err)
		}
	}
	return nsName, c.String("to"), nil
}
