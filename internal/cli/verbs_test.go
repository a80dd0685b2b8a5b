package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeexec/nodeexec/internal/durationcheck"
)

// Bad input to the NodeScript verbs, gc, version and the commands with
// subcommands: exit 2, one error line naming the flag, field or word and
// the fix, nothing on stdout, and not one request to the API server.
func TestVerbsBadInput(t *testing.T) {
	srv := newFakeAPIServer(t, []string{"n1"}, nil)
	kc := writeKubeconfig(t, srv.URL)
	dir := t.TempDir()
	file := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	doc := func(name, extra string) string {
		return "apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: " + name + "}\nspec:\n  nodeSelector: {}\n  script: 'true'\n" + extra
	}
	dup := file("dup.yaml", doc("fix", "")+"---\n"+doc("fix", "  timeout: 5m\n"))
	configMap := file("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: fix}\ndata: {k: v}\n")
	hugeTimeout := file("timeout.yaml", doc("fix", "  timeout: 100000000h\n"))
	backoff := file("backoff.yaml", doc("fix", "  retry: {initialBackoff: 10m, maxBackoff: 1s}\n"))

	for _, tt := range []struct {
		name string
		args []string
		want []string
		not  string
	}{
		{"apply one name twice", []string{"apply", "-f", dup}, []string{`documents 1 and 2: both are NodeScript "fix"`, "metadata.name"}, ""},
		{"apply a ConfigMap", []string{"apply", "-f", configMap}, []string{`kind "ConfigMap"`, "want apiVersion nodeexec.io/v1alpha1, kind NodeScript"}, "unknown field"},
		{"apply timeout overflow", []string{"apply", "-f", hugeTimeout}, []string{"spec.timeout", "too large: at most"}, "want a duration"},
		{"apply backoff out of order", []string{"apply", "-f", backoff}, []string{"spec.retry.initialBackoff", "at most spec.retry.maxBackoff (1s"}, ""},
		{"run-now too long", []string{"run-now", "fix", "--for", "100000h"}, []string{"--for 100000h0m0s: too long: at most 168h0m0s", "spec.window"}, ""},
		{"run-now overflow", []string{"run-now", "fix", "--for", "999999999h"}, []string{"--for 999999999h: too large: at most 168h0m0s"}, "not a duration"},
		{"run-now malformed still", []string{"run-now", "fix", "--for", "soon"}, []string{`--for "soon": not a duration`}, ""},
		{"gc -A and -n", []string{"-n", "team", "gc", "-A"}, []string{"--all-namespaces and --namespace \"team\"", "give one of them"}, ""},
		{"gc -n after -A", []string{"gc", "-A", "-n", "team"}, []string{"--all-namespaces and --namespace"}, ""},
		{"version extra argument", []string{"version", "--client", "extra"}, []string{`version takes no arguments (got ["extra"])`}, ""},
		{"agent unknown subcommand", []string{"agent", "bogus"}, []string{`unknown command "bogus" for `, ` agent: want install or uninstall (see `, ` agent --help)`}, "No help topic"},
		{"image unknown subcommand", []string{"image", "bogus"}, []string{`unknown command "bogus" for `, ` image: want push (see `}, "No help topic"},
		{"unknown command", []string{"bogus"}, []string{`unknown command "bogus": want run, shell, gc,`}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := run(t, "", append([]string{"--kubeconfig", kc}, tt.args...)...)
			wantRefused(t, got, tt.want...)
			if tt.not != "" && strings.Contains(got.errOut+got.out, tt.not) {
				t.Errorf("output says %q:\n%s%s", tt.not, got.out, got.errOut)
			}
			if got.out != "" {
				t.Errorf("stdout not empty:\n%s", got.out)
			}
		})
	}
	if reqs := srv.seen(); len(reqs) != 0 {
		t.Errorf("bad input reached the API server: %v", reqs)
	}
	// Alone, a command with subcommands shows its help.
	for _, cmd := range []string{"agent", "image"} {
		if got := run(t, "", cmd); got.code != 0 || !strings.Contains(got.out, "COMMANDS") {
			t.Errorf("%s alone: exit %d, stdout:\n%s", cmd, got.code, got.out)
		}
	}
}

func TestDurationOverflows(t *testing.T) {
	for s, want := range map[string]bool{
		"999999999h": true, "2562048h": true, "1.5h99999999999999999999s": true,
		"2562047h": false, "1h": false, "soon": false, "5": false, "1x": false, "": false, "-": false,
	} {
		if got := durationcheck.Overflows(s); got != want {
			t.Errorf("durationcheck.Overflows(%q) = %t, want %t", s, got, want)
		}
	}
}

// gc against an API server that does not answer says so once (its two
// passes each said it).
func TestGCUnreachableSaysItOnce(t *testing.T) {
	kc := writeKubeconfig(t, "https://127.0.0.1:1")
	got := run(t, "", "--kubeconfig", kc, "gc", "-A")
	if got.code != 2 || !strings.Contains(got.errOut, "127.0.0.1:1") || strings.Count(got.errOut, "listing") != 1 || strings.Count(got.errOut, "\n") != 1 {
		t.Errorf("exit %d, want 2 and one line naming the server; stderr:\n%s", got.code, got.errOut)
	}
}
