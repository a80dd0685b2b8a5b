package agentcmd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	ucli "github.com/urfave/cli/v2"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeexec/nodeexec/nodeexec/agent"
)

// agentServeCommand is the resident agents' main process: it holds the pod
// as hold does, and listens on --listen (loopback, in the pod's own network
// namespace) for the clients that reach it through the API server's
// port-forward; see agent.ServePort for the protocol.
func agentServeCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "serve",
		Usage:     "run the agent's command lines for port-forwarded clients until SIGTERM (the resident agents' main process)",
		UsageText: "serve [--listen 127.0.0.1:7710] [--require-record]",
		Hidden:    true,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "listen", Value: agent.ServeAddress(), Usage: "loopback `ADDRESS` to listen on"},
			&ucli.BoolFlag{Name: "require-record", Usage: "start a command only with its run record (a Lease in this pod's namespace, read and deleted with the pod's service account; the node and namespace from $" + agent.EnvNodeName + " and $" + agent.EnvNamespace + ")"},
		},
		Action: func(c *ucli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("serve takes no arguments (got %q)", c.Args().Slice())
			}
			host, _, err := net.SplitHostPort(c.String("listen"))
			if err != nil {
				return fmt.Errorf("--listen %q: %w: give HOST:PORT such as %s", c.String("listen"), err, agent.ServeAddress())
			}
			if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
				return fmt.Errorf("--listen %q: the agent listens only on a loopback address (such as %s): it is reached through port-forward, never over the network", c.String("listen"), agent.ServeAddress())
			}
			ln, err := net.Listen("tcp", c.String("listen"))
			if err != nil {
				return fmt.Errorf("agent serve: %w", err)
			}
			s := &Server{Exe: agent.Path, Warm: true}
			if c.Bool("require-record") {
				records, err := inClusterRecords()
				if err != nil {
					return fmt.Errorf("--require-record: %w", err)
				}
				s.Records = records
			}
			go func() {
				<-c.Context.Done()
				ln.Close()
			}()
			err = s.Serve(c.Context, ln)
			if c.Context.Err() != nil {
				return nil // SIGTERM: the pod is being deleted
			}
			return err
		},
	}
}

// inClusterRecords is Server.Records for an agent pod of
// resident.TransportRecorded: agent.ConsumeRecord with the pod's
// service account, in its namespace, for its node.
func inClusterRecords() (func(context.Context, agent.WireRequest) error, error) {
	node, ns := os.Getenv(agent.EnvNodeName), os.Getenv(agent.EnvNamespace)
	if node == "" || ns == "" {
		return nil, fmt.Errorf("$%s and $%s must name the agent's node and namespace (the DaemonSet sets them from the downward API)", agent.EnvNodeName, agent.EnvNamespace)
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("the pod's service account: %w", err)
	}
	cfg.UserAgent = "nodeexec-agent"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, req agent.WireRequest) error {
		ctx, cancel := context.WithTimeout(ctx, recordCheckTimeout)
		defer cancel()
		return agent.ConsumeRecord(ctx, client, ns, req.Record, node, req, time.Now())
	}, nil
}

// recordCheckTimeout bounds the API requests that check one run record.
const recordCheckTimeout = 10 * time.Second

// Server runs the agent's command lines for the connections it accepts.
type Server struct {
	// Exe replaces the command line's first word (agent.Path) when it is
	// started; the tests run other programs with it. Empty: as given.
	Exe string
	// Allow, when set, replaces WireRequest.Validate's check of the command
	// line (tests).
	Allow func(argv []string) error
	// HandshakeTimeout bounds the wait for a connection's request frame.
	// Defaults to 10 s.
	HandshakeTimeout time.Duration
	// Records, when set, checks (and consumes) the run record of each
	// request whose command line starts a command (agent.NeedsRecord);
	// an error refuses the request with agent.RecordRefusedPrefix and the
	// error, and nothing is started. Nil: no record is asked for.
	Records func(ctx context.Context, req agent.WireRequest) error
	// Warm keeps one `agent warm` process started ahead (Exe, else
	// agent.Path), which the next request without a TTY gets: the request
	// does not wait for a process start. Set before Serve.
	Warm bool

	warmOnce sync.Once
	warm     chan *warmAgent // of capacity 1; nil without Warm
}

// pool is the warm agent pool (nil without Warm).
func (s *Server) pool() chan *warmAgent {
	s.warmOnce.Do(func() {
		if s.Warm {
			s.warm = make(chan *warmAgent, 1)
		}
	})
	return s.warm
}

// Serve accepts connections on ln until it is closed, each served by Handle
// in its own goroutine. It returns the listener's error.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if pool := s.pool(); pool != nil {
		go s.refill()
		defer func() {
			select {
			case w := <-pool:
				w.discard()
			default:
			}
		}()
	}
	for {
		conn, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		go func() {
			defer conn.Close()
			s.Handle(ctx, conn)
		}()
	}
}

