package agentcmd

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeexec/nodeexec/nodeexec/agent"
)

// warmControlFD is the descriptor on which a warm agent reads its command
// line: the first of exec.Cmd.ExtraFiles.
const warmControlFD = 3

// warmLine is what a warm agent reads on descriptor 3: a JSON object and a
// newline.
type warmLine struct {
	// Command is the agent's own command line, `nodeexec agent SUBCOMMAND ...`.
	Command []string `json:"command"`
	// Env, when set, goes into this process's environment as
	// agent.ExecEnvVar before Command runs (agent.WireRequest.Env).
	Env map[string]string `json:"env,omitempty"`
}

// agentWarmCommand is `nodeexec agent warm`: a process that serve starts
// ahead of the next request, so that the request does not wait for a
// process start (about 25 ms for this binary). It waits for one command
// line on descriptor 3 (a warmLine), then runs it in this
// process, with this process's standard streams, exactly as if it had been
// started with it (and with its Env). Descriptor 3 closed without a command line: it exits 0.
func agentWarmCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:      "warm",
		Usage:     "wait for one agent command line on descriptor 3, then run it (started ahead by serve)",
		UsageText: "warm",
		Hidden:    true,
		Action: func(c *ucli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("warm takes no arguments (got %q): it reads its command line from descriptor %d", c.Args().Slice(), warmControlFD)
			}
			control := os.NewFile(warmControlFD, "control")
			if control == nil {
				return fmt.Errorf("warm: no descriptor %d to read the command line from", warmControlFD)
			}
			line, err := bufio.NewReader(control).ReadBytes('\n')
			control.Close()
			if errors.Is(err, io.EOF) && len(line) == 0 {
				return nil // not needed after all (serve is stopping)
			}
			if err != nil {
				return fmt.Errorf("warm: reading the command line: %w", err)
			}
			var w warmLine
			if err := json.Unmarshal(line, &w); err != nil {
				return fmt.Errorf("warm: bad command line: %w", err)
			}
			if err := agent.CheckRunnable(w.Command); err != nil {
				return fmt.Errorf("warm: %w", err)
			}
			if err := agent.CheckExecEnv(w.Env); err != nil {
				return fmt.Errorf("warm: %w", err)
			}
			if len(w.Env) > 0 {
				if err := os.Setenv(agent.ExecEnvVar, agent.EncodeExecEnv(w.Env)); err != nil {
					return fmt.Errorf("warm: %w", err)
				}
			}
			return RunAgent(c, streams, w.Command)
		},
	}
}

// RunAgent runs the agent command line argv (`nodeexec agent SUBCOMMAND
// ...`; argv[0] is the program name) in this process, under c's context,
// with its errors as the nodeexec binary has them (ExitStatus, or a usage
// error).
func RunAgent(c *ucli.Context, streams Streams, argv []string) error {
	app := &ucli.App{
		Name:           argv[0],
		Reader:         streams.In,
		Writer:         streams.Out,
		ErrWriter:      streams.ErrOut,
		ExitErrHandler: func(*ucli.Context, error) {},
		HideVersion:    true,
		Commands:       []*ucli.Command{{Name: "agent", Subcommands: Commands(streams)}},
	}
	return app.RunContext(c.Context, argv)
}
