package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/spool"
)

// runAgent runs `nodeexec agent nsenter ARGS...` and returns the exit code,
// stdout and stderr.
func runAgent(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(context.Background(), Streams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut},
		append([]string{"nodeexec", "agent", "nsenter"}, args...))
	return code, out.String(), errOut.String()
}

func TestAgentNsenterFlagValidation(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	cases := []struct {
		name string
		args []string
		want string // on stderr
	}{
		{"no target", []string{"--", "true"}, `Required flag "target" not set`},
		{"zero target", []string{"--target", "0", "--", "true"}, "--target 0: give the PID (> 0)"},
		{"negative target", []string{"--target", "-3", "--", "true"}, "--target -3"},
		{"target not a number", []string{"--target", "init", "--", "true"}, `--target "init": not a whole number`},
		{"unknown namespace", []string{"--target", self, "--namespaces", "mnt,netz", "--", "true"}, `--namespaces: unknown namespace "netz": valid names are mnt, uts, ipc, net, pid, cgroup, user, or all`},
		{"empty namespaces", []string{"--target", self, "--namespaces", "", "--", "true"}, "--namespaces: no namespace"},
		{"all in a list", []string{"--target", self, "--namespaces", "all,net", "--", "true"}, `"all" alone`},
		{"no command", []string{"--target", self}, "no command: give it after --"},
		{"empty command", []string{"--target", self, "--", ""}, "no command"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runAgent(t, "", tc.args...)
			if code != 2 {
				t.Errorf("exit code %d, want 2 (bad usage); stderr %q", code, errOut)
			}
			if !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr %q, want it to contain %q", errOut, tc.want)
			}
			if out != "" {
				t.Errorf("stdout %q", out)
			}
		})
	}
}

func TestAgentHiddenFromHelp(t *testing.T) {
	run := func(args ...string) string {
		var out, errOut bytes.Buffer
		if code := Run(context.Background(), Streams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, append([]string{"nodeexec"}, args...)); code != 0 {
			t.Fatalf("%v: exit %d, %s", args, code, errOut.String())
		}
		return out.String()
	}
	// Users see agent install and uninstall; the in-pod subcommands stay out of the way.
	if out := run("--help"); !strings.Contains(out, "\n   agent ") {
		t.Errorf("--help does not list the agent command:\n%s", out)
	}
	out := run("agent", "--help")
	for _, want := range []string{"install", "uninstall"} {
		if !strings.Contains(out, want) {
			t.Errorf("agent --help does not list %s:\n%s", want, out)
		}
	}
	for _, hidden := range []string{"nsenter", "container-exec", "hold"} {
		if strings.Contains(out, hidden) {
			t.Errorf("agent --help lists the in-pod %s:\n%s", hidden, out)
		}
	}
	// Hidden, still callable.
	if out := run("agent", "nsenter", "--help"); !strings.Contains(out, "--target PID") || !strings.Contains(out, "--namespaces LIST") {
		t.Errorf("agent nsenter --help:\n%s", out)
	}
}

// TestAgentNsenterRuns enters namespaces of this test process (as root, as
// CI runs): the command's streams and exit code are the agent's.
func TestAgentNsenterRuns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test enters namespaces and needs root (CI runs as root)")
	}
	self := strconv.Itoa(os.Getpid())
	noexec := filepath.Join(t.TempDir(), "noexec")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name             string
		args             []string
		code             int
		stdout, inStderr string
	}{
		{"exit code and streams", []string{"--target", self, "--namespaces", "uts,net", "--", "sh", "-c", `cat; echo err >&2; exit 7`}, 7, "from stdin\n", "err\n"},
		{"default namespaces", []string{"--target", self, "--", "sh", "-c", `pwd`}, 0, "/\n", ""},
		{"all", []string{"-t", self, "--namespaces", "all", "--", "true"}, 0, "", ""},
		{"signal", []string{"--target", self, "--", "sh", "-c", `kill -TERM $$`}, 143, "", ""},
		{"no such process", []string{"--target", "1073741824", "--", "true"}, 125, "", "nodeexec agent nsenter: nsenter: target process 1073741824 does not exist"},
		{"not found", []string{"--target", self, "--", "no-such-program-nodeexec"}, 127, "", "no-such-program-nodeexec"},
		{"not executable", []string{"--target", self, "--", noexec}, 126, "", "not executable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runAgent(t, "from stdin\n", tc.args...)
			if code != tc.code || out != tc.stdout || !strings.Contains(errOut, tc.inStderr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d, %q, stderr containing %q", code, out, errOut, tc.code, tc.stdout, tc.inStderr)
			}
		})
	}
}

