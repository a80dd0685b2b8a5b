package cli

import (
	"fmt"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// rerunCommand asks the watcher to run a NodeScript's current spec again on some nodes.
func rerunCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:      "rerun",
		Usage:     "run a NodeScript's current spec again on nodes that ran it (the watcher forgets their record)",
		ArgsUsage: "NAME",
		UsageText: "rerun NAME (--node NODE... | --selector SEL | --all)",
		Description: "Every node is checked first: it must exist, be selected by the NodeScript and have run its current\n" +
			"spec; then each gets the annotation NAME.nodescript.nodeexec.io/rerun. The watcher runs it again there under\n" +
			"the rollout's pace, pause and maintenance window (after a run in progress), attempts counting on.",
		Flags: []ucli.Flag{
			&ucli.StringSliceFlag{Name: "node", Usage: "node `NAME` to run again (repeatable, or comma-separated)"},
			&ucli.StringFlag{Name: "selector", Aliases: []string{"l"}, Usage: "the nodes matching this label `SELECTOR` that ran the current spec"},
			&ucli.BoolFlag{Name: "all", Usage: "every node that ran the current spec"},
		},
		Action: func(c *ucli.Context) error {
			nsName, targets, err := rerunOptions(c)
			if err != nil {
				return err
			}
			cs, dyn, err := watcherClients(c)
			if err != nil {
				return err
			}
			res, err := nodescripts.Rerun(c.Context, cs, dyn, nsName, targets)
			if err != nil {
				return err
			}
			for _, n := range res.Nodes {
				fmt.Fprintf(streams.Out, "node/%s: nodescript %s spec %s runs again\n", n, nsName, res.Hash)
			}
			return nil
		},
	}
}

// rerunOptions maps rerun's NAME and flags onto the nodeexec.Targets to run again, checked.
func rerunOptions(c *ucli.Context) (string, nodeexec.Targets, error) {
	nsName, err := nodeScriptArg(c, "rerun")
	if err != nil {
		return "", nodeexec.Targets{}, err
	}
	targets := nodeexec.Targets{Nodes: splitCSV(c.StringSlice("node")), Selector: c.String("selector"), All: c.Bool("all")}
	if err := checkNodeNames(c, targets.Nodes); err != nil {
		return "", targets, err
	}
	if err := checkSelectorFlag(c); err != nil {
		return "", targets, err
	}
	if err := targets.Validate(); err != nil {
		return "", targets, err
	}
	return nsName, targets, nil
}
