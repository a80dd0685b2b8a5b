package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/nodeexec/nodeexec/internal/asciicast"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
)

func TestShellBadInput(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"shell"}, "give the node"},
		{[]string{"shell", "--timeout", "0s", "n1"}, "--timeout"},
		{[]string{"shell", "--backend", "nope", "n1"}, "unknown --backend"},
		{[]string{"shell", "--cpu-request", "lots", "n1"}, "--cpu-request"},
	} {
		got := run(t, "", tt.args...)
		if got.code != 2 || !strings.Contains(got.errOut, tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tt.args, got.code, got.errOut, tt.want)
		}
	}
}

func TestShellArgv(t *testing.T) {
	pick := "if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec sh -l"
	for _, tt := range []struct {
		profile string
		want    []string
	}{
		{"sysadmin", []string{"chroot", "/host", "/bin/sh", "-c", pick}},
		{"general", []string{"chroot", "/host", "/bin/sh", "-c", pick}},
		{"netadmin", []string{"sh", "-c", pick}},
		{"restricted", []string{"sh", "-c", pick}},
	} {
		b, err := debugpod.New(debugpod.Options{PodOptions: debugpod.PodOptions{Client: fake.NewClientset(), Config: &rest.Config{}}, Profile: tt.profile})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tt.want, shellArgv(b)); diff != "" {
			t.Errorf("profile %s (-want +got):\n%s", tt.profile, diff)
		}
	}
}

func TestShellRecordBadInput(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "old.cast")
	if err := os.WriteFile(existing, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"shell", "--record-input", "n1"}, "give --record FILE too"},
		{[]string{"shell", "--force", "n1"}, "give --record FILE too"},
		{[]string{"shell", "--record", "", "n1"}, "--record: empty file name"},
		{[]string{"shell", "--record", dir, "n1"}, "is a directory"},
		{[]string{"shell", "--record", existing, "n1"}, "the file exists: give --force"},
		{[]string{"shell", "--record", filepath.Join(dir, "missing", "s.cast"), "n1"}, "its directory"},
		{[]string{"shell", "--record", filepath.Join(existing, "s.cast"), "n1"}, "not a directory"},
		{[]string{"shell", "--record", "/dev/null", "--force", "n1"}, "not a regular file"},
	} {
		got := run(t, "", tt.args...)
		if got.code != 2 || !strings.Contains(got.errOut, tt.want) || !strings.Contains(got.errOut, "--record") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tt.args, got.code, got.errOut, tt.want)
		}
	}
	if b, _ := os.ReadFile(existing); string(b) != "keep" {
		t.Errorf("the existing file was changed: %q", b)
	}
}

func TestShellRecording(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.cast")
	var out, errOut bytes.Buffer
	req := nodeexec.Request{Node: "node-1", Command: []string{"sh", "-l"}, Stdin: strings.NewReader("ls\n"), Stdout: &out, Stderr: &errOut, Env: map[string]string{"TERM": "xterm-256color"}}
	now := time.Unix(1795860000, 0)
	clock := func() time.Time { now = now.Add(time.Second); return now }
	rec, err := startRecording(recordOptions{path: path, input: true}, &req, remotecommand.TerminalSize{}, clock)
	if err != nil {
		t.Fatal(err)
	}
	// what a backend does with the request's streams
	in, _ := io.ReadAll(req.Stdin)
	fmt.Fprintf(req.Stdout, "typed %s", in)
	fmt.Fprint(req.Stderr, "warning\n")
	q := rec.sizes(&sizeList{{Width: 80, Height: 24}, {Width: 100, Height: 30}})
	for q.Next() != nil {
	}
	if err := rec.finish(); err != nil {
		t.Fatal(err)
	}
	if out.String() != "typed ls\n" || errOut.String() != "warning\n" {
		t.Errorf("the terminal got %q and %q", out.String(), errOut.String())
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	h, events, err := asciicast.ParseFile(path)
	if err != nil {
		t.Fatal(err)
	}
	wantH := asciicast.Header{Version: 2, Width: 80, Height: 24, Timestamp: 1795860001, Command: "sh -l", Title: "nodeexec shell node-1", Env: map[string]string{"TERM": "xterm-256color"}}
	if diff := cmp.Diff(wantH, h); diff != "" {
		t.Errorf("header (-want +got):\n%s", diff)
	}
	wantE := []asciicast.Event{{Time: 1, Code: "i", Data: "ls\n"}, {Time: 2, Code: "o", Data: "typed ls\n"}, {Time: 3, Code: "o", Data: "warning\n"}, {Time: 4, Code: "r", Data: "100x30"}}
	if diff := cmp.Diff(wantE, events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	// the file now exists: without --force it is refused at creation too
	// (it appeared after the flags were checked)
	if _, err := startRecording(recordOptions{path: path}, &nodeexec.Request{Stdout: io.Discard}, remotecommand.TerminalSize{}, nil); err == nil || !strings.Contains(err.Error(), "--record") {
		t.Errorf("an existing file without --force: %v", err)
	}
	// --force truncates it
	r2, err := startRecording(recordOptions{path: path, force: true}, &nodeexec.Request{Node: "n", Stdout: io.Discard}, remotecommand.TerminalSize{Width: 120, Height: 40}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r2.finish(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); strings.Count(string(b), "\n") != 1 || !strings.Contains(string(b), `"width":120,"height":40`) {
		t.Errorf("after --force: %q", b)
	}
}

// A recording that cannot be written ends a successful session with 1, the
// error naming --record.
func TestShellRecordingIncomplete(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.cast")
	req := nodeexec.Request{Node: "n", Stdout: io.Discard}
	rec, err := startRecording(recordOptions{path: path}, &req, remotecommand.TerminalSize{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec.f.Close() // the writes now fail, as on a full disk
	fmt.Fprint(req.Stdout, "lost")
	var errOut bytes.Buffer
	err = shellExit(Streams{ErrOut: &errOut}, "nsenter", nil, rec.finish())
	var ec exitCoder
	if !errors.As(err, &ec) || ec.code != 1 || !strings.Contains(errOut.String(), "--record "+path+": the recording is incomplete") {
		t.Errorf("%v, stderr %q: want exit 1 and the --record error", err, errOut.String())
	}
	// the remote status wins when there is one
	errOut.Reset()
	if err := shellExit(Streams{ErrOut: &errOut}, "nsenter", &nodeexec.ExitError{Node: "n", Code: 7}, errors.New("--record x: broken")); !errors.As(err, &ec) || ec.code != 7 || !strings.Contains(errOut.String(), "--record x") {
		t.Errorf("%v, stderr %q: want 7 and the --record error", err, errOut.String())
	}
}

// sizeList is a TerminalSizeQueue of fixed sizes.
type sizeList []remotecommand.TerminalSize

func (s *sizeList) Next() *remotecommand.TerminalSize {
	if len(*s) == 0 {
		return nil
	}
	sz := (*s)[0]
	*s = (*s)[1:]
	return &sz
}
