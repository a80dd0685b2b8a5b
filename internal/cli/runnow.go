package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// runNowCommand lets a NodeScript start runs outside its maintenance window for a while.
func runNowCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:      "run-now",
		Usage:     "let a NodeScript start runs outside its maintenance window for a while (or --cancel)",
		ArgsUsage: "NAME",
		Description: "Sets the annotations " + v1alpha1.AnnotationRunNow + " (until when, RFC 3339) and " + v1alpha1.AnnotationRunNowBy + " (who asked,\n" +
			"from a SelfSubjectReview) on the NodeScript; the watcher records them in an Event and removes them once expired.",
		Flags: []ucli.Flag{
			&ucli.DurationFlag{Name: "for", Value: nodescripts.DefaultRunNowFor, Usage: "how long runs may start outside the window (at most " + nodescripts.MaxRunNowFor.String() + ", a week)"},
			&ucli.BoolFlag{Name: "cancel", Usage: "remove the override: runs start only inside the window again"},
		},
		OnUsageError: durationLimits(map[string]time.Duration{"for": nodescripts.MaxRunNowFor}),
		Action: func(c *ucli.Context) error {
			nsName, o, err := runNowOptions(c)
			if err != nil {
				return err
			}
			cs, dyn, err := watcherClients(c)
			if err != nil {
				return err
			}
			res, err := nodescripts.RunNow(c.Context, cs, dyn, nsName, o)
			if err != nil {
				return err
			}
			if o.Cancel {
				fmt.Fprintf(streams.Out, "nodescript.nodeexec.io/%s: run-now override removed\n", nsName)
				return nil
			}
			if res.By.Unknown != "" {
				fmt.Fprintf(streams.ErrOut, "note: recorded as asked by %q: %s\n", res.By.User, res.By.Unknown)
			}
			fmt.Fprintf(streams.Out, "nodescript.nodeexec.io/%s: runs may start outside the maintenance window until %s (asked by %s)\n",
				nsName, res.Until.Format(time.RFC3339), res.By.User)
			return nil
		},
	}
}

// runNowOptions maps run-now's NAME and flags onto nodescripts.RunNowOptions, checked.
func runNowOptions(c *ucli.Context) (string, nodescripts.RunNowOptions, error) {
	nsName, err := nodeScriptArg(c, "run-now")
	if err != nil {
		return "", nodescripts.RunNowOptions{}, err
	}
	o := nodescripts.RunNowOptions{For: c.Duration("for"), Cancel: c.Bool("cancel")}
	switch {
	case o.Cancel && c.IsSet("for"):
		return "", o, errors.New("--cancel removes the override: give --for only to set one")
	case o.Cancel:
		o.For = 0
	case o.For <= 0:
		return "", o, fmt.Errorf("--for %s: give a positive duration such as 1h", o.For)
	case o.For > nodescripts.MaxRunNowFor:
		return "", o, fmt.Errorf("--for %s: too long: at most %s (a week); to run outside the window for longer, change the NodeScript's spec.window", o.For, nodescripts.MaxRunNowFor)
	}
	return nsName, o, nil
}
