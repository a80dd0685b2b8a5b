package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	ucli "github.com/urfave/cli/v2"
)

// applyCommand creates or updates NodeScripts from a file.
func applyCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:      "apply",
		Usage:     "create or update NodeScripts (and MaintenanceBudgets, MaintenanceCalendars) from a YAML file (the watcher applies them to nodes)",
		ArgsUsage: " ",
		Description: "Every document is validated first (fields named in each error), then accepted by the API\n" +
			"server in a dry-run; only then is any applied (server-side apply), so nothing is half-applied.",
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "filename", Aliases: []string{"f"}, Required: true, Usage: "the NodeScript YAML `FILE` (- for standard input)"},
		},
		Action: func(c *ucli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("apply takes no arguments (got %q): give the file with -f", c.Args().Slice())
			}
			var in io.Reader = streams.In
			if f := c.String("filename"); f != "-" {
				file, err := os.Open(f)
				if err != nil {
					return fmt.Errorf("--filename: %w", err)
				}
				defer file.Close()
				in = file
			}
			m, err := nodescripts.ParseAllManifests(in)
			if err != nil {
				return err
			}
			_, dyn, err := watcherClients(c)
			if err != nil {
				return err
			}
			return applyAll(c.Context, streams.Out, dyn, m)
		},
	}
}
