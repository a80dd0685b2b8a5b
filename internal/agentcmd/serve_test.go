package agentcmd

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeexec/nodeexec/nodeexec/agent"
)

// session is one client connection to a Server listening on loopback.
type session struct {
	t    *testing.T
	conn net.Conn
	fw   *agent.FrameWriter
	r    *bufio.Reader
}

// startServer serves on a loopback port; any command line is allowed.
func startServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s := &Server{Allow: func([]string) error { return nil }, HandshakeTimeout: 2 * time.Second}
	go func() { _ = s.Serve(t.Context(), ln) }()
	return ln.Addr().String()
}

func dialSession(t *testing.T, addr string, req agent.WireRequest) *session {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	s := &session{t: t, conn: conn, fw: agent.NewFrameWriter(conn), r: bufio.NewReader(conn)}
	p, err := agent.EncodeRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.fw.Write(agent.FrameRequest, p); err != nil {
		t.Fatal(err)
	}
	return s
}

// result reads frames until the exit or error frame.
func (s *session) result() (stdout, stderr string, code int, refused string) {
	s.t.Helper()
	var out, errb bytes.Buffer
	for {
		typ, p, err := agent.ReadFrame(s.r, nil)
		if err != nil {
			s.t.Fatalf("reading a frame: %v (stdout %q stderr %q)", err, out.String(), errb.String())
		}
		switch typ {
		case agent.FrameStdout:
			out.Write(p)
		case agent.FrameStderr:
			errb.Write(p)
		case agent.FrameExit:
			code, err := agent.ExitCodeOf(p)
			if err != nil {
				s.t.Fatal(err)
			}
			return out.String(), errb.String(), code, ""
		case agent.FrameError:
			return out.String(), errb.String(), -1, string(p)
		default:
			s.t.Fatalf("unexpected frame %q", typ)
		}
	}
}

