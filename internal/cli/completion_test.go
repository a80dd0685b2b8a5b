package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestMain lets the test binary act as the nodeexec command when
// NODEEXEC_CLI_TEST_AS_MAIN is set, so that shell completion scripts can
// call it back.
func TestMain(m *testing.M) {
	if os.Getenv("NODEEXEC_CLI_TEST_AS_MAIN") == "1" {
		os.Exit(Run(context.Background(), Streams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}, os.Args))
	}
	os.Exit(m.Run())
}

func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(t.Context(), Streams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, append([]string{"nodeexec"}, args...))
	return out.String(), errOut.String(), code
}

// asMain returns a directory holding "nodeexec", this test binary acting as
// the command (see TestMain), and the environment to run it with.
func asMain(t *testing.T) (dir string, env []string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	if err := os.Symlink(self, filepath.Join(dir, "nodeexec")); err != nil {
		t.Fatal(err)
	}
	return dir, append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "NODEEXEC_CLI_TEST_AS_MAIN=1")
}

func TestCompletionScripts(t *testing.T) {
	dir, env := asMain(t)
	for shell, want := range map[string]string{
		"bash": "complete -o bashdefault -o default -F _nodeexec_complete nodeexec",
		"zsh":  "compdef _nodeexec_complete nodeexec",
		"fish": "complete -r -c nodeexec -n '__fish_nodeexec_no_subcommand' -a 'run'",
	} {
		cmd := exec.CommandContext(t.Context(), filepath.Join(dir, "nodeexec"), "completion", shell)
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("completion %s: %v, want a script with %q:\n%s", shell, err, want, out)
		}
	}
	for _, bad := range [][]string{{"completion"}, {"completion", "tcsh"}, {"completion", "bash", "zsh"}} {
		if _, errOut, code := runCLI(t, bad...); code != 2 || !strings.Contains(errOut, "bash, zsh or fish") {
			t.Errorf("%v: exit %d, stderr %q", bad, code, errOut)
		}
	}
}

// TestBashCompletion sources the bash script in a real bash and completes
// as a user pressing Tab would.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash is needed: %v", err)
	}
	_, env := asMain(t)
	for _, c := range []struct {
		line string // the words typed, the last being completed
		want []string
		not  []string
	}{
		{"nodeexec ag", []string{"agent"}, nil},
		{"nodeexec ", []string{"run", "shell", "agent", "version", "completion"}, nil},
		{"nodeexec agent ", []string{"install", "uninstall"}, []string{"nsenter", "hold", "container-exec"}},
		{"nodeexec agent in", []string{"install"}, []string{"uninstall"}},
		{"nodeexec run --max", []string{"--max-concurrency", "--max-errors"}, nil},
	} {
		words := strings.Fields(c.line)
		if strings.HasSuffix(c.line, " ") {
			words = append(words, "")
		}
		var quoted []string
		for _, w := range words {
			quoted = append(quoted, "'"+w+"'")
		}
		prog := "source <(nodeexec completion bash)\nCOMP_WORDS=(" + strings.Join(quoted, " ") + ")\nCOMP_CWORD=" + strconv.Itoa(len(words)-1) +
			"\n_nodeexec_complete\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
		cmd := exec.CommandContext(t.Context(), bash, "--norc", "--noprofile", "-c", prog)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", c.line, err, out)
		}
		got := strings.Fields(string(out))
		for _, w := range c.want {
			if !contains(got, w) {
				t.Errorf("%q completes to %q, want %s among them", c.line, got, w)
			}
		}
		for _, w := range c.not {
			if contains(got, w) {
				t.Errorf("%q completes to %q, want no %s", c.line, got, w)
			}
		}
	}
}

func contains(s []string, w string) bool {
	for _, x := range s {
		if x == w {
			return true
		}
	}
	return false
}

func TestVersion(t *testing.T) {
	out, errOut, code := runCLI(t, "--version")
	if code != 0 || !strings.HasPrefix(out, "nodeexec version ") {
		t.Errorf("--version: exit %d %q %q", code, out, errOut)
	}
	out, errOut, code = runCLI(t, "version", "--client", "-o", "json")
	if code != 0 || !strings.Contains(out, `"clientVersion"`) || !strings.Contains(out, `"goVersion"`) || strings.Contains(out, "serverVersion") {
		t.Errorf("version --client -o json: exit %d %q %q", code, out, errOut)
	}
	if _, errOut, code := runCLI(t, "version", "-o", "yaml"); code != 2 || !strings.Contains(errOut, "--output") {
		t.Errorf("version -o yaml: exit %d %q", code, errOut)
	}
}
