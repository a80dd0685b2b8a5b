package podexec_test

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

// kubeletExec is how the kubelet's exec status reaches the client when the
// runtime could not start the command (client-go's error decoder turns the
// Status's message into the error).
func kubeletExec(runtimeMsg string) error {
	return errors.New(`Internal error occurred: error executing command in container: failed to exec in container: failed to start exec "e787cb7a89ef8c03f27e69169bd7d2fef092901b3180116ebfa7a5df5b563ac1": ` + runtimeMsg)
}

func TestStartFailure(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want *podexec.StartError // nil: not a start failure
	}{
		{
			name: "runc: not in $PATH",
			err:  kubeletExec(`OCI runtime exec failed: exec failed: unable to start container process: exec: "nosuch": executable file not found in $PATH: unknown`),
			want: &podexec.StartError{Node: "n1", Command: "nosuch", Code: 127, Runtime: `exec: "nosuch": executable file not found in $PATH`},
		},
		{
			name: "runc: no such path",
			err:  kubeletExec(`OCI runtime exec failed: exec failed: unable to start container process: exec: "/nonexistent": stat /nonexistent: no such file or directory: unknown`),
			want: &podexec.StartError{Node: "n1", Command: "/nonexistent", Code: 127, Runtime: `exec: "/nonexistent": stat /nonexistent: no such file or directory`},
		},
		{
			name: "runc 1.2: no such path",
			err:  kubeletExec(`OCI runtime exec failed: exec failed: unable to start container process: exec "/bin/sh": stat /bin/sh: no such file or directory: unknown`),
			want: &podexec.StartError{Node: "n1", Command: "/bin/sh", Code: 127, Runtime: `exec "/bin/sh": stat /bin/sh: no such file or directory`},
		},
		{
			name: "runc: not executable",
			err:  kubeletExec(`OCI runtime exec failed: exec failed: unable to start container process: exec: "/etc/hostname": permission denied: unknown`),
			want: &podexec.StartError{Node: "n1", Command: "/etc/hostname", Code: 126, Runtime: `exec: "/etc/hostname": permission denied`},
		},
		{
			name: "runc: execve refused",
			err:  kubeletExec(`OCI runtime exec failed: exec failed: unable to start container process: exec /tmp/x.sh: exec format error: unknown`),
			want: &podexec.StartError{Node: "n1", Command: "/tmp/x.sh", Code: 126, Runtime: `unable to start container process: exec /tmp/x.sh: exec format error`},
		},
		{
			name: "runc: interpreter missing",
			err:  kubeletExec(`OCI runtime exec failed: exec failed: unable to start container process: exec /app/run: no such file or directory: unknown`),
			want: &podexec.StartError{Node: "n1", Command: "/app/run", Code: 127, Runtime: `unable to start container process: exec /app/run: no such file or directory`},
		},
		{
			name: "crun: not found",
			err:  kubeletExec("executable file `nosuch` not found in $PATH: No such file or directory"),
			want: &podexec.StartError{Node: "n1", Command: "nosuch", Code: 127, Runtime: "executable file `nosuch` not found in $PATH: No such file or directory"},
		},
		{
			name: "crun: not executable, named by argv",
			err:  kubeletExec("open executable: Permission denied"),
			want: &podexec.StartError{Node: "n1", Command: "/argv0", Code: 126, Runtime: "open executable: Permission denied"},
		},
		// Never a start failure: the command ran, or the outcome is unknown.
		{name: "exit status", err: utilexec.CodeExitError{Err: errors.New(`command terminated with exit code 127: exec: "x": executable file not found in $PATH`), Code: 127}},
		{name: "stream cut", err: errors.New("websocket: close 1006 (abnormal closure): unexpected EOF")},
		{name: "connection reset", err: fmt.Errorf("read tcp 10.0.0.1:443: %w", syscall.ECONNRESET)},
		{name: "EOF", err: io.ErrUnexpectedEOF},
		{name: "the command's own words, no runtime marker", err: errors.New(`sh: exec: "x": executable file not found in $PATH`)},
		{name: "a cut stream naming a missing file", err: errors.New("error reading from error stream: open /dev/pts/0: no such file or directory")},
		{name: "runtime failure of another kind", err: kubeletExec(`OCI runtime exec failed: exec failed: unable to start container process: chdir to cwd ("/nope") set in config.json failed: no such file or directory: unknown`)},
		{name: "runtime failure with permission denied elsewhere", err: kubeletExec(`OCI runtime exec failed: exec failed: unable to start container process: open /dev/pts/0: permission denied: unknown`)},
		{name: "API refusal", err: apierrors.NewForbidden(schema.GroupResource{Resource: "pods/exec"}, "p", errors.New("no"))},
		{name: "nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := podexec.StartFailure(tt.err, "n1", "/argv0")
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("StartFailure(%v) (-want +got):\n%s", tt.err, diff)
			}
			if tt.want != nil && podexec.StreamBroke(tt.err) {
				t.Errorf("StreamBroke(%v) is true for a command that never started", tt.err)
			}
			if got == nil {
				return
			}
			if code := nodeexec.ExitCode(got); code != tt.want.Code {
				t.Errorf("nodeexec.ExitCode = %d, want %d", code, tt.want.Code)
			}
			if errors.Is(got, nodeexec.ErrOutcomeUnknown) {
				t.Errorf("%v is an unknown outcome", got)
			}
		})
	}
}
