package agentcmd

import (
	"io"
	"strings"
	"testing"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/spool"
)

// FuzzAgentArgv: a command line that the agent's request check accepts
// (agent.CheckRunnable, what the resident agents' listener and a warm agent
// run) is parsed by the agent's own commands with their real flags; the
// --spool they then see, if any, is always a spool directory of the
// agents' (spool.CheckDir): no spelling of the flag slips a path past the
// check. The words are the input split at NUL. Nothing is run: the
// commands' actions only record what they parsed.
func FuzzAgentArgv(f *testing.F) {
	for _, s := range []string{
		"nsenter\x00--spool\x00/tmp/nodeexec/spool/abc\x00--target\x001\x00--\x00id",
		"nsenter\x00--spool=/usr/local/new\x00--\x00id",
		"nsenter\x00-spool\x00/\x00--\x00id",
		"container-exec\x00--container-id\x00--spool\x00/x\x00--\x00id",
		"container-exec\x00--container-id\x00x\x00--env-from-agent\x00--spool=/tmp/nodeexec/spool/a\x00--\x00id",
		"attach\x00--spool\x00/dev\x00--stop",
		"attach\x00--check\x00--spool=/tmp/nodeexec/spool/x",
		"nsenter\x00--target\x001\x00id\x00--spool\x00/x",
		"nsenter\x00--spool\x00",
		"hold", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		argv := append([]string{agent.Path, "agent"}, strings.Split(s, "\x00")...)
		if agent.CheckRunnable(argv) != nil {
			return
		}
		var spools []string
		cmds := Commands(Streams{In: strings.NewReader(""), Out: io.Discard, ErrOut: io.Discard})
		for _, c := range cmds {
			c.Action = func(c *ucli.Context) error {
				if c.IsSet("spool") {
					spools = append(spools, c.String("spool"))
				}
				return nil
			}
			c.Before, c.After = nil, nil
		}
		app := &ucli.App{Name: argv[0], Reader: strings.NewReader(""), Writer: io.Discard, ErrWriter: io.Discard,
			ExitErrHandler: func(*ucli.Context, error) {}, HideVersion: true,
			Commands: []*ucli.Command{{Name: "agent", Subcommands: cmds}}}
		_ = app.RunContext(t.Context(), argv)
		for _, dir := range spools {
			if err := spool.CheckDir(dir); err != nil {
				t.Fatalf("%q passed the request check, and the agent parses --spool %q: %v", argv, dir, err)
			}
		}
	})
}