// Handle serves one connection: it reads the request, starts the command,
// streams its output and sends its exit status. When the client goes away
// the command is not stopped: it loses its standard input and runs on (a
// spooled command line keeps its output and status for `agent attach`; the
// agent's --timeout bounds it).
func (s *Server) Handle(ctx context.Context, conn net.Conn) {
	fw := agent.NewFrameWriter(conn)
	r := bufio.NewReaderSize(conn, 64<<10)
	timeout := s.HandshakeTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	_ = conn.SetReadDeadline(time.Now().Add(timeout))
	t, p, err := agent.ReadFrame(r, nil)
	if err != nil {
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	if t != agent.FrameRequest {
		_ = fw.Write(agent.FrameError, fmt.Appendf(nil, "agent protocol: the first frame must be a request (%q), got %q", agent.FrameRequest, t))
		return
	}
	req, err := s.decode(p)
	if err != nil {
		_ = fw.Write(agent.FrameError, []byte(err.Error()))
		return
	}
	if s.Records != nil && agent.NeedsRecord(req.Command) {
		if err := s.Records(ctx, req); err != nil {
			_ = fw.Write(agent.FrameError, []byte(agent.RecordRefusedPrefix+err.Error()))
			return
		}
	}
	if !req.TTY {
		if w := s.takeWarm(); w != nil {
			s.runWarm(w, req, r, fw)
			return
		}
	}
	exe := req.Command[0]
	if s.Exe != "" {
		exe = s.Exe
	}
	cmd := exec.Command(exe, req.Command[1:]...)
	cmd.Args[0] = req.Command[0]
	if len(req.Env) > 0 {
		// Into the process's environment, never onto its command line.
		cmd.Env = append(os.Environ(), agent.ExecEnvVar+"="+agent.EncodeExecEnv(req.Env))
	}
	if req.TTY {
		s.runTTY(cmd, r, fw)
		return
	}
	s.runPipes(cmd, req, r, fw)
}

func (s *Server) decode(p []byte) (agent.WireRequest, error) {
	if s.Allow == nil {
		return agent.DecodeRequest(p)
	}
	req, err := agent.DecodeRequest(p)
	if err != nil && req.Version == agent.WireVersion && len(req.Command) > 0 {
		err = s.Allow(req.Command)
	}
	return req, err
}

// runPipes runs cmd with pipes for its standard streams.
func (s *Server) runPipes(cmd *exec.Cmd, req agent.WireRequest, r *bufio.Reader, fw *agent.FrameWriter) {
	var stdin io.WriteCloser
	var err error
	if req.Stdin {
		if stdin, err = cmd.StdinPipe(); err != nil {
			_ = fw.Write(agent.FrameError, []byte(err.Error()))
			return
		}
	}
	// The output goes through os.Pipe, read here: cmd.Wait then waits for
	// the process only, and the output is drained to its end below.
	outR, outW, err := os.Pipe()
	if err != nil {
		_ = fw.Write(agent.FrameError, []byte(err.Error()))
		return
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		_ = fw.Write(agent.FrameError, []byte(err.Error()))
		return
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		if stdin != nil {
			stdin.Close()
		}
		_ = fw.Write(agent.FrameError, startError(fmt.Sprintf("starting %q", req.Command), err))
		return
	}
	s.stream(r, fw, stdin, outR, errR, cmd)
}

// stream connects a started command to the connection: the client's frames
// to its stdin (nil: none), its stdout and stderr to frames, then its exit
// status.
func (s *Server) stream(r *bufio.Reader, fw *agent.FrameWriter, stdin io.WriteCloser, outR, errR *os.File, cmd *exec.Cmd) {
	go s.readClient(r, stdin, nil)
	var wg sync.WaitGroup
	wg.Go(func() { pump(outR, fw, agent.FrameStdout) })
	wg.Go(func() { pump(errR, fw, agent.FrameStderr) })
	wg.Wait()
	_ = fw.WriteExit(exitCode(cmd.Wait()))
}

// warmAgent is an `agent warm` process started ahead, waiting for its
// command line on control.
type warmAgent struct {
	cmd            *exec.Cmd
	control        *os.File
	stdin          *os.File
	stdout, stderr *os.File
}

// startWarm starts an `agent warm` process with pipes for its standard
// streams and its control descriptor.
func (s *Server) startWarm() (*warmAgent, error) {
	exe := agent.Path
	if s.Exe != "" {
		exe = s.Exe
	}
	var files [8]*os.File // control, stdin, stdout, stderr: read and write ends
	for i := 0; i < 8; i += 2 {
		r, w, err := os.Pipe()
		if err != nil {
			for _, f := range files[:i] {
				f.Close()
			}
			return nil, err
		}
		files[i], files[i+1] = r, w
	}
	ctlR, ctlW, inR, inW, outR, outW, errR, errW := files[0], files[1], files[2], files[3], files[4], files[5], files[6], files[7]
	cmd := exec.Command(exe, "agent", "warm")
	cmd.Args[0] = agent.Path
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.ExtraFiles = []*os.File{ctlR}
	err := cmd.Start()
	for _, f := range []*os.File{ctlR, inR, outW, errW} {
		f.Close()
	}
	if err != nil {
		for _, f := range []*os.File{ctlW, inW, outR, errR} {
			f.Close()
		}
		return nil, err
	}
	return &warmAgent{cmd: cmd, control: ctlW, stdin: inW, stdout: outR, stderr: errR}, nil
}

// refill starts a warm agent for the pool, unless one waits there already.
func (s *Server) refill() {
	w, err := s.startWarm()
	if err != nil {
		return // the next request starts its process itself
	}
	select {
	case s.pool() <- w:
	default:
		w.discard()
	}
}

// discard ends a warm agent that will get no command line.
func (w *warmAgent) discard() {
	w.control.Close()
	w.stdin.Close()
	go func() {
		_, _ = io.Copy(io.Discard, w.stdout)
		_, _ = io.Copy(io.Discard, w.stderr)
		_ = w.cmd.Wait()
		w.stdout.Close()
		w.stderr.Close()
	}()
}

// takeWarm returns the pool's warm agent, if one waits, and starts the next.
func (s *Server) takeWarm() *warmAgent {
	pool := s.pool()
	if pool == nil {
		return nil
	}
	select {
	case w := <-pool:
		go s.refill()
		return w
	default:
		return nil
	}
}

// runWarm hands req's command line (and Env) to the warm agent w.
func (s *Server) runWarm(w *warmAgent, req agent.WireRequest, r *bufio.Reader, fw *agent.FrameWriter) {
	line, err := json.Marshal(warmLine{Command: req.Command, Env: req.Env})
	if err == nil {
		_, err = w.control.Write(append(line, '\n'))
	}
	w.control.Close()
	if err != nil {
		w.discard()
		_ = fw.Write(agent.FrameError, fmt.Appendf(nil, "handing %q to a warm agent: %v", req.Command, err))
		return
	}
	var stdin io.WriteCloser = w.stdin
	if !req.Stdin {
		w.stdin.Close()
		stdin = nil
	}
	s.stream(r, fw, stdin, w.stdout, w.stderr, w.cmd)
}

// runTTY runs cmd on a new pseudo-terminal, its controlling terminal.
func (s *Server) runTTY(cmd *exec.Cmd, r *bufio.Reader, fw *agent.FrameWriter) {
	ptmx, err := pty.Start(cmd)
	if err != nil {
		_ = fw.Write(agent.FrameError, startError(fmt.Sprintf("starting %q on a terminal", cmd.Args), err))
		return
	}
	go s.readClient(r, ptmx, ptmx)
	// The terminal's output ends with EIO once every process holding it
	// has exited.
	pump(ptmx, fw, agent.FrameStdout)
	code := exitCode(cmd.Wait())
	ptmx.Close()
	_ = fw.WriteExit(code)
}

// readClient applies the client's frames: standard input, its end, the
// terminal's size. When the connection ends, the command's standard input
// is closed (a terminal's is left: closing it would hang up the session
// that the command may still be writing to).
func (s *Server) readClient(r *bufio.Reader, stdin io.WriteCloser, tty *os.File) {
	buf := make([]byte, 32<<10)
	for {
		t, p, err := agent.ReadFrame(r, buf)
		if err != nil {
			if stdin != nil && tty == nil {
				stdin.Close()
			}
			return
		}
		switch t {
		case agent.FrameStdin:
			if stdin != nil {
				_, _ = stdin.Write(p)
			}
		case agent.FrameStdinEOF:
			if stdin != nil {
				if tty != nil {
					// A terminal's end of input is ^D.
					_, _ = stdin.Write([]byte{4})
				} else {
					stdin.Close()
				}
			}
		case agent.FrameResize:
			if w, h, err := agent.SizeOf(p); err == nil && tty != nil {
				_ = pty.Setsize(tty, &pty.Winsize{Cols: w, Rows: h})
			}
		}
	}
}

// pump sends what r yields as frames of type t until r ends. A failed send
// (the client is gone) does not stop the reading: the command must not
// block on a full pipe.
func pump(r io.ReadCloser, fw *agent.FrameWriter, t agent.FrameType) {
	defer r.Close()
	buf := make([]byte, 32<<10)
	sending := true
	for {
		n, err := r.Read(buf)
		if n > 0 && sending {
			if fw.Write(t, buf[:n]) != nil {
				sending = false
			}
		}
		if err != nil {
			return
		}
	}
}

// startError is the FrameError payload for a process that could not be
// started: with agent.CannotExecPrefix when the binary itself cannot be
// executed (gone, not executable, not a program), which the client takes
// for an agent that can run nothing.
func startError(what string, err error) []byte {
	msg := fmt.Sprintf("%s: %v", what, err)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.ENOEXEC) || errors.Is(err, exec.ErrNotFound) {
		msg = agent.CannotExecPrefix + msg
	}
	return []byte(msg)
}

// exitCode is the exit status of a command from its Wait error: 128+N when
// signal N killed it, agent.ErrorExitCode when it could not be waited for.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return agent.ErrorExitCode
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}
