package resident

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/utils/clock"

	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

// ErrNotServing: the port-forward reached the agent pod but nothing
// listened on the agent's port (an agent that restarts, or an image
// without the listener). Nothing ran (it wraps podexec.ErrNotStarted); Run
// then uses exec.
var ErrNotServing = fmt.Errorf("the resident agent does not listen on its port: %w", podexec.ErrNotStarted)

// Dialer opens a port-forward connection to a pod (tests replace it).
type Dialer interface {
	Dial(ctx context.Context, namespace, pod string) (httpstream.Connection, error)
}

// apiDialer is the Dialer through the API server's pods/portforward:
// WebSocket first (SPDY tunnelled over it), SPDY when the server cannot
// upgrade to WebSocket, as kubectl port-forward does.
type apiDialer struct {
	config *rest.Config
	client rest.Interface
}

// NewDialer returns the Dialer for a real cluster (RBAC: create on
// pods/portforward, and get since Kubernetes 1.35's WebSocket upgrade).
func NewDialer(config *rest.Config, client rest.Interface) Dialer {
	return &apiDialer{config: config, client: client}
}

func (d *apiDialer) Dial(ctx context.Context, namespace, pod string) (httpstream.Connection, error) {
	u := d.client.Post().Namespace(namespace).Resource("pods").Name(pod).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(d.config)
	if err != nil {
		return nil, fmt.Errorf("port-forward transport: %w", err)
	}
	spdyDialer := spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	wsDialer, err := portforward.NewSPDYOverWebsocketDialerForStreaming(u, d.config)
	if err != nil {
		return nil, fmt.Errorf("port-forward websocket dialer: %w", err)
	}
	dialer := portforward.NewFallbackDialerForStreaming(wsDialer, spdyDialer, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	type dialed struct {
		conn httpstream.Connection
		err  error
	}
	ch := make(chan dialed, 1)
	go func() {
		conn, _, err := dialer.Dial(portforward.PortForwardProtocolV1Name)
		ch <- dialed{conn, err}
	}()
	select {
	case r := <-ch:
		return r.conn, r.err
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.conn != nil {
				r.conn.Close()
			}
		}()
		return nil, context.Cause(ctx)
	}
}

// portForwardStreamer is a podexec.Streamer that reaches the agent's
// listener (agent.ServePort) through a port-forward instead of having the
// container runtime exec the command: one API request, no runc exec. Its
// errors are podexec.Streamer's: nil for exit 0, a
// utilexec.CodeExitError for another status, a connection cut after the
// request was sent (the command may run) as an error that
// podexec.StreamBroke reports; an error wrapping ErrNotServing when nothing
// listened (nothing ran).
type portForwardStreamer struct {
	dialer Dialer
	port   int
	// env goes with the command line envFor (as WireRequest.Env), and with
	// no other: the run's own command, not its spool's attach or stop.
	env    map[string]string
	envFor []string
	// record, when set, creates the run record of the command line envFor
	// before it is sent (an agent that requires records).
	record *recorder
}

// recorder creates run records (agent.CreateRecord) for one node's command line.
type recorder struct {
	client kubernetes.Interface
	clock  clock.PassiveClock
	name   func() string    // a random name, after RecordNamePrefix
	spec   agent.RecordSpec // but Name
}

// create creates a run record and returns its name.
func (r *recorder) create(ctx context.Context) (string, error) {
	s := r.spec
	s.Name = agent.RecordNamePrefix + r.name()
	return s.Name, agent.CreateRecord(ctx, r.client, s, r.clock.Now())
}

// delete deletes the record name that no agent consumed, whatever ctx's
// state, and logs a failure (the collector deletes it after its deadline).
func (r *recorder) delete(ctx context.Context, name string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordDeleteTimeout)
	defer cancel()
	if err := agent.DeleteRecord(ctx, r.client, r.spec.Namespace, name); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "could not delete the unused run record: nodeexec gc deletes it after its deadline", "namespace", r.spec.Namespace, "name", name)
	}
}

// recordDeleteTimeout bounds the deletion of an unused run record.
const recordDeleteTimeout = 10 * time.Second

