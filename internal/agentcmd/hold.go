package agentcmd

import (
	"context"
	"fmt"

	ucli "github.com/urfave/cli/v2"
)

// agentHoldCommand is the main process of the agent pods (agent.HoldArgv)
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