func TestServeOutputAndExitCode(t *testing.T) {
	addr := startServer(t)
	s := dialSession(t, addr, agent.WireRequest{Version: agent.WireVersion, Command: []string{"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}})
	out, errOut, code, refused := s.result()
	if out != "out\n" || errOut != "err\n" || code != 3 || refused != "" {
		t.Errorf("got stdout %q stderr %q code %d refused %q", out, errOut, code, refused)
	}
	s = dialSession(t, addr, agent.WireRequest{Version: agent.WireVersion, Command: []string{"/bin/sh", "-c", "kill -TERM $$"}})
	if _, _, code, _ := s.result(); code != 128+15 {
		t.Errorf("killed by SIGTERM: code %d, want 143", code)
	}
	// Output larger than a frame's payload, and nothing lost at the end.
	s = dialSession(t, addr, agent.WireRequest{Version: agent.WireVersion, Command: []string{"/bin/sh", "-c", "head -c 3000000 /dev/zero; echo tail"}})
	if out, _, code, _ := s.result(); len(out) != 3000005 || !strings.HasSuffix(out, "tail\n") || code != 0 {
		t.Errorf("3 MB of output: got %d bytes, code %d", len(out), code)
	}
}

func TestServeStdin(t *testing.T) {
	addr := startServer(t)
	s := dialSession(t, addr, agent.WireRequest{Version: agent.WireVersion, Command: []string{"/bin/sh", "-c", "cat; echo done"}, Stdin: true})
	_ = s.fw.Write(agent.FrameStdin, []byte("hello "))
	_ = s.fw.Write(agent.FrameStdin, []byte("world\n"))
	_ = s.fw.Write(agent.FrameStdinEOF, nil)
	if out, _, code, _ := s.result(); out != "hello world\ndone\n" || code != 0 {
		t.Errorf("got %q code %d", out, code)
	}
	// Without Stdin the command's input is empty.
	s = dialSession(t, addr, agent.WireRequest{Version: agent.WireVersion, Command: []string{"/bin/sh", "-c", "cat; echo done"}})
	if out, _, code, _ := s.result(); out != "done\n" || code != 0 {
		t.Errorf("no stdin: got %q code %d", out, code)
	}
}

func TestServeTTY(t *testing.T) {
	addr := startServer(t)
	s := dialSession(t, addr, agent.WireRequest{Version: agent.WireVersion, Command: []string{"/bin/sh", "-c", "read x; stty size; test -t 0 && echo tty; exit 7"}, Stdin: true, TTY: true})
	// The frames are applied in order: the size is set before the line arrives.
	_ = s.fw.WriteResize(123, 45)
	_ = s.fw.Write(agent.FrameStdin, []byte("go\n"))
	out, errOut, code, _ := s.result()
	if !strings.Contains(out, "45 123") || !strings.Contains(out, "tty") || errOut != "" || code != 7 {
		t.Errorf("got stdout %q stderr %q code %d", out, errOut, code)
	}
}

func TestServeRefusals(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The real check: only the agent's own command lines.
	srv := &Server{HandshakeTimeout: time.Second}
	go func() { _ = srv.Serve(t.Context(), ln) }()
	for name, tc := range map[string]struct {
		req  agent.WireRequest
		want string
	}{
		"version":     {agent.WireRequest{Version: 99, Command: []string{agent.Path, "agent", "nsenter"}}, "protocol version 99"},
		"not agent":   {agent.WireRequest{Version: agent.WireVersion, Command: []string{"/bin/sh", "-c", "id"}}, "only its own command lines"},
		"main proc":   {agent.WireRequest{Version: agent.WireVersion, Command: []string{agent.Path, "agent", "serve"}}, "main process"},
		"empty":       {agent.WireRequest{Version: agent.WireVersion}, "only its own command lines"},
		"env":         {agent.WireRequest{Version: agent.WireVersion, Env: map[string]string{"A=B": "x"}, Command: []string{agent.Path, "agent", "container-exec", "--", "true"}}, "environment variable name"},
		"spool":       {agent.WireRequest{Version: agent.WireVersion, Command: []string{agent.Path, "agent", "nsenter", "--spool", "/usr/local/new", "--target", "1", "--", "true"}}, "--spool"},
		"not started": {agent.WireRequest{Version: agent.WireVersion, Command: []string{agent.Path, "agent", "nsenter", "--", "true"}}, agent.CannotExecPrefix + "starting"},
	} {
		t.Run(name, func(t *testing.T) {
			if name == "not started" {
				srv.Exe = filepath.Join(t.TempDir(), "missing")
				defer func() { srv.Exe = "" }()
			}
			s := dialSession(t, ln.Addr().String(), tc.req)
			if _, _, _, refused := s.result(); !strings.Contains(refused, tc.want) {
				t.Errorf("refusal %q, want it to contain %q", refused, tc.want)
			}
		})
	}
	// A first frame that is not a request.
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = agent.NewFrameWriter(conn).Write(agent.FrameStdin, []byte("x"))
	typ, p, err := agent.ReadFrame(bufio.NewReader(conn), nil)
	if err != nil || typ != agent.FrameError || !strings.Contains(string(p), "first frame") {
		t.Errorf("stdin first: %q %q %v", typ, p, err)
	}
}

// A client that goes away does not stop the command: it runs to its end.
func TestServeClientGoneCommandRunsOn(t *testing.T) {
	addr := startServer(t)
	marker := filepath.Join(t.TempDir(), "done")
	s := dialSession(t, addr, agent.WireRequest{Version: agent.WireVersion, Command: []string{"/bin/sh", "-c", "echo started; sleep 0.3; seq 1 100000; touch " + marker}, Stdin: true})
	typ, _, err := agent.ReadFrame(s.r, nil)
	if err != nil || typ != agent.FrameStdout {
		t.Fatalf("first frame %q %v", typ, err)
	}
	s.conn.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(marker); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the command did not run to its end after its client went away")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestServeCommandValidation(t *testing.T) {
	cmd := agentServeCommand()
	for _, listen := range []string{"0.0.0.0:7710", "10.0.0.1:7710", "nonsense"} {
		err := runApp(t, cmd, "serve", "--listen", listen)
		if err == nil || !strings.Contains(err.Error(), "--listen") {
			t.Errorf("--listen %s: %v", listen, err)
		}
	}
	t.Setenv(agent.EnvNodeName, "")
	if err := runApp(t, cmd, "serve", "--listen", "127.0.0.1:0", "--require-record"); err == nil || !strings.Contains(err.Error(), "--require-record") || !strings.Contains(err.Error(), agent.EnvNodeName) {
		t.Errorf("--require-record without its node: %v", err)
	}
}

// runApp runs cmd as the only command of an app, with args after the
// program name.
func runApp(t *testing.T, cmd *ucli.Command, args ...string) error {
	t.Helper()
	app := &ucli.App{Name: "agent", Commands: []*ucli.Command{cmd}, Writer: io.Discard, ErrWriter: io.Discard}
	return app.RunContext(t.Context(), append([]string{"agent"}, args...))
}

// asNodeexecEnv makes this test binary act as the nodeexec binary's agent
// commands (TestMain): the warm agents the Server starts are this binary.
const asNodeexecEnv = "NODEEXEC_AGENTCMD_TEST_AS_NODEEXEC"

func TestMain(m *testing.M) {
	if os.Getenv(asNodeexecEnv) == "1" {
		ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		app := &ucli.App{Name: "nodeexec", ExitErrHandler: func(*ucli.Context, error) {},
			Commands: []*ucli.Command{{Name: "agent", Subcommands: Commands(Streams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})}}}
		err := app.RunContext(ctx, os.Args)
		cancel()
		var es ExitStatus
		switch {
		case err == nil:
			os.Exit(0)
		case errors.As(err, &es):
			os.Exit(es.Code)
		default:
			fmt.Fprintln(os.Stderr, "error:", err)
			os.Exit(2)
		}
	}
	os.Exit(m.Run())
}

// A warm agent, started ahead, runs the next request without a TTY: the
// command's parent is that process; the pool refills; output, stdin and
// the exit status are as for a process started for the request.
func TestServeWarm(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("entering a namespace (agent nsenter) needs root")
	}
	t.Setenv(asNodeexecEnv, "1") // inherited by the warm agents
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv := &Server{Exe: self, Warm: true, Allow: func([]string) error { return nil }}
	go func() { _ = srv.Serve(t.Context(), ln) }()
	warmPID := func() int {
		t.Helper()
		select {
		case w := <-srv.pool():
			srv.pool() <- w
			return w.cmd.Process.Pid
		case <-time.After(10 * time.Second):
			t.Fatal("no warm agent within 10s")
			return 0
		}
	}
	for i := range 3 {
		pid := warmPID()
		s := dialSession(t, ln.Addr().String(), agent.WireRequest{Version: agent.WireVersion, Stdin: true,
			Command: []string{agent.Path, "agent", "nsenter", "--target", fmt.Sprint(os.Getpid()), "--namespaces", "uts", "--", "/bin/sh", "-c", "echo $PPID; cat; exit 9"}})
		_ = s.fw.Write(agent.FrameStdin, []byte("input\n"))
		_ = s.fw.Write(agent.FrameStdinEOF, nil)
		out, errOut, code, refused := s.result()
		if out != fmt.Sprintf("%d\ninput\n", pid) || code != 9 || refused != "" {
			t.Errorf("request %d: stdout %q (want the warm agent's PID %d, then the input), stderr %q, code %d, refused %q", i, out, pid, errOut, code, refused)
		}
	}
	// A request's Env reaches the warm agent's environment (the nsenter
	// subcommand passes it on), not its command line.
	pid := warmPID()
	s := dialSession(t, ln.Addr().String(), agent.WireRequest{Version: agent.WireVersion, Env: map[string]string{"SECRETVAL": "s3cr3t"},
		Command: []string{agent.Path, "agent", "nsenter", "--target", fmt.Sprint(os.Getpid()), "--namespaces", "uts", "--", "/bin/sh", "-c", `printf '%s %s' "$PPID" "$` + agent.ExecEnvVar + `"`}})
	if out, errOut, code, _ := s.result(); out != fmt.Sprintf(`%d {"SECRETVAL":"s3cr3t"}`, pid) || code != 0 {
		t.Errorf("warm agent with Env: stdout %q (want its PID %d and the variables), stderr %q, code %d", out, pid, errOut, code)
	}
	if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(cmdline), "s3cr3t") {
		t.Errorf("the value is on the warm agent's command line: %q", cmdline)
	}
	// A usage error of the agent's command line: as a cold start has it.
	s = dialSession(t, ln.Addr().String(), agent.WireRequest{Version: agent.WireVersion, Command: []string{agent.Path, "agent", "nsenter", "--", "true"}})
	if _, errOut, code, _ := s.result(); code != 2 || !strings.Contains(errOut, "target") {
		t.Errorf("missing --target: code %d stderr %q", code, errOut)
	}
}

