package cli

import (
	"fmt"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	ucli "github.com/urfave/cli/v2"
)

// pauseCommand sets (pause) or clears (resume) a NodeScript's spec.paused.
func pauseCommand(streams Streams, paused bool) *ucli.Command {
	name, usage, done := "resume", "let a paused NodeScript start runs again", "resumed"
	if paused {
		name, usage, done = "pause", "start nothing new for a NodeScript (runs in progress finish)", "paused"
	}
	return &ucli.Command{
		Name:      name,
		Usage:     usage,
		ArgsUsage: "NAME",
		Action: func(c *ucli.Context) error {
			nsName, err := nodeScriptArg(c, name)
			if err != nil {
				return err
			}
			_, dyn, err := watcherClients(c)
			if err != nil {
				return err
			}
			ns, err := nodescripts.SetPaused(c.Context, dyn, nsName, paused)
			if err != nil {
				return err
			}
			fmt.Fprintf(streams.Out, "nodescript.nodeexec.io/%s %s\n", ns.Name, done)
			return nil
		},
	}
}
