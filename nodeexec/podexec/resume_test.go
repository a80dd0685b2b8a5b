package podexec_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/utils/clock"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nodeexec/spool"
)

// spoolStreamer plays the agent over a real spool directory: the first exec
// runs the command into the spool and serves it until cutAfter bytes of
// stdout, then the stream is cut (the command runs on); later execs answer
// the check and attach command lines with spool.Attach. down is how many
// execs after the cut fail as an API server that is restarting does.
type spoolStreamer struct {
	dir      string
	cutAfter int
	down     int
	execs    []string
	gone     bool
	cleanCut bool
}

const (
	checkCmd  = "check"
	attachCmd = "attach"
)

func (s *spoolStreamer) Exec(ctx context.Context, _, _ string, opts *corev1.PodExecOptions, streams remotecommand.StreamOptions) error {
	s.execs = append(s.execs, opts.Command[0])
	switch opts.Command[0] {
	case "run":
		sp, err := spool.Create(s.dir)
		if err != nil {
			return err
		}
		// The command: 300 lines on stdout, every 30th also on stderr, exit 7.
		for i := range 300 {
			fmt.Fprintf(sp.Stdout(), "line %d\n", i)
			if i%30 == 0 {
				fmt.Fprintf(sp.Stderr(), "err %d\n", i)
			}
		}
		sp.Finish(7)
		end, err := sp.Serve(ctx, &limitWriter{w: streams.Stdout, n: s.cutAfter}, streams.Stderr)
		if err == nil {
			streams.Stderr.Write(end.Trailer())
			return utilexec.CodeExitError{Err: errors.New("exit 7"), Code: 7}
		}
		if s.cleanCut {
			return nil // the API server reports a cut as a success when the runtime stops
		}
		return io.ErrUnexpectedEOF // the stream was cut
	}
	if s.down > 0 {
		s.down--
		return errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
	}
	if s.gone {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "p")
	}
	switch opts.Command[0] {
	case checkCmd:
		if opts.Stdin {
			return errors.New("check with stdin")
		}
		if !spool.Exists(s.dir) {
			return utilexec.CodeExitError{Err: errors.New("exit 3"), Code: 3}
		}
		return nil
	case attachCmd:
		o, _ := strconv.ParseInt(opts.Command[1], 10, 64)
		e, _ := strconv.ParseInt(opts.Command[2], 10, 64)
		end, err := spool.Attach(ctx, s.dir, o, e, streams.Stdout, streams.Stderr, time.Millisecond)
		if err != nil {
			return err
		}
		streams.Stderr.Write(end.Trailer())
		if end.Code != 0 {
			return utilexec.CodeExitError{Err: fmt.Errorf("exit %d", end.Code), Code: end.Code}
		}
		return nil
	}
	return fmt.Errorf("unexpected command %q", opts.Command)
}

// limitWriter takes n bytes, then fails.
type limitWriter struct {
	w io.Writer
	n int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if len(p) > l.n {
		k, _ := l.w.Write(p[:l.n])
		l.n -= k
		return k, io.ErrClosedPipe
	}
	k, err := l.w.Write(p)
	l.n -= k
	return k, err
}

func resume() *podexec.Resume {
	return &podexec.Resume{
		Check:        []string{checkCmd},
		CheckMissing: 3,
		Attach: func(o, e int64) []string {
			return []string{attachCmd, strconv.FormatInt(o, 10), strconv.FormatInt(e, 10)}
		},
	}
}

func wantOutput() (string, string) {
	var out, errs strings.Builder
	for i := range 300 {
		fmt.Fprintf(&out, "line %d\n", i)
		if i%30 == 0 {
			fmt.Fprintf(&errs, "err %d\n", i)
		}
	}
	return out.String(), errs.String()
}