func (s *portForwardStreamer) Exec(ctx context.Context, namespace, pod string, opts *corev1.PodExecOptions, streams remotecommand.StreamOptions) (err error) {
	main := slices.Equal(opts.Command, s.envFor)
	var (
		record    string
		recordErr error
		recorded  sync.WaitGroup
	)
	if s.record != nil && main {
		// The record is created while the port-forward is dialled: the
		// agent reads it when the request arrives, after both.
		recorded.Go(func() { record, recordErr = s.record.create(ctx) })
		defer func() {
			recorded.Wait()
			if recordErr == nil && errors.Is(err, podexec.ErrNotStarted) {
				s.record.delete(ctx, record) // no agent consumed it
			}
		}()
	}
	conn, err := s.dialer.Dial(ctx, namespace, pod)
	recorded.Wait()
	if err == nil && recordErr != nil {
		conn.Close()
		err = recordErr
	}
	if err != nil {
		return fmt.Errorf("port-forward to %s/%s: %w: %w", namespace, pod, podexec.ErrNotStarted, err)
	}
	defer conn.Close()
	headers := http.Header{}
	headers.Set(corev1.StreamType, corev1.StreamTypeError)
	headers.Set(corev1.PortHeader, strconv.Itoa(s.port))
	headers.Set(corev1.PortForwardRequestIDHeader, "0")
	errorStream, err := conn.CreateStream(headers)
	if err != nil {
		return fmt.Errorf("port-forward to %s/%s: creating the error stream: %w: %w", namespace, pod, podexec.ErrNotStarted, err)
	}
	errorStream.Close() // nothing to send on it
	remoteErr := make(chan string, 1)
	go func() {
		msg, _ := io.ReadAll(errorStream)
		remoteErr <- strings.TrimSpace(string(msg))
	}()
	headers.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := conn.CreateStream(headers)
	if err != nil {
		return fmt.Errorf("port-forward to %s/%s: creating the data stream: %w: %w", namespace, pod, podexec.ErrNotStarted, err)
	}
	// Ending ctx ends the connection, and with it every read and write below.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	var env map[string]string
	if len(s.env) > 0 && main {
		env = s.env
	}
	err = runOverConn(data, opts, streams, env, record)
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	var cut *cutError
	if errors.As(err, &cut) && !cut.received {
		// Nothing came back: did the agent's pod refuse the connection?
		select {
		case msg := <-remoteErr:
			if msg != "" {
				if strings.Contains(msg, "connection refused") {
					return fmt.Errorf("port-forward to %s/%s port %d: %w: %s", namespace, pod, s.port, ErrNotServing, msg)
				}
				return fmt.Errorf("port-forward to %s/%s port %d: %s: %w", namespace, pod, s.port, msg, err)
			}
		case <-conn.CloseChan():
		}
	}
	return err
}

// cutError: the connection ended before the agent's exit frame.
type cutError struct {
	received bool // a frame came from the agent: it ran the command
	err      error
}

func (e *cutError) Error() string {
	if e.received {
		return fmt.Sprintf("the connection to the agent was cut before the command's exit status: %v", e.err)
	}
	return fmt.Sprintf("the connection to the agent ended before it answered: %v", e.err)
}

func (e *cutError) Unwrap() error { return e.err }

// runOverConn sends opts' command line on conn (with env, the variables
// for `container-exec --env-from-agent`), its standard input and
// terminal sizes, and writes what comes back to streams, until the exit
// frame.
func runOverConn(conn io.ReadWriter, opts *corev1.PodExecOptions, streams remotecommand.StreamOptions, env map[string]string, record string) error {
	fw := agent.NewFrameWriter(conn)
	req, err := agent.EncodeRequest(agent.WireRequest{Version: agent.WireVersion, Command: opts.Command, Stdin: opts.Stdin && streams.Stdin != nil, TTY: opts.TTY, Env: env, Record: record})
	if err != nil {
		return err
	}
	if err := fw.Write(agent.FrameRequest, req); err != nil {
		return &cutError{err: err}
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	defer func() {
		close(done)
	}()
	if opts.Stdin && streams.Stdin != nil {
		// Not waited for: a read of the caller's stdin (a terminal) may
		// block past the command's end, as with kubectl exec.
		go func() {
			if _, err := io.Copy(fw.Writer(agent.FrameStdin), streams.Stdin); err == nil {
				_ = fw.Write(agent.FrameStdinEOF, nil)
			}
		}()
	}
	if opts.TTY && streams.TerminalSizeQueue != nil {
		wg.Go(func() {
			for {
				size := streams.TerminalSizeQueue.Next()
				if size == nil {
					return
				}
				select {
				case <-done:
					return
				default:
				}
				if fw.WriteResize(size.Width, size.Height) != nil {
					return
				}
			}
		})
	}
	stdout, stderr := orDiscard(streams.Stdout), orDiscard(streams.Stderr)
	r := bufio.NewReaderSize(conn, 64<<10)
	buf := make([]byte, 64<<10)
	received := false
	for {
		t, p, err := agent.ReadFrame(r, buf)
		if err != nil {
			return &cutError{received: received, err: err}
		}
		received = true
		switch t {
		case agent.FrameStdout:
			if _, err := stdout.Write(p); err != nil {
				return fmt.Errorf("writing the command's output: %w", err)
			}
		case agent.FrameStderr:
			if _, err := stderr.Write(p); err != nil {
				return fmt.Errorf("writing the command's error output: %w", err)
			}
		case agent.FrameExit:
			code, err := agent.ExitCodeOf(p)
			if err != nil {
				return err
			}
			if code == 0 {
				return nil
			}
			return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", code), Code: code}
		case agent.FrameError:
			if strings.HasPrefix(string(p), agent.CannotExecPrefix) {
				return fmt.Errorf("%w: %w: %s", ErrAgentUnusable, errRefused, p)
			}
			if why, ok := strings.CutPrefix(string(p), agent.RecordRefusedPrefix); ok {
				return fmt.Errorf("%w: %s", ErrRecordRefused, why)
			}
			return fmt.Errorf("%w: the agent refused the request: %s", errRefused, p)
		default:
			return fmt.Errorf("agent protocol: unexpected frame %q from the agent", t)
		}
	}
}

// errRefused: the agent answered with FrameError: nothing ran.
var errRefused = podexec.ErrNotStarted
