package cli

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	ucli "github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodeexec/nodeexec/internal/envflag"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nsenter"
)

// envOf parses args with the -e flag of a command and returns parseEnv's result.
func envOf(t *testing.T, args ...string) (map[string]string, error) {
	t.Helper()
	var got []string
	app := &ucli.App{Commands: []*ucli.Command{{Name: "x", Flags: []ucli.Flag{envflag.Flag("")}, Action: func(c *ucli.Context) error {
		got = envflag.Values(c)
		return nil
	}}}}
	if err := app.Run(append([]string{"nodeexec", "x"}, args...)); err != nil {
		t.Fatal(err)
	}
	return envflag.Parse(got)
}

// -e is never split on commas nor trimmed: one -e, one variable, byte for
// byte (kubectl run --env); several variables take several -e.
func TestEnvNotSplit(t *testing.T) {
	got, err := envOf(t, "-e", "OPTS=a=1,b=2", "-e", "SP= x ,y ", "-e", "EMPTY=", "-e", "NL=a\nb")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"OPTS": "a=1,b=2", "SP": " x ,y ", "EMPTY": "", "NL": "a\nb"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("env (-want +got):\n%s", d)
	}
	// The same in the agent (agent container-exec -e), which parses its own -e.
	var agentEnv []string
	app := newApp(Streams{})
	for _, c := range app.Command("agent").Subcommands {
		if c.Name == "container-exec" {
			c.Action = func(c *ucli.Context) error { agentEnv = envflag.Values(c); return nil }
		}
	}
	if err := app.Run([]string{"nodeexec", "agent", "container-exec", "--container-id", "x", "-e", "OPTS=a=1,b=2", "--", "true"}); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"OPTS=a=1,b=2"}, agentEnv); d != "" {
		t.Errorf("agent -e (-want +got):\n%s", d)
	}
}

// FuzzParseEnv: -e values. Never a panic; an accepted value becomes
// exactly one variable whose name is the text before the first '=' and
// whose value is the rest, byte for byte, and the library accepts it.
func FuzzParseEnv(f *testing.F) {
	for _, s := range []string{"A=1", "OPTS=a=1,b=2", "=x", "FOO", "A=", "A= b ", "A=\x00", "A\x00=b", "PATH=/bin:/usr/bin", "é=ü", "A=$(B)", "A=$$"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, kv string) {
		env, err := envflag.Parse([]string{kv})
		if err != nil {
			if !strings.Contains(err.Error(), "--env") {
				t.Fatalf("error %q does not name --env", err)
			}
			return
		}
		k, v, _ := strings.Cut(kv, "=")
		if len(env) != 1 || env[k] != v {
			t.Fatalf("%q parsed as %q", kv, env)
		}
		req := nodeexec.Request{Command: []string{"true"}, Env: env}
		if err := req.Validate(); err != nil {
			t.Fatalf("%q accepted by -e, refused by Request.Validate: %v", kv, err)
		}
	})
}

// FuzzParseNamespaces: --namespaces (nsenter and runtime backends, and
// the agent). Never a panic; an accepted list is non-empty, without
// duplicates, every name valid; a refusal quotes the input or a name.
func FuzzParseNamespaces(f *testing.F) {
	for _, s := range []string{"mnt,uts,ipc,net,pid", "all", "mnt", " net , pid ", "", ",", "foo", "mnt,all", "mnt,mnt", "cgroup,user", "MNT"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		nss, err := nsenter.ParseNamespaces(s)
		if err != nil {
			return
		}
		if len(nss) == 0 {
			t.Fatalf("%q: accepted, but no namespace", s)
		}
		seen := map[nsenter.Namespace]bool{}
		for _, n := range nss {
			if seen[n] {
				t.Fatalf("%q: %s twice", s, n)
			}
			seen[n] = true
			if _, err := nsenter.ParseNamespaces(string(n)); err != nil {
				t.Fatalf("%q gave %q, which does not parse alone: %v", s, n, err)
			}
		}
	})
}

