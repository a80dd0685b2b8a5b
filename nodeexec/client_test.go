package nodeexec_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeexec/nodeexec/nodeexec"
)

const testKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c-a
  cluster:
    server: https://a.example.test:6443
- name: c-b
  cluster:
    server: https://b.example.test:6443
users:
- name: u
  user:
    token: t0ken
contexts:
- name: ctx-a
  context:
    cluster: c-a
    user: u
    namespace: team-a
- name: ctx-b
  context:
    cluster: c-b
    user: u
current-context: ctx-a
`

// isolateKubeconfig keeps the environment (KUBECONFIG, ~/.kube/config,
// in-cluster config) out of the test.
func isolateKubeconfig(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "does-not-exist"))
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
}

func TestClientOptionsRESTConfig(t *testing.T) {
	isolateKubeconfig(t)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(testKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name      string
		o         nodeexec.ClientOptions
		wantHost  string
		wantNS    string
		wantQPS   float32
		wantBurst int
	}{
		{
			name: "current context and its namespace, default limits", o: nodeexec.ClientOptions{Kubeconfig: path},
			wantHost: "https://a.example.test:6443", wantNS: "team-a", wantQPS: nodeexec.DefaultQPS, wantBurst: nodeexec.DefaultBurst,
		},
		{
			name: "context without namespace", o: nodeexec.ClientOptions{Kubeconfig: path, Context: "ctx-b"},
			wantHost: "https://b.example.test:6443", wantNS: "default", wantQPS: nodeexec.DefaultQPS, wantBurst: nodeexec.DefaultBurst,
		},
		{
			name: "namespace override", o: nodeexec.ClientOptions{Kubeconfig: path, Namespace: "other"},
			wantHost: "https://a.example.test:6443", wantNS: "other", wantQPS: nodeexec.DefaultQPS, wantBurst: nodeexec.DefaultBurst,
		},
		{
			name: "namespace override on a context without one", o: nodeexec.ClientOptions{Kubeconfig: path, Context: "ctx-b", Namespace: "other"},
			wantHost: "https://b.example.test:6443", wantNS: "other", wantQPS: nodeexec.DefaultQPS, wantBurst: nodeexec.DefaultBurst,
		},
		{
			name: "explicit limits", o: nodeexec.ClientOptions{Kubeconfig: path, QPS: 7, Burst: 9},
			wantHost: "https://a.example.test:6443", wantNS: "team-a", wantQPS: 7, wantBurst: 9,
		},
		{
			name: "negative QPS kept (no limit)", o: nodeexec.ClientOptions{Kubeconfig: path, QPS: -1},
			wantHost: "https://a.example.test:6443", wantNS: "team-a", wantQPS: -1, wantBurst: nodeexec.DefaultBurst,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, ns, err := tt.o.RESTConfig()
			if err != nil {
				t.Fatalf("RESTConfig: %v", err)
			}
			if cfg.Host != tt.wantHost {
				t.Errorf("Host = %q, want %q", cfg.Host, tt.wantHost)
			}
			if ns != tt.wantNS {
				t.Errorf("namespace = %q, want %q", ns, tt.wantNS)
			}
			if cfg.QPS != tt.wantQPS || cfg.Burst != tt.wantBurst {
				t.Errorf("QPS, Burst = %v, %d; want %v, %d", cfg.QPS, cfg.Burst, tt.wantQPS, tt.wantBurst)
			}
			if cfg.BearerToken != "t0ken" {
				t.Errorf("BearerToken = %q, want the kubeconfig user's", cfg.BearerToken)
			}
			if cfg.UserAgent != "nodeexec" {
				t.Errorf("UserAgent = %q, want nodeexec", cfg.UserAgent)
			}
			if _, err := nodeexec.Clientset(cfg); err != nil {
				t.Errorf("Clientset: %v", err)
			}
		})
	}
}

func TestClientOptionsRESTConfigFromEnv(t *testing.T) {
	isolateKubeconfig(t)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(testKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", path)
	cfg, ns, err := nodeexec.ClientOptions{}.RESTConfig()
	if err != nil {
		t.Fatalf("RESTConfig: %v", err)
	}
	if cfg.Host != "https://a.example.test:6443" || ns != "team-a" {
		t.Errorf("Host, namespace = %q, %q; want the KUBECONFIG file's", cfg.Host, ns)
	}
}

func TestClientOptionsRESTConfigErrors(t *testing.T) {
	isolateKubeconfig(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, []byte(testKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("{not yaml: ["), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing-kubeconfig")

	tests := []struct {
		name    string
		o       nodeexec.ClientOptions
		wantErr []string
	}{
		{name: "missing explicit file", o: nodeexec.ClientOptions{Kubeconfig: missing}, wantErr: []string{"kubeconfig", "missing-kubeconfig"}},
		{name: "unparsable file", o: nodeexec.ClientOptions{Kubeconfig: garbage}, wantErr: []string{"kubeconfig"}},
		{name: "unknown context", o: nodeexec.ClientOptions{Kubeconfig: path, Context: "nope"}, wantErr: []string{"nope"}},
		{name: "negative burst", o: nodeexec.ClientOptions{Kubeconfig: path, Burst: -1}, wantErr: []string{"Burst", "-1"}},
		{name: "no kubeconfig anywhere", o: nodeexec.ClientOptions{}, wantErr: []string{"no kubeconfig found", "--kubeconfig"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, ns, err := tt.o.RESTConfig()
			checkErr(t, err, tt.wantErr)
			if cfg != nil || ns != "" {
				t.Errorf("got config %v and namespace %q with the error", cfg, ns)
			}
		})
	}
}

func TestClientOptionsValidate(t *testing.T) {
	if err := (nodeexec.ClientOptions{}).Validate(); err != nil {
		t.Errorf("zero options: %v", err)
	}
	err := nodeexec.ClientOptions{Burst: -5}.Validate()
	if err == nil || !strings.Contains(err.Error(), "Burst") {
		t.Errorf("Validate() = %v, want an error naming Burst", err)
	}
}
