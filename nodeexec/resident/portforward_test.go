package resident

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/nodeexec/nodeexec/internal/agentcmd"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nodeexec/spool"
)

// fakeDialer hands out connections whose data stream reaches an agent
// Server in this process (what the kubelet's port-forward does), or one
// that refuses (as when nothing listens on the port).
type fakeDialer struct {
	server  *agentcmd.Server
	refuse  string // the error stream's message; the data stream ends at once
	dialErr error
	cut     bool // the agent's side sends one stdout frame, then the connection ends

	mu    sync.Mutex
	dials int
	port  string
}

func (d *fakeDialer) Dial(ctx context.Context, namespace, pod string) (httpstream.Connection, error) {
	d.mu.Lock()
	d.dials++
	d.mu.Unlock()
	if d.dialErr != nil {
		return nil, d.dialErr
	}
	return &fakeConn{d: d, closed: make(chan bool)}, nil
}

type fakeConn struct {
	d      *fakeDialer
	once   sync.Once
	closed chan bool
	mu     sync.Mutex
	pipes  []net.Conn
}

func (c *fakeConn) CreateStream(h http.Header) (httpstream.Stream, error) {
	c.d.mu.Lock()
	c.d.port = h.Get(corev1.PortHeader)
	c.d.mu.Unlock()
	if h.Get(corev1.StreamType) == corev1.StreamTypeError {
		return &fakeStream{Reader: strings.NewReader(c.d.refuse), h: h}, nil
	}
	client, agentSide := net.Pipe()
	c.mu.Lock()
	c.pipes = append(c.pipes, client, agentSide)
	c.mu.Unlock()
	switch {
	case c.d.refuse != "":
		agentSide.Close()
	case c.d.cut:
		go func() {
			_, _, _ = agent.ReadFrame(bufio.NewReader(agentSide), nil)
			_ = agent.NewFrameWriter(agentSide).Write(agent.FrameStdout, []byte("partial\n"))
			agentSide.Close()
		}()
	default:
		go c.d.server.Handle(context.Background(), agentSide)
	}
	return &fakeStream{Reader: client, Writer: client, c: client, h: h}, nil
}

func (c *fakeConn) Close() error {
	c.once.Do(func() {
		close(c.closed)
		c.mu.Lock()
		for _, p := range c.pipes {
			p.Close()
		}
		c.mu.Unlock()
	})
	return nil
}
func (c *fakeConn) CloseChan() <-chan bool             { return c.closed }
func (c *fakeConn) SetIdleTimeout(time.Duration)       {}
func (c *fakeConn) RemoveStreams(...httpstream.Stream) {}

type fakeStream struct {
	io.Reader
	io.Writer
	c io.Closer
	h http.Header
}

func (s *fakeStream) Write(p []byte) (int, error) {
	if s.Writer == nil {
		return 0, io.ErrClosedPipe
	}
	return s.Writer.Write(p)
}
func (s *fakeStream) Close() error         { return nil } // half-close: nothing more to send
func (s *fakeStream) Reset() error         { return s.c.Close() }
func (s *fakeStream) Headers() http.Header { return s.h }
func (s *fakeStream) Identifier() uint32   { return 1 }

func shServer() *agentcmd.Server {
	return &agentcmd.Server{Allow: func([]string) error { return nil }}
}

// spooledAgent writes, in dir, a stand-in for the agent's spooled command
// line: a script that runs prelude (shell lines), prints "hi", then the
// spool's end mark with exit status code, as a spooled `nodeexec agent
// nsenter` does, and exits code. It returns the script's path.
func spooledAgent(t *testing.T, dir, prelude string, code int) string {
	t.Helper()
	trailer := filepath.Join(dir, "trailer")
	if err := os.WriteFile(trailer, spool.End{Code: code, Stdout: 3}.Trailer(), 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "agent")
	if err := os.WriteFile(script, fmt.Appendf(nil, "#!/bin/sh\n%secho hi\ncat %s >&2\nexit %d\n", prelude, trailer, code), 0o755); err != nil {
		t.Fatal(err)
	}
	return script
}

