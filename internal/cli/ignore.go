package cli

import (
	"fmt"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	ucli "github.com/urfave/cli/v2"
)

// ignoreCommand makes a NodeScript ignore (or no longer ignore) nodes.
func ignoreCommand(streams Streams, ignore bool) *ucli.Command {
	name, usage, done := "unignore", "let a NodeScript select nodes it was told to ignore again", "no longer ignored"
	if ignore {
		name, usage, done = "ignore", "leave nodes out of a NodeScript's rollout without editing its spec", "ignored"
	}
	return &ucli.Command{
		Name:      name,
		Usage:     usage,
		ArgsUsage: "NAME",
		UsageText: name + " NAME --node NODE...",
		Description: "Sets (ignore) or removes (unignore) the annotation NAME.nodescript.nodeexec.io/ignore on each node,\n" +
			"with who asked as its value. An ignored node is treated as in spec.excludeNodes; its record is kept.",
		Flags: []ucli.Flag{
			&ucli.StringSliceFlag{Name: "node", Usage: "node `NAME` (repeatable, or comma-separated)"},
		},
		Action: func(c *ucli.Context) error {
			nsName, nodes, err := ignoreOptions(c, name)
			if err != nil {
				return err
			}
			cs, dyn, err := watcherClients(c)
			if err != nil {
				return err
			}
			who, err := nodescripts.SetIgnored(c.Context, cs, dyn, nsName, nodes, ignore)
			if err != nil {
				return err
			}
			if who.Unknown != "" {
				fmt.Fprintf(streams.ErrOut, "note: recorded as asked by %q: %s\n", who.User, who.Unknown)
			}
			for _, n := range nodes {
				fmt.Fprintf(streams.Out, "node/%s %s by nodescript %s\n", n, done, nsName)
			}
			return nil
		},
	}
}

// ignoreOptions maps the NAME and --node of command name (ignore or
// unignore) onto the NodeScript and the nodes, checked.
func ignoreOptions(c *ucli.Context, name string) (string, []string, error) {
	nsName, err := nodeScriptArg(c, name)
	if err != nil {
		return "", nil, err
	}
	nodes := splitCSV(c.StringSlice("node"))
	if !c.IsSet("node") {
		return "", nil, fmt.Errorf("%s needs --node NODE: name the nodes (repeat --node, or separate them with commas)", name)
	}
	if err := checkNodeNames(c, nodes); err != nil {
		return "", nil, err
	}
	return nsName, nodes, nil
}
