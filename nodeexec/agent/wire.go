package agent

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/nodeexec/nodeexec/nodeexec/spool"
)

// The resident agent's own listener ("serve"): instead of having the
// container runtime exec every command (runc, a few hundred milliseconds),
// the agent's main process listens on the loopback interface of its own
// pod's network namespace — not the node's (the pod has no hostNetwork and
// no hostPort), so nothing on the pod network or the node reaches it — and a
// client reaches it only through the API server's port-forward
// (pods/portforward, authorised by the API server like pods/exec). On each
// connection the agent runs one of its own command lines (`nodeexec agent
// SUBCOMMAND ...`, the same it would run over exec) as a child process, and
// streams its output and exit status back.
const (
	// ServePort is the TCP port the resident agent listens on, on 127.0.0.1
	// inside its pod. The DaemonSet's pods carry it in AnnotationServe.
	ServePort = 7710
	// AnnotationServe, on an agent pod, is the loopback port its agent
	// serves WireVersion on. A pod without it (an agent image from before
	// the listener) is reached over exec.
	AnnotationServe = "nodeexec.io/agent-serve-port"
	// AnnotationRecord, on an agent pod, set to RecordRequired: its agent
	// starts a command for a port-forwarded client only with the run record
	// the request names (WireRequest.Record, see package
	// nodeexec/resident). Absent: no record is asked for.
	AnnotationRecord = "nodeexec.io/agent-run-record"
	// RecordRequired is AnnotationRecord's value on agents that require
	// run records.
	RecordRequired = "required"
	// AnnotationNsenterEnv, on an agent pod, set to "true": its agent's
	// nsenter takes EnvFromAgentFlag, so a request's Env (a shell's TERM)
	// reaches it through the listener. Absent (agents from before): such a
	// request gets the backend's pod.
	AnnotationNsenterEnv = "nodeexec.io/agent-nsenter-env"
	// WireVersion is the version of the protocol below; the agent refuses
	// other versions with a FrameError naming both.
	WireVersion = 1
	// MaxFramePayload bounds a frame's payload, in bytes.
	MaxFramePayload = 1 << 20
)

// ServeAddress is the address the resident agent listens on.
func ServeAddress() string { return "127.0.0.1:" + strconv.Itoa(ServePort) }

// FrameType is the first byte of a frame. A frame is the type, the
// payload's length (4 bytes, big-endian) and the payload.
//
// The client sends FrameRequest first, then FrameStdin, FrameStdinEOF and
// FrameResize in any order. The agent sends FrameStdout and FrameStderr,
// then exactly one FrameExit or FrameError, and closes the connection. A
// connection that ends before either was cut: the command's outcome is
// unknown to the client (the command runs on; a spooled command line can be
// attached to).
type FrameType byte

// The frame types.
const (
	// FrameRequest (client): a JSON WireRequest.
	FrameRequest FrameType = 'R'
	// FrameStdin (client): bytes for the command's standard input.
	FrameStdin FrameType = '0'
	// FrameStdinEOF (client): no more standard input; empty.
	FrameStdinEOF FrameType = 'E'
	// FrameResize (client): the terminal's width and height, two 2-byte
	// big-endian numbers (TTY requests).
	FrameResize FrameType = 'W'
	// FrameStdout and FrameStderr (agent): the command's output. A TTY
	// request has only FrameStdout.
	FrameStdout FrameType = '1'
	FrameStderr FrameType = '2'
	// FrameExit (agent): the command's exit status, 4-byte big-endian (128+N
	// for a command killed by signal N).
	FrameExit FrameType = 'X'
	// FrameError (agent): the command was not started; the payload says why.
	FrameError FrameType = '!'
)

