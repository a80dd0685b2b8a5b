package spoolcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeexec/nodeexec/nsenter"
)

// runCommand is `nodeexec agent run [--spool DIR] [--timeout D] --
// CMD [ARGS...]`: CMD run as it is, in the container the agent runs in (no
// namespace entered), with the agent's standard streams, environment and
// working directory. The debugpod backend runs the user's command in the
// user's image this way (agent.RunArgv), from the copy `agent copy` put
// in the pod's agent volume, so that its run gets the spool and the end
// mark.
func runCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:      "run",
		Usage:     "run a command in this container as it is, under the spool (what the debugpod backend runs in the user's image)",
		UsageText: "run [--spool DIR] [--timeout DURATION] -- COMMAND [ARGS...]",
		Description: "Runs COMMAND, looked up in this environment's PATH, with this process's standard streams, environment,\n" +
			"working directory and user: what the command sees is what it would see run directly.\n" +
			"Exit status: the command's (128+N when killed by signal N); 125 when it could not be started, 126\n" +
			"when it is not executable, 127 when it is not found (the reason on stderr); 124 when --timeout\n" +
			"ended it; 2 for bad usage.",
		HideHelpCommand: true,
		Flags:           []ucli.Flag{TimeoutFlag(), SpoolFlag()},
		Action: func(c *ucli.Context) error {
			return Spooled(c, streams, func(streams Streams) error {
				argv := c.Args().Slice()
				if len(argv) == 0 || argv[0] == "" {
					return errors.New("no command: give it after --, as in `run -- hostname`")
				}
				d := c.Duration("timeout")
				if d < 0 {
					return fmt.Errorf("--timeout %s: give a positive duration such as 35s, or 0 for no limit", d)
				}
				ctx, cancel := context.WithCancel(c.Context)
				if d > 0 {
					ctx, cancel = context.WithTimeoutCause(c.Context, d, ErrTimeout)
				}
				defer cancel()
				code, err := run(ctx, argv, streams, nsenter.DefaultKillAfter)
				if err != nil {
					if ok, exit := TimeoutExit(ctx, c, streams); ok {
						return exit
					}
					// Worded as the pod backends word the runtime's refusal
					// (podexec.StartError), exit status as a shell's.
					switch {
					case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
						fmt.Fprintf(streams.ErrOut, "nodeexec agent run: command %q was not found, so it did not run (exit code %d, as a shell's): %v\n", argv[0], ExitNotFound, err)
						return ExitStatus{Code: ExitNotFound}
					case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.ENOEXEC), errors.Is(err, syscall.EISDIR):
						fmt.Fprintf(streams.ErrOut, "nodeexec agent run: command %q is not executable, so it did not run (exit code %d, as a shell's): %v\n", argv[0], ExitNotExecutable, err)
						return ExitStatus{Code: ExitNotExecutable}
					}
					fmt.Fprintf(streams.ErrOut, "nodeexec agent run: %v\n", err)
					return ExitStatus{Code: ExitFailed}
				}
				if code != 0 {
					return ExitStatus{Code: code}
				}
				return nil
			})
		},
	}
}