// A request's Env goes into the started process's environment as
// agent.ExecEnvVar, never onto its command line.
func TestServeEnv(t *testing.T) {
	addr := startServer(t)
	s := dialSession(t, addr, agent.WireRequest{Version: agent.WireVersion, Env: map[string]string{"SECRETVAL": "s3cr3t word"},
		Command: []string{"/bin/sh", "-c", `printf '%s\n' "$` + agent.ExecEnvVar + `"; tr '\0' ' ' </proc/$$/cmdline`}})
	out, errOut, code, refused := s.result()
	env, cmdline, _ := strings.Cut(out, "\n")
	if env != `{"SECRETVAL":"s3cr3t word"}` || strings.Contains(cmdline, "s3cr3t") || code != 0 || refused != "" {
		t.Errorf("environment %q, command line %q, stderr %q, code %d, refused %q", env, cmdline, errOut, code, refused)
	}
}

// container-exec --env-from-agent reads agent.ExecEnvVar, before it looks
// for the container; without it, or with a bad value, the command does not run.
func TestContainerExecEnvFromAgent(t *testing.T) {
	args := []string{"container-exec", "--container-id", "containerd://none", "--host-root", t.TempDir(), "--no-proc-fallback", agent.EnvFromAgentFlag, "--", "true"}
	t.Setenv(agent.ExecEnvVar, "")
	os.Unsetenv(agent.ExecEnvVar)
	if code, stderr := runAgentCmd(t, args...); code != agent.ErrorExitCode || !strings.Contains(stderr, "has no "+agent.ExecEnvVar) {
		t.Errorf("without %s: exit %d, stderr %q", agent.ExecEnvVar, code, stderr)
	}
	t.Setenv(agent.ExecEnvVar, `{"A=B":"x"}`)
	if code, stderr := runAgentCmd(t, args...); code != agent.ErrorExitCode || !strings.Contains(stderr, `"A=B"`) {
		t.Errorf("bad %s: exit %d, stderr %q", agent.ExecEnvVar, code, stderr)
	}
	// A good value: on to the container lookup (which finds nothing here).
	t.Setenv(agent.ExecEnvVar, `{"A":"1"}`)
	if code, stderr := runAgentCmd(t, args...); code != agent.ErrorExitCode || strings.Contains(stderr, agent.ExecEnvVar) || strings.Contains(stderr, "env-from-agent") {
		t.Errorf("good %s: exit %d, stderr %q", agent.ExecEnvVar, code, stderr)
	}
}