func pfExec(t *testing.T, ctx context.Context, d Dialer, argv []string, stdin io.Reader) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	s := &portForwardStreamer{dialer: d, port: agent.ServePort}
	err := s.Exec(ctx, DefaultNamespace, "a-1", &corev1.PodExecOptions{Command: argv, Stdin: stdin != nil, Stdout: true, Stderr: true},
		remotecommand.StreamOptions{Stdin: stdin, Stdout: &out, Stderr: &errOut})
	return out.String(), errOut.String(), err
}

func TestPortForwardStreamer(t *testing.T) {
	d := &fakeDialer{server: shServer()}
	out, errOut, err := pfExec(t, t.Context(), d, []string{"/bin/sh", "-c", "cat; echo err >&2; exit 3"}, strings.NewReader("in\n"))
	var ce utilexec.CodeExitError
	if !errors.As(err, &ce) || ce.Code != 3 || out != "in\n" || errOut != "err\n" {
		t.Errorf("got %q %q %v", out, errOut, err)
	}
	if d.port != "7710" {
		t.Errorf("port-forward to port %q, want 7710", d.port)
	}
	if _, _, err := pfExec(t, t.Context(), d, []string{"/bin/sh", "-c", "exit 0"}, nil); err != nil {
		t.Errorf("exit 0: %v", err)
	}
}

func TestPortForwardStreamerNothingStarted(t *testing.T) {
	refused := &fakeDialer{refuse: "error forwarding port 7710 to pod a-1: failed to connect to localhost:7710 inside namespace: dial tcp4 127.0.0.1:7710: connect: connection refused"}
	_, _, err := pfExec(t, t.Context(), refused, []string{agent.Path, "agent", "nsenter", "--", "true"}, nil)
	if !errors.Is(err, ErrNotServing) || !errors.Is(err, podexec.ErrNotStarted) || podexec.StreamBroke(err) {
		t.Errorf("nothing listens: %v (StreamBroke %v)", err, podexec.StreamBroke(err))
	}
	noDial := &fakeDialer{dialErr: errors.New("pods \"a-1\" is forbidden: cannot create resource \"pods/portforward\"")}
	_, _, err = pfExec(t, t.Context(), noDial, []string{agent.Path, "agent", "nsenter", "--", "true"}, nil)
	if !errors.Is(err, podexec.ErrNotStarted) || podexec.StreamBroke(err) {
		t.Errorf("dial refused: %v", err)
	}
	// The agent's refusal (its own check of the command line).
	strict := &fakeDialer{server: &agentcmd.Server{}}
	_, _, err = pfExec(t, t.Context(), strict, []string{"/bin/sh", "-c", "id"}, nil)
	if !errors.Is(err, podexec.ErrNotStarted) || !strings.Contains(err.Error(), "only its own command lines") {
		t.Errorf("agent refusal: %v", err)
	}
}

// A connection cut after the agent answered is a broken stream (the command
// may run on): ExecResuming then resumes from the spool.
func TestPortForwardStreamerCut(t *testing.T) {
	d := &fakeDialer{cut: true}
	out, _, err := pfExec(t, t.Context(), d, []string{agent.Path, "agent", "nsenter", "--", "true"}, nil)
	if err == nil || errors.Is(err, podexec.ErrNotStarted) || !podexec.StreamBroke(err) || out != "partial\n" {
		t.Errorf("cut: %q %v", out, err)
	}
}