func TestExecResuming(t *testing.T) {
	wantOut, wantErr := wantOutput()
	for name, tt := range map[string]struct {
		cutAfter, down int
		gone, missing  bool
		cleanCut       bool
		wantCode       int
		wantUnknown    bool
		wantExecs      string
	}{
		"no cut":                  {cutAfter: 1 << 20, wantCode: 7, wantExecs: "run"},
		"cut, reattached":         {cutAfter: 1000, wantCode: 7, wantExecs: "run check attach"},
		"cut at 0 bytes":          {cutAfter: 0, wantCode: 7, wantExecs: "run check attach"},
		"cut reported as success": {cutAfter: 700, cleanCut: true, wantCode: 7, wantExecs: "run check attach"},
		"API server down 3 tries": {cutAfter: 500, down: 3, wantCode: 7, wantExecs: "run check check check check attach"},
		"pod gone":                {cutAfter: 500, gone: true, wantUnknown: true, wantExecs: "run check"},
		"spool lost":              {cutAfter: 500, missing: true, wantUnknown: true, wantExecs: "run check"},
	} {
		t.Run(name, func(t *testing.T) {
			s := &spoolStreamer{dir: filepath.Join(t.TempDir(), "spool"), cutAfter: tt.cutAfter, down: tt.down, gone: tt.gone, cleanCut: tt.cleanCut}
			var out, errs bytes.Buffer
			opts := &corev1.PodExecOptions{Command: []string{"run"}, Stdin: true, Stdout: true, Stderr: true}
			r := resume()
			if tt.missing {
				r.Check = []string{checkCmd}
				s.dir += "-elsewhere" // the check looks at a spool that is not there
				inner := s
				streamer := streamerFunc(func(ctx context.Context, ns, pod string, o *corev1.PodExecOptions, st remotecommand.StreamOptions) error {
					if o.Command[0] == "run" {
						defer func() { inner.dir += "-lost" }()
					}
					return inner.Exec(ctx, ns, pod, o, st)
				})
				err := podexec.ExecResuming(t.Context(), streamer, &instantClock{}, "ns", "p", opts, remotecommand.StreamOptions{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errs}, r)
				check(t, err, tt.wantUnknown, tt.wantCode)
				return
			}
			clk := &instantClock{}
			err := podexec.ExecResuming(t.Context(), s, clk, "ns", "p", opts, remotecommand.StreamOptions{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errs}, r)
			check(t, err, tt.wantUnknown, tt.wantCode)
			if tt.down == 3 && fmt.Sprint(clk.waits) != "[250ms 500ms 1s 2s]" {
				t.Errorf("backoff %v, want [250ms 500ms 1s 2s]", clk.waits)
			}
			if got := strings.Join(s.execs, " "); got != tt.wantExecs {
				t.Errorf("execs %q, want %q", got, tt.wantExecs)
			}
			if !tt.wantUnknown && (out.String() != wantOut || errs.String() != wantErr) {
				t.Errorf("output not whole once: stdout %d bytes (want %d), stderr %q", out.Len(), len(wantOut), errs.String())
			}
		})
	}
}

func check(t *testing.T, err error, wantUnknown bool, wantCode int) {
	t.Helper()
	if wantUnknown {
		if !errors.Is(err, nodeexec.ErrOutcomeUnknown) {
			t.Fatalf("err = %v, want ErrOutcomeUnknown", err)
		}
		return
	}
	var ce utilexec.CodeExitError
	if !errors.As(err, &ce) || ce.Code != wantCode {
		t.Fatalf("err = %v, want exit %d", err, wantCode)
	}
}

type streamerFunc func(ctx context.Context, ns, pod string, o *corev1.PodExecOptions, st remotecommand.StreamOptions) error

func (f streamerFunc) Exec(ctx context.Context, ns, pod string, o *corev1.PodExecOptions, st remotecommand.StreamOptions) error {
	return f(ctx, ns, pod, o, st)
}

func TestExecResumingEndsWithContext(t *testing.T) {
	s := &spoolStreamer{dir: filepath.Join(t.TempDir(), "spool"), cutAfter: 10, down: 1 << 30}
	ctx, cancel := context.WithTimeoutCause(t.Context(), 600*time.Millisecond, nodeexec.ErrTimeout)
	defer cancel()
	err := podexec.ExecResuming(ctx, s, clock.RealClock{}, "ns", "p", &corev1.PodExecOptions{Command: []string{"run"}, Stdout: true, Stderr: true},
		remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard}, resume())
	if !errors.Is(err, nodeexec.ErrTimeout) {
		t.Fatalf("err = %v, want the context's cause", err)
	}
}

func TestExecResumingTTYNotResumed(t *testing.T) {
	s := &spoolStreamer{dir: filepath.Join(t.TempDir(), "spool"), cutAfter: 10}
	err := podexec.ExecResuming(t.Context(), s, clock.RealClock{}, "ns", "p", &corev1.PodExecOptions{Command: []string{"run"}, Stdout: true, TTY: true},
		remotecommand.StreamOptions{Stdout: io.Discard, Tty: true}, resume())
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(s.execs) != 1 {
		t.Fatalf("err = %v after %q, want the cut stream's error and no reconnection", err, s.execs)
	}
}

// instantClock fires every timer at once and records the durations asked for.
type instantClock struct {
	clock.RealClock
	waits []time.Duration
}

func (c *instantClock) NewTimer(d time.Duration) clock.Timer {
	c.waits = append(c.waits, d)
	return c.RealClock.NewTimer(0)
}