// run runs argv with streams and waits for it: its exit code
// (128+N when killed by signal N), or -1 and why it could not be started
// or was ended by ctx. When ctx ends, a command whose stdin is not a
// terminal gets SIGTERM to its process group (it is started in one of its
// own) and SIGKILL killAfter later, as timeout(1) with --kill-after does;
// one on a terminal stays in the terminal's foreground group and gets the
// same signals itself.
func run(ctx context.Context, argv []string, streams Streams, killAfter time.Duration) (int, error) {
	if err := ctx.Err(); err != nil {
		return -1, fmt.Errorf("%s not started: %w", argv[0], err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	if errors.Is(cmd.Err, exec.ErrDot) {
		cmd.Err = nil // ./prog is what the user wrote: run it, as a shell would
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = orNull(streams.In), streams.Out, streams.ErrOut
	group := !IsTerminal(streams.In)
	if group {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	cmd.WaitDelay = 2 * time.Second // what it left running may hold its output open
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	exited := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-exited:
			return
		case <-ctx.Done():
		}
		pid := cmd.Process.Pid
		if group {
			pid = -pid
		}
		_ = syscall.Kill(pid, syscall.SIGTERM)
		deadline := time.NewTimer(killAfter)
		defer deadline.Stop()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		leader := (<-chan struct{})(exited)
		for {
			select {
			case <-deadline.C:
				_ = syscall.Kill(pid, syscall.SIGKILL)
				return
			case <-leader:
				if !group {
					return
				}
				leader = nil // what the leader left behind gets the rest of the grace period
			case <-tick.C:
				if leader == nil && syscall.Kill(pid, 0) == syscall.ESRCH {
					return
				}
			}
		}
	}()
	werr := cmd.Wait()
	close(exited)
	st := cmd.ProcessState
	if st == nil {
		<-stopped
		return -1, fmt.Errorf("waiting for %s: %w", argv[0], werr)
	}
	ws, _ := st.Sys().(syscall.WaitStatus)
	if ctx.Err() != nil && ws.Signaled() {
		<-stopped
		return -1, fmt.Errorf("%s ended (signal %d): %w", argv[0], ws.Signal(), context.Cause(ctx))
	}
	code := st.ExitCode()
	if ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	var ee *exec.ExitError
	switch {
	case werr == nil, errors.As(werr, &ee), errors.Is(werr, exec.ErrWaitDelay):
		return code, nil
	default:
		return code, fmt.Errorf("copying the stdio of %s: %w", argv[0], werr)
	}
}

// orNull is r, or an empty reader for a nil r (no stdin).
func orNull(r io.Reader) io.Reader {
	if r == nil {
		return eofReader{}
	}
	return r
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// copyCommand is `nodeexec agent copy --to PATH`: the debugpod backend's
// agent container, which puts the program the user's container runs from
// PATH there (agent.CopyArgv): nodeexec-spool (BinaryName) when it is beside
// the running binary, as in the agent image, else the running binary
// itself (an image that has nodeexec alone); both run the command lines
// given to PATH. The copy appears at PATH whole or not at all (written
// beside it, then renamed), so that a command line run from PATH either
// finds the whole program or none.
func copyCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "copy",
		Usage:     "copy nodeexec-spool (beside this binary), else this binary, to PATH, whole or not at all (the debugpod backend's agent container)",
		UsageText: "copy --to PATH",
		Hidden:    true,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "to", Required: true, Usage: "absolute `PATH` of the copy, in an existing directory"},
		},
		Action: func(c *ucli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("copy takes no arguments (got %q): give the destination as --to PATH", c.Args().Slice())
			}
			to := c.String("to")
			if !filepath.IsAbs(to) || filepath.Clean(to) != to {
				return fmt.Errorf("--to %q: give a clean absolute path such as /nodeexec-agent/nodeexec", to)
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("agent copy: finding this binary: %w", err)
			}
			return copyExecutable(copySource(self), to)
		},
	}
}

// copySource is the program `agent copy` copies for the running binary
// self: BinaryName in self's directory when it is a regular file there,
// else self.
func copySource(self string) string {
	small := filepath.Join(filepath.Dir(self), BinaryName)
	if fi, err := os.Stat(small); err == nil && fi.Mode().IsRegular() {
		return small
	}
	return self
}

// copyExecutable copies the file from to to (mode 0755), through a
// temporary file in to's directory renamed into place.
func copyExecutable(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return fmt.Errorf("agent copy: %w", err)
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(to), "."+filepath.Base(to)+".*")
	if err != nil {
		return fmt.Errorf("agent copy: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing there
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return fmt.Errorf("agent copy: writing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return fmt.Errorf("agent copy: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("agent copy: writing %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), to); err != nil {
		return fmt.Errorf("agent copy: %w", err)
	}
	return nil
}