// TestServeRequiresRecord: with Records set, a command line that starts a
// command runs only when its record is accepted; the refusal names the
// reason with agent.RecordRefusedPrefix and nothing runs. attach (read or
// stop a recorded command's spool) needs no record.
func TestServeRequiresRecord(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	marker := filepath.Join(t.TempDir(), "ran")
	var asked []string
	s := &Server{Exe: "/bin/sh", Allow: func([]string) error { return nil }, HandshakeTimeout: 2 * time.Second,
		Records: func(_ context.Context, req agent.WireRequest) error {
			asked = append(asked, req.Record)
			if req.Record != "nodeexec-record-good" {
				return errors.New("run record " + req.Record + " not found")
			}
			return nil
		}}
	go func() { _ = s.Serve(t.Context(), ln) }()
	addr := ln.Addr().String()
	// /bin/sh gets argv[1:]: "agent nsenter -c ..." is not what sh wants,
	// so the stand-in command line is sh's own: `sh -c 'touch MARKER'`.
	touch := []string{agent.Path, "-c", "touch " + marker + "; echo ran"}

	_, _, code, refused := dialSession(t, addr, agent.WireRequest{Version: agent.WireVersion, Command: touch}).result()
	if !strings.HasPrefix(refused, agent.RecordRefusedPrefix) || !strings.Contains(refused, "not found") || code != -1 {
		t.Errorf("no record: refused %q, code %d", refused, code)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran without its record")
	}
	out, _, code, refused := dialSession(t, addr, agent.WireRequest{Version: agent.WireVersion, Command: touch, Record: "nodeexec-record-good"}).result()
	if refused != "" || code != 0 || out != "ran\n" {
		t.Errorf("with its record: out %q code %d refused %q", out, code, refused)
	}
	n := len(asked)
	attach := []string{agent.Path, "agent", "attach", "-c", "echo attached"}
	if !agent.NeedsRecord(touch) || agent.NeedsRecord(attach) {
		t.Fatal("NeedsRecord: want true for a command, false for attach")
	}
	_, _, _, refused = dialSession(t, addr, agent.WireRequest{Version: agent.WireVersion, Command: attach}).result()
	if len(asked) != n || strings.HasPrefix(refused, agent.RecordRefusedPrefix) {
		t.Errorf("attach: records asked %v, refused %q: want no record check", asked[n:], refused)
	}
}