// WireRequest is the client's first frame.
type WireRequest struct {
	// Version is WireVersion.
	Version int `json:"version"`
	// Command is the agent's command line: Path, "agent", a subcommand and
	// its arguments (the same as over exec).
	Command []string `json:"command"`
	// Stdin: the client sends standard input (else the command's is empty).
	Stdin bool `json:"stdin,omitempty"`
	// TTY: run the command on a pseudo-terminal (stdout and stderr merged).
	TTY bool `json:"tty,omitempty"`
	// Env: variables for `container-exec --env-from-agent`: the agent sets
	// ExecEnvVar to EncodeExecEnv(Env) in the environment of the process it
	// starts for Command, never on its command line. An agent from before
	// this field ignores it, and its container-exec refuses the flag.
	Env map[string]string `json:"env,omitempty"`
	// Record names the run record of Command: a Lease in the agent's
	// namespace that the client created for this node and command line
	// just before (see package nodeexec/resident). An agent that requires
	// records (AnnotationRecord) refuses, with RecordRefusedPrefix, a
	// command line that starts a command (NeedsRecord) without a valid one;
	// other agents ignore the field.
	Record string `json:"record,omitempty"`
}

// Validate checks r's version, that its command line is the agent's, and
// its Env (CheckExecEnv).
func (r WireRequest) Validate() error {
	if r.Version != WireVersion {
		return fmt.Errorf("protocol version %d: this agent speaks version %d (install the agent image that matches the client: nodeexec agent install)", r.Version, WireVersion)
	}
	if err := CheckRunnable(r.Command); err != nil {
		return err
	}
	return CheckExecEnv(r.Env)
}

// CheckRunnable checks that argv is one of the agent's own command lines
// (`Path agent SUBCOMMAND ...`) that runs a command: not the main process
// of an agent pod (hold, serve) nor a warm agent (warm), nor the debugpod
// backend's run and copy; and that every
// --spool it gives (before "--", in any of the flag's spellings) is a
// spool directory of the agents' (spool.CheckDir): spool.DefaultParent/NAME.
func CheckRunnable(argv []string) error {
	if !isAgentArgv(argv) {
		return fmt.Errorf("command line %q: the agent runs only its own command lines (%s agent SUBCOMMAND ...)", argv, Path)
	}
	if slices.Contains([]string{"hold", "serve", "warm"}, argv[2]) {
		return fmt.Errorf("command line %q: %q is the agent's main process, not a command to run", argv, argv[2])
	}
	if slices.Contains([]string{"run", "copy"}, argv[2]) {
		return fmt.Errorf("command line %q: %q is the debugpod backend's, for the user's image: a resident agent runs nsenter and container-exec", argv, argv[2])
	}
	for _, dir := range spoolArgs(argv[3:]) {
		if err := spool.CheckDir(dir); err != nil {
			return fmt.Errorf("command line %q: --spool: %w", argv, err)
		}
	}
	return nil
}

// spoolArgs returns the values args gives to the agent's --spool flag
// before "--": `--spool DIR`, `-spool DIR`, `--spool=DIR`, `-spool=DIR`.
// A flag without its value yields "". It looks at every word, not only at
// flag positions: a word that another flag takes as its value is checked
// too, which refuses more, never less, than the agent's parser accepts.
func spoolArgs(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "spool" {
			continue
		}
		switch {
		case hasValue:
			out = append(out, value)
		case i+1 < len(args):
			i++
			out = append(out, args[i])
		default:
			out = append(out, "")
		}
	}
	return out
}

// CannotExecPrefix starts the FrameError payload of a request whose
// process the agent could not start because it cannot execute its own
// binary (Path is gone from its container, or not executable): the agent
// cannot run anything until its container restarts, and exec into its pod
// fails the same way. The rest of the payload says why.
const CannotExecPrefix = "the agent cannot execute its binary: "

// RecordRefusedPrefix starts the FrameError payload of a request that an
// agent requiring run records refused for its record: none named, none
// found, or one that does not match the request. Nothing ran; the rest of
// the payload says why.
const RecordRefusedPrefix = "run record refused: "

// NeedsRecord reports whether the agent command line argv starts a
// command, and so needs a run record where records are required: every
// subcommand but attach, which reads (--check, offsets) or stops (--stop)
// the spool of a command that was recorded when it started.
func NeedsRecord(argv []string) bool {
	return !(len(argv) >= 3 && argv[2] == "attach")
}

