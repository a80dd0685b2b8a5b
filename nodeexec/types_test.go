package nodeexec_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/nodeexec/nodeexec/nodeexec"
)

type sizeQueue struct{}

func (sizeQueue) Next() *remotecommand.TerminalSize { return nil }

func TestRequestValidate(t *testing.T) {
	tests := []struct {
		name string
		req  nodeexec.Request
		// wantErr lists substrings the error must contain; nil means no error.
		wantErr []string
	}{
		{name: "command", req: nodeexec.Request{Command: []string{"hostname"}}},
		{name: "script", req: nodeexec.Request{Script: "echo hi"}},
		{name: "command with env, timeout and tty", req: nodeexec.Request{
			Command: []string{"sh", "-c", "env"}, Env: map[string]string{"A": "1", "B_2": ""},
			Timeout: time.Second, TTY: true, TerminalSizeQueue: sizeQueue{},
		}},
		{name: "zero timeout means default", req: nodeexec.Request{Command: []string{"true"}, Timeout: 0}},
		{name: "nothing to run", req: nodeexec.Request{}, wantErr: []string{"no command", "Command", "Script"}},
		{name: "empty command slice", req: nodeexec.Request{Command: []string{}}, wantErr: []string{"no command"}},
		{name: "command and script", req: nodeexec.Request{Command: []string{"true"}, Script: "true"}, wantErr: []string{"Command", "Script"}},
		{name: "empty program", req: nodeexec.Request{Command: []string{"", "x"}}, wantErr: []string{"Command[0]"}},
		{name: "negative timeout", req: nodeexec.Request{Command: []string{"true"}, Timeout: -time.Second}, wantErr: []string{"Timeout", "-1s", "negative"}},
		{name: "largest timeout", req: nodeexec.Request{Command: []string{"true"}, Timeout: nodeexec.MaxTimeout}},
		{name: "timeout above the pod deadline limit", req: nodeexec.Request{Command: []string{"true"}, Timeout: nodeexec.MaxTimeout + time.Second}, wantErr: []string{"Timeout", "too large, at most 596523h13m7s"}},
		{name: "largest script", req: nodeexec.Request{Script: strings.Repeat("x", nodeexec.MaxArgBytes)}},
		{name: "script of 128 KiB", req: nodeexec.Request{Script: strings.Repeat("x", 128<<10)}, wantErr: []string{"Script", "131072 bytes", "at most 131071", "E2BIG"}},
		{name: "script with NUL", req: nodeexec.Request{Script: "echo\x00hi"}, wantErr: []string{"Script", "NUL", "byte 4"}},
		{name: "argument with NUL", req: nodeexec.Request{Command: []string{"echo", "a\x00"}}, wantErr: []string{"Command[1]", "NUL"}},
		{name: "argument of 128 KiB", req: nodeexec.Request{Command: []string{"echo", strings.Repeat("x", 128<<10)}}, wantErr: []string{"Command[1]", "E2BIG"}},
		{name: "size queue without tty", req: nodeexec.Request{Command: []string{"true"}, TerminalSizeQueue: sizeQueue{}}, wantErr: []string{"TerminalSizeQueue", "TTY"}},
		{name: "empty env name", req: nodeexec.Request{Command: []string{"true"}, Env: map[string]string{"": "x"}}, wantErr: []string{"Env", `""`}},
		{name: "env name with =", req: nodeexec.Request{Command: []string{"true"}, Env: map[string]string{"A=B": "x"}}, wantErr: []string{"Env", `"A=B"`}},
		{name: "env name with NUL", req: nodeexec.Request{Command: []string{"true"}, Env: map[string]string{"A\x00": "x"}}, wantErr: []string{"Env"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.req.Validate()
			checkErr(t, err, tt.wantErr)
		})
	}
}

// checkErr fails unless err is nil when want is nil, or contains every string of want.
func checkErr(t *testing.T, err error, want []string) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("got no error, want one containing %q", want)
	}
	for _, s := range want {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
}

func TestTargetsValidate(t *testing.T) {
	const exactlyOne = "exactly one of"
	tests := []struct {
		name    string
		targets nodeexec.Targets
		wantErr []string
	}{
		{name: "names", targets: nodeexec.Targets{Nodes: []string{"a", "b"}}},
		{name: "selector", targets: nodeexec.Targets{Selector: "kubernetes.io/os=linux,!gpu"}},
		{name: "set-based selector", targets: nodeexec.Targets{Selector: "zone in (a,b)"}},
		{name: "all", targets: nodeexec.Targets{All: true}},
		{name: "none", targets: nodeexec.Targets{}, wantErr: []string{exactlyOne, "--node", "--selector", "--all"}},
		{name: "empty names slice", targets: nodeexec.Targets{Nodes: []string{}}, wantErr: []string{exactlyOne}},
		{name: "names and selector", targets: nodeexec.Targets{Nodes: []string{"a"}, Selector: "x=y"}, wantErr: []string{exactlyOne}},
		{name: "names and all", targets: nodeexec.Targets{Nodes: []string{"a"}, All: true}, wantErr: []string{exactlyOne}},
		{name: "selector and all", targets: nodeexec.Targets{Selector: "x=y", All: true}, wantErr: []string{exactlyOne}},
		{name: "all three", targets: nodeexec.Targets{Nodes: []string{"a"}, Selector: "x=y", All: true}, wantErr: []string{exactlyOne}},
		{name: "empty name", targets: nodeexec.Targets{Nodes: []string{"a", ""}}, wantErr: []string{"Nodes[1]", "empty"}},
		{name: "malformed selector", targets: nodeexec.Targets{Selector: "a in (b"}, wantErr: []string{"invalid label selector", `"a in (b"`}},
		{name: "malformed selector value", targets: nodeexec.Targets{Selector: "a=b c"}, wantErr: []string{"invalid label selector"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErr(t, tt.targets.Validate(), tt.wantErr)
		})
	}
}

func TestRequestHelpers(t *testing.T) {
	r := nodeexec.Request{Command: []string{"echo", "hi"}}
	if got := r.EffectiveTimeout(); got != nodeexec.DefaultTimeout {
		t.Errorf("EffectiveTimeout() with zero Timeout = %s, want %s", got, nodeexec.DefaultTimeout)
	}
	r.Timeout = 3 * time.Second
	if got := r.EffectiveTimeout(); got != 3*time.Second {
		t.Errorf("EffectiveTimeout() = %s, want 3s", got)
	}

	argv := r.Argv()
	if diff := cmp.Diff([]string{"echo", "hi"}, argv); diff != "" {
		t.Errorf("Argv() mismatch (-want +got):\n%s", diff)
	}
	argv[0] = "changed"
	if r.Command[0] != "echo" {
		t.Errorf("Argv() returned the request's own slice: modifying it changed Command to %q", r.Command)
	}

	s := nodeexec.Request{Script: "echo a; echo b"}
	if diff := cmp.Diff([]string{"sh", "-c", "echo a; echo b"}, s.Argv()); diff != "" {
		t.Errorf("Argv() of a script mismatch (-want +got):\n%s", diff)
	}

	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	res := nodeexec.Result{Started: t0, Finished: t0.Add(1500 * time.Millisecond)}
	if got := res.Duration(); got != 1500*time.Millisecond {
		t.Errorf("Duration() = %s, want 1.5s", got)
	}
}