// TestAgentHoldDuration: the agent pods' holder (agent.HoldArgv) exits 0
// after --duration; bad durations are refused.
func TestAgentHoldDuration(t *testing.T) {
	start := time.Now()
	if r := run(t, "", "agent", "hold", "--duration", "200ms"); r.code != 0 || time.Since(start) > 5*time.Second {
		t.Errorf("hold --duration 200ms: code %d after %s, stderr %q", r.code, time.Since(start), r.errOut)
	}
	for _, args := range [][]string{{"agent", "hold", "630"}, {"agent", "hold", "--duration", "-1s"}, {"agent", "hold", "--duration", "soon"}} {
		if r := run(t, "", args...); r.code == 0 || !strings.Contains(r.errOut, "duration") {
			t.Errorf("%q: code %d stderr %q; want a refusal naming --duration", args, r.code, r.errOut)
		}
	}
}

// TestAgentTimeout: --timeout ends the command's process group and exits 124.
func TestAgentTimeout(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (setns)")
	}
	start := time.Now()
	r := run(t, "", "agent", "nsenter", "--target", strconv.Itoa(os.Getpid()), "--namespaces", "uts", "--timeout", "1s", "--", "sh", "-c", "sleep 30 & wait")
	if r.code != 124 || !strings.Contains(r.errOut, "--timeout 1s") || time.Since(start) > 8*time.Second {
		t.Errorf("code %d after %s, stderr %q; want 124 after about 1s, naming --timeout", r.code, time.Since(start), r.errOut)
	}
	if r := run(t, "", "agent", "nsenter", "--target", strconv.Itoa(os.Getpid()), "--namespaces", "uts", "--timeout", "5s", "--", "sh", "-c", "exit 3"); r.code != 3 {
		t.Errorf("a command within its --timeout: code %d, want its own 3 (stderr %q)", r.code, r.errOut)
	}
}

// cutWriter takes n bytes, then fails as a cut exec stream does.
type cutWriter struct {
	bytes.Buffer
	n int
}

func (w *cutWriter) Write(p []byte) (int, error) {
	if len(p) > w.n-w.Len() {
		k, _ := w.Buffer.Write(p[:w.n-w.Len()])
		return k, os.ErrClosed
	}
	return w.Buffer.Write(p)
}