func TestPortForwardStreamerCancel(t *testing.T) {
	d := &fakeDialer{server: shServer()}
	ctx, cancel := context.WithTimeoutCause(t.Context(), 200*time.Millisecond, nodeexec.ErrTimeout)
	defer cancel()
	start := time.Now()
	_, _, err := pfExec(t, ctx, d, []string{"/bin/sh", "-c", "sleep 5"}, nil)
	if !errors.Is(err, nodeexec.ErrTimeout) || time.Since(start) > 3*time.Second {
		t.Errorf("after %s: %v", time.Since(start), err)
	}
}

func TestFallbackStreamer(t *testing.T) {
	for name, tc := range map[string]struct {
		primary       error
		wantSecondary bool
	}{
		"not serving":   {ErrNotServing, true},
		"exit code":     {utilexec.CodeExitError{Err: errors.New("x"), Code: 2}, false},
		"stream broken": {&cutError{received: true, err: io.ErrUnexpectedEOF}, false},
		"success":       {nil, false},
	} {
		t.Run(name, func(t *testing.T) {
			second := &fakeStreamer{}
			f := &fallbackStreamer{primary: errStreamer{tc.primary}, secondary: second}
			err := f.Exec(t.Context(), "ns", "p", &corev1.PodExecOptions{Command: []string{"x"}}, remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard})
			if (second.got != nil) != tc.wantSecondary {
				t.Errorf("secondary used = %v, want %v (err %v)", second.got != nil, tc.wantSecondary, err)
			}
			if !tc.wantSecondary && !errors.Is(err, tc.primary) && err != tc.primary {
				t.Errorf("err %v, want %v", err, tc.primary)
			}
		})
	}
}

type errStreamer struct{ err error }

func (s errStreamer) Exec(context.Context, string, string, *corev1.PodExecOptions, remotecommand.StreamOptions) error {
	return s.err
}

// An agent pod that announces its listener is reached through the
// port-forward, one per run, with no exec; SkipPreflight's lookup serves
// the run.
func TestWrapUsesPortForward(t *testing.T) {
	pod := agentPod("a-1", "node-1", true)
	pod.Annotations = map[string]string{agent.AnnotationServe: "7710"}
	client := fake.NewClientset(agentDS(), pod)
	exec := &fakeStreamer{}
	inner := &fakeInner{name: "nsenter"}
	b, err := Wrap(inner, WrapOptions{Client: client, Streamer: exec, Dialer: &fakeDialer{server: shServer()}, Commander: fixedCommander{node: "node-1"}, SpoolName: func() string { return "s1" }})
	if err != nil {
		t.Fatal(err)
	}
	if !b.SkipPreflight(t.Context(), "node-1") || b.SkipPreflight(t.Context(), "node-2") {
		t.Fatal("SkipPreflight: want true on node-1 (agent) only")
	}
	// The agent's stand-in: prints, then the spool's end mark, as a spooled
	// `nodeexec agent nsenter` does, and exits 4.
	fakeAgent := spooledAgent(t, t.TempDir(), "", 4)
	b, err = Wrap(inner, WrapOptions{Client: client, Streamer: exec, Dialer: &fakeDialer{server: &agentcmd.Server{Exe: fakeAgent}}, Commander: fixedCommander{node: "node-1"}, SpoolName: func() string { return "s1" }})
	if err != nil {
		t.Fatal(err)
	}
	_ = b.SkipPreflight(t.Context(), "node-1")
	client.ClearActions()
	var out bytes.Buffer
	res, err := b.Run(t.Context(), nodeexec.Request{Command: []string{"id"}, Stdout: &out, Timeout: 10 * time.Second})
	if len(client.Actions()) != 0 {
		t.Errorf("the run made API requests after SkipPreflight: %v", client.Actions())
	}
	if exec.got != nil {
		t.Errorf("exec was used: %+v", exec.got)
	}
	if res.ExitCode != 4 || res.Pod != "a-1" || nodeexec.ExitCode(err) != 4 || out.String() != "hi\n" {
		t.Errorf("result %+v err %v", res, err)
	}
	if inner.ran {
		t.Error("the wrapped backend ran")
	}
}
