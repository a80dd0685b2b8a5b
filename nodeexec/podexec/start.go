package podexec

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// Exit statuses of a command the container runtime could not start, as a
// shell's (and the nsenter agent's).
const (
	// ExitNotExecutable: the command exists but cannot be executed
	// (permission denied, a directory, not a valid executable).
	ExitNotExecutable = 126
	// ExitNotFound: the command was not found (in $PATH, or at its path).
	ExitNotFound = 127
)

// StartError reports that the container runtime could not start the
// command at all: it was not found or is not executable. The runtime said
// so on the exec's status (the kubelet's answer once the stream ended), so
// the command certainly never ran: the outcome is known, and it is not a
// stream cut (StreamBroke is false). It unwraps to a *nodeexec.ExitError
// with Code, so nodeexec.ExitCode gives 127 (not found) or 126 (not
// executable), as a shell would.
type StartError struct {
	// Node is the node the command was to run on.
	Node string
	// Command is the program the runtime could not start, as it named it.
	Command string
	// Code is ExitNotFound or ExitNotExecutable.
	Code int
	// Runtime is the runtime's own words, such as `exec: "nosuch":
	// executable file not found in $PATH`.
	Runtime string
}

func (e *StartError) Error() string {
	what := "was not found"
	if e.Code == ExitNotExecutable {
		what = "is not executable"
	}
	return fmt.Sprintf("command %q %s on node %q, so it did not run (exit code %d, as a shell's; the container runtime said: %s)",
		e.Command, what, e.Node, e.Code, e.Runtime)
}

// Unwrap returns the *nodeexec.ExitError of Code.
func (e *StartError) Unwrap() error { return &nodeexec.ExitError{Node: e.Node, Code: e.Code} }

// The container runtimes' words for a command they could not start, as
// they reach the client in the exec's status (the kubelet's "error
// executing command in container: ..." with the runtime's error):
//
//	runc (containerd, CRI-O, Docker), not found in $PATH:
//	  OCI runtime exec failed: exec failed: unable to start container process: exec: "nosuch": executable file not found in $PATH: unknown
//	runc, a path that does not exist (runc 1.2 writes exec "/nonexistent"):
//	  ... unable to start container process: exec: "/nonexistent": stat /nonexistent: no such file or directory: unknown
//	runc, a file without execute permission (or a directory):
//	  ... unable to start container process: exec: "/etc/hostname": permission denied: unknown
//	runc, execve's own refusal (EACCES, ENOENT of a missing interpreter, ENOEXEC):
//	  ... unable to start container process: exec /script.sh: no such file or directory: unknown
//	crun:
//	  executable file `nosuch` not found in $PATH: No such file or directory
//	  open executable: Permission denied
//
// runtimeMarker must be in the message too: the runtime's prefix for a
// process it failed to start, which a cut stream's error (EOF, a reset
// connection, a WebSocket close) never carries.
var (
	runtimeMarker = regexp.MustCompile(`OCI runtime exec failed|unable to start container process|error executing command in container|executable file .* not found in \$PATH|open executable: `)
	startFailures = []struct {
		re   *regexp.Regexp
		code int
	}{
		{regexp.MustCompile(`exec:? "([^"]*)": executable file not found in \$PATH`), ExitNotFound},
		{regexp.MustCompile(`exec:? "([^"]*)": stat [^\n]*?: no such file or directory`), ExitNotFound},
		{regexp.MustCompile(`exec:? "([^"]*)": (?:permission denied|is a directory)`), ExitNotExecutable},
		{regexp.MustCompile(`unable to start container process: exec (\S+): no such file or directory`), ExitNotFound},
		{regexp.MustCompile(`unable to start container process: exec (\S+): (?:permission denied|exec format error|is a directory)`), ExitNotExecutable},
		{regexp.MustCompile("executable file `([^`]*)` not found in \\$PATH"), ExitNotFound},
		{regexp.MustCompile(`()open executable: [Pp]ermission denied`), ExitNotExecutable},
	}
)

// StartFailure classifies an exec's error: a *StartError when the
// container runtime said it could not start the command (see the messages
// above), else nil. argv0 names the command when the runtime does not.
// A non-zero exit (a client-go CodeExitError: the command ran) or any
// other failure — a cut stream above all — is never one: it keeps its own
// meaning, so a broken stream is never taken for a command that did not
// start.
func StartFailure(err error, node, argv0 string) *StartError {
	if err == nil || !runtimeMarker.MatchString(err.Error()) {
		return nil
	}
	if _, exited := exitCode(err); exited {
		return nil
	}
	var se *StartError
	if errors.As(err, &se) {
		return se
	}
	msg := err.Error()
	for _, f := range startFailures {
		if m := f.re.FindStringSubmatchIndex(msg); m != nil {
			cmd := msg[m[2]:m[3]]
			if cmd == "" {
				cmd = argv0
			}
			return &StartError{Node: node, Command: cmd, Code: f.code, Runtime: strings.TrimSuffix(msg[m[0]:], ": unknown")}
		}
	}
	return nil
}