// TestAgentSpoolAndAttach: with --spool, a stream cut after the first line
// does not stop the command; `agent attach` from the bytes received gives
// the rest of stdout and stderr, once, and the command's exit status.
func TestAgentSpoolAndAttach(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test enters namespaces and needs root (CI runs as root)")
	}
	// The agent keeps spools only under spool.DefaultParent.
	name := filepath.Base(filepath.Dir(t.TempDir())) // TestAgentSpoolAndAttach<random>
	dir := spool.Path(name + "-run1")
	t.Cleanup(func() { os.RemoveAll(dir); os.RemoveAll(spool.Path(name + "-run2")) })
	out := &cutWriter{n: len("one\n")}
	var errOut bytes.Buffer
	code := Run(t.Context(), Streams{In: strings.NewReader(""), Out: out, ErrOut: &errOut},
		[]string{"nodeexec", "agent", "nsenter", "--spool", dir, "--target", strconv.Itoa(os.Getpid()), "--namespaces", "uts", "--",
			"sh", "-c", "echo one; echo warn >&2; sleep 0.2; echo two; echo three; exit 5"})
	if code != 5 || out.String() != "one\n" {
		t.Fatalf("spooled run: exit %d, stdout %q (stderr %q); want 5 and the first line only", code, out.String(), errOut.String())
	}
	r := run(t, "", "agent", "attach", "--spool", dir, "--stdout-offset", strconv.Itoa(out.Len()), "--stderr-offset", strconv.Itoa(errOut.Len()))
	trailer := string(spool.End{Code: 5, Stdout: 14, Stderr: 5}.Trailer())
	if r.code != 5 || out.String()+r.out != "one\ntwo\nthree\n" || errOut.String()+r.errOut != "warn\n"+trailer {
		t.Errorf("attach: exit %d, stdout %q, stderr %q; want 5 and the rest", r.code, r.out, r.errOut)
	}
	if r := run(t, "", "agent", "attach", "--spool", dir, "--check"); r.code != 0 {
		t.Errorf("check of an existing spool: exit %d %q", r.code, r.errOut)
	}
	if r := run(t, "", "agent", "attach", "--spool", dir+"-none", "--check"); r.code != agent.SpoolMissingExitCode || !strings.Contains(r.errOut, "no spool") {
		t.Errorf("check of a missing spool: exit %d %q", r.code, r.errOut)
	}
	// --stop of a run that ended leaves it alone (its agent, this test
	// process, is not signalled); of no spool, 3; with --check, a usage error.
	if r := run(t, "", "agent", "attach", "--spool", dir, "--stop"); r.code != 0 {
		t.Errorf("stop of an ended run: exit %d %q", r.code, r.errOut)
	}
	if r := run(t, "", "agent", "attach", "--spool", dir+"-none", "--stop"); r.code != agent.SpoolMissingExitCode || !strings.Contains(r.errOut, "no spool") {
		t.Errorf("stop of a missing spool: exit %d %q", r.code, r.errOut)
	}
	if r := run(t, "", "agent", "attach", "--spool", dir, "--stop", "--check"); r.code != 2 || !strings.Contains(r.errOut, "give one") {
		t.Errorf("--stop with --check: exit %d %q", r.code, r.errOut)
	}
	if r := run(t, "", "agent", "attach", "--spool", dir, "--stdout-offset", "999"); r.code != 125 || !strings.Contains(r.errOut, "outcome is unknown") {
		t.Errorf("offset past the end: exit %d %q", r.code, r.errOut)
	}
	// A run starts once: the same spool again refuses without running.
	r = run(t, "", "agent", "nsenter", "--spool", dir, "--target", strconv.Itoa(os.Getpid()), "--namespaces", "uts", "--", "sh", "-c", "echo ran")
	if r.code != 125 || strings.Contains(r.out, "ran") || !strings.Contains(r.errOut, "spool exists") {
		t.Errorf("second start: exit %d, stdout %q, stderr %q", r.code, r.out, r.errOut)
	}
	// Usage errors are spooled too, with exit 2.
	dir2 := spool.Path(name + "-run2")
	if r := run(t, "", "agent", "nsenter", "--spool", dir2, "--target", "0", "--", "true"); r.code != 2 || !strings.Contains(r.errOut, "--target 0") {
		t.Errorf("bad --target under --spool: exit %d, stderr %q", r.code, r.errOut)
	}
}

// TestAgentNsenterEnvFromAgent: --env-from-agent gives the command the
// variables of the agent's own ExecEnvVar (a resident agent sets it from
// its client's request, such as a shell's TERM), without ExecEnvVar itself;
// without the flag the command has the agent's environment as it is.
func TestAgentNsenterEnvFromAgent(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	t.Setenv(agent.ExecEnvVar, agent.EncodeExecEnv(map[string]string{"TERM": "xterm-test", "NODEEXEC_E2E_X": "1"}))
	code, out, errOut := runAgent(t, "", "--target", self, "--namespaces", "uts", agent.EnvFromAgentFlag, "--", "sh", "-c", `echo "$TERM/$NODEEXEC_E2E_X/${`+agent.ExecEnvVar+`:-unset}"`)
	if code != 0 || out != "xterm-test/1/unset\n" {
		t.Errorf("--env-from-agent: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	t.Setenv(agent.ExecEnvVar, "not json")
	if code, _, errOut := runAgent(t, "", "--target", self, "--namespaces", "uts", agent.EnvFromAgentFlag, "--", "true"); code == 0 || !strings.Contains(errOut, agent.EnvFromAgentFlag) {
		t.Errorf("bad %s: exit %d, stderr %q", agent.ExecEnvVar, code, errOut)
	}
}
