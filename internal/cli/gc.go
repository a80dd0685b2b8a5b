package cli

import (
	"fmt"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

// gcCommand deletes pods left by runs whose client was killed.
func gcCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:  "gc",
		Usage: "delete nodeexec pods whose deadline has passed (left by a killed client)",
		Description: "A run deletes its pod on success, failure, timeout and Ctrl-C. A client killed outright cannot:\n" +
			"the pod's activeDeadlineSeconds stops it, and gc deletes the object. Pods without a deadline\n" +
			"(resident agents) are never touched. Prints each pod it deleted.",
		Flags: []ucli.Flag{
			&ucli.BoolFlag{Name: "all-namespaces", Aliases: []string{"A"}, Usage: "every namespace instead of -n's"},
		},
		Action: func(c *ucli.Context) error {
			if err := noArgs(c, ": it collects every expired nodeexec pod of -n's namespace, or of all with -A"); err != nil {
				return err
			}
			client, _, ns, err := client(c)
			if err != nil {
				return err
			}
			if c.Bool("all-namespaces") {
				ns = ""
			}
			deleted, err := podexec.CollectGarbage(c.Context, client, ns, time.Now())
			for _, p := range deleted {
				fmt.Fprintf(streams.Out, "pod/%s deleted\n", p)
			}
			return err
		},
	}
}