// TestParseQuantityExponent: a decimal exponent whose parsing would take
// minutes and gigabytes is refused at once, naming the flag; one within
// e-99..e99 is parsed.
func TestParseQuantityExponent(t *testing.T) {
	for s, want := range map[string]string{
		"1e-999999999":          `--cpu-request "1e-999999999": exponent e-999999999 is out of range`,
		"1E+100":                `exponent E+100 is out of range`,
		strings.Repeat("1", 65): "65 characters is too long",
		"":                      `--cpu-request ""`,
	} {
		if _, err := parseQuantity("cpu-request", s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseQuantity(%.20q) = %v, want an error containing %q", s, err, want)
		}
	}
	for s, want := range map[string]string{"1e3": "1k", "5e-3": "5m", "2e09": "2G", "64Mi": "64Mi"} {
		q, err := parseQuantity("cpu-request", s)
		if err != nil || q.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("parseQuantity(%q) = %v, %v; want %s", s, q.String(), err, want)
		}
	}
}

// FuzzParseQuantity: --cpu-request and --memory-request. Never a panic; an
// accepted quantity is not negative and its canonical form parses to the
// same value; a refusal names the flag.
func FuzzParseQuantity(f *testing.F) {
	for _, s := range []string{"10m", "16Mi", "0", "1", "0.5", "1Gi", "-1", "1 GB", "lots", "", "1e3", "9223372036854775807Ei", "1.5.5", "+5m", "10000000E", "1e-999999999", "1E99", "5e-100", "1e007"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := parseQuantity("cpu-request", s)
		if err != nil {
			if !strings.Contains(err.Error(), "--cpu-request") {
				t.Fatalf("error %q does not name the flag", err)
			}
			return
		}
		if q.Sign() < 0 {
			t.Fatalf("%q accepted though negative", s)
		}
		again, err := parseQuantity("cpu-request", q.String())
		if err != nil || again.Cmp(q) != 0 {
			t.Fatalf("%q: canonical %q does not round-trip (%v)", s, q.String(), err)
		}
	})
}

// FuzzCheckImage: --image and --agent-image. Never a panic; an accepted
// reference has no whitespace, control character or upper-case name, which
// the kubelet would refuse only after the pod exists.
func FuzzCheckImage(f *testing.F) {
	for _, s := range []string{"busybox", "busybox:1.36", "registry.local:5000/team/tool:v1", "nodeexec.local/agent:0.1.0", "busybox@sha256:" + strings.Repeat("a", 64), "", "busy box", "BusyBox", "x@sha256:12", "a:b:c", "-x", "a//b", "a\x00b", "localhost/x:_y", "UPPER/x", "Registry.Example:5000/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if err := checkImage("image", s); err != nil {
			if !strings.Contains(err.Error(), "--image") {
				t.Fatalf("error %q does not name the flag", err)
			}
			return
		}
		if strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			t.Fatalf("%q accepted with whitespace or a control character", s)
		}
		if first, _, ok := strings.Cut(s, "/"); ok && !strings.ContainsAny(first, ".:") && strings.ToLower(first) != first {
			t.Fatalf("%q accepted with an upper-case first component that is no registry host", s)
		}
	})
}

func TestParseSecretEnv(t *testing.T) {
	got, err := parseSecretEnv([]string{"db-creds:PASSWORD", "all-of-it"})
	want := []nodeexec.SecretEnv{{Secret: "db-creds", Key: "PASSWORD"}, {Secret: "all-of-it"}}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("got %v, %v; want %v", got, err, want)
	}
	for _, bad := range []string{"", "Bad_Name", "creds:", "creds:a b", ":KEY"} {
		if _, err := parseSecretEnv([]string{bad}); err == nil || !strings.Contains(err.Error(), "--env-from-secret") {
			t.Errorf("%q: %v, want a refusal naming --env-from-secret", bad, err)
		}
	}
}