// recordedCommand is the agent command line argv as a run record holds
// it: without the `--spool DIR` and `--timeout D` that SpoolFor and
// WithTimeout insert right after the subcommand, which differ from node to
// node and from try to try. A pure function; argv is not modified.
func recordedCommand(argv []string) []string {
	if len(argv) < 3 {
		return slices.Clone(argv)
	}
	rest := argv[3:]
	for len(rest) >= 2 && (rest[0] == "--spool" || rest[0] == "--timeout") {
		rest = rest[2:]
	}
	return append(slices.Clone(argv[:3]), rest...)
}

// FrameWriter writes frames; it is safe for concurrent use.
type FrameWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// NewFrameWriter returns a FrameWriter on w.
func NewFrameWriter(w io.Writer) *FrameWriter { return &FrameWriter{w: w} }

// Write writes one frame of type t; a payload above MaxFramePayload is
// split into several frames.
func (f *FrameWriter) Write(t FrameType, p []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		n := min(len(p), MaxFramePayload)
		var hdr [5]byte
		hdr[0] = byte(t)
		binary.BigEndian.PutUint32(hdr[1:], uint32(n))
		if _, err := f.w.Write(append(hdr[:], p[:n]...)); err != nil {
			return err
		}
		p = p[n:]
		if len(p) == 0 {
			return nil
		}
	}
}

// WriteExit writes FrameExit with code.
func (f *FrameWriter) WriteExit(code int) error {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(int32(code)))
	return f.Write(FrameExit, b[:])
}

// WriteResize writes FrameResize.
func (f *FrameWriter) WriteResize(width, height uint16) error {
	var b [4]byte
	binary.BigEndian.PutUint16(b[:2], width)
	binary.BigEndian.PutUint16(b[2:], height)
	return f.Write(FrameResize, b[:])
}

// writerFunc adapts a frame type to io.Writer.
type frameTypeWriter struct {
	f *FrameWriter
	t FrameType
}

func (w frameTypeWriter) Write(p []byte) (int, error) {
	if err := w.f.Write(w.t, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Writer returns an io.Writer that sends each write as frames of type t.
func (f *FrameWriter) Writer(t FrameType) io.Writer { return frameTypeWriter{f: f, t: t} }

// ErrFrameTooLarge: a frame announced a payload above MaxFramePayload.
var ErrFrameTooLarge = errors.New("agent protocol: frame payload too large")

// ReadFrame reads one frame. Its payload is valid until the next call with
// the same buf (it is read into buf when buf is large enough). At the end
// of r before a frame's first byte it returns io.EOF; within a frame,
// io.ErrUnexpectedEOF.
func ReadFrame(r *bufio.Reader, buf []byte) (FrameType, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxFramePayload {
		return 0, nil, fmt.Errorf("%w: %d bytes (at most %d)", ErrFrameTooLarge, n, MaxFramePayload)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return FrameType(hdr[0]), buf, nil
}

// ExitCodeOf decodes a FrameExit payload.
func ExitCodeOf(p []byte) (int, error) {
	if len(p) != 4 {
		return 0, fmt.Errorf("agent protocol: exit frame of %d bytes, want 4", len(p))
	}
	return int(int32(binary.BigEndian.Uint32(p))), nil
}

// SizeOf decodes a FrameResize payload.
func SizeOf(p []byte) (width, height uint16, err error) {
	if len(p) != 4 {
		return 0, 0, fmt.Errorf("agent protocol: resize frame of %d bytes, want 4", len(p))
	}
	return binary.BigEndian.Uint16(p[:2]), binary.BigEndian.Uint16(p[2:]), nil
}

// EncodeRequest is the FrameRequest payload of r.
func EncodeRequest(r WireRequest) ([]byte, error) { return json.Marshal(r) }

// DecodeRequest parses and validates a FrameRequest payload.
func DecodeRequest(p []byte) (WireRequest, error) {
	var r WireRequest
	if err := json.Unmarshal(p, &r); err != nil {
		return r, fmt.Errorf("agent protocol: bad request frame: %w", err)
	}
	return r, r.Validate()
}
