package testcluster

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/bcrypt"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func TestMirroredRegistries(t *testing.T) {
	// docker.io: what the kubelet and containerd make of a short name like busybox:stable
	if got, want := mirroredRegistries(), []string{"docker.io", "nodeexec.local"}; !slices.Equal(got, want) {
		t.Errorf("mirroredRegistries() = %v, want %v", got, want)
	}
}

func TestContainerdHostsFiles(t *testing.T) {
	l := testLayout(t)
	got := containerdHostsFiles(l, "pw")
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("nodeexec:pw"))
	want := []hostsFile{
		{Registry: "docker.io", Content: `# nodeexec test cluster: docker.io is served by the test registry, with this node's credentials
server = "https://10.251.0.11:5000"
ca = "/s/pki/ca.crt"

[header]
  Authorization = "` + auth + `"

[host."https://10.251.0.11:5000"]
  capabilities = ["pull", "resolve"]
  ca = "/s/pki/ca.crt"
  [host."https://10.251.0.11:5000".header]
    Authorization = "` + auth + `"
`},
		{Registry: "nodeexec.local", Content: `# nodeexec test cluster: nodeexec.local is served by the test registry, with this node's credentials
server = "https://10.251.0.11:5000"
ca = "/s/pki/ca.crt"

[header]
  Authorization = "` + auth + `"

[host."https://10.251.0.11:5000"]
  capabilities = ["pull", "resolve"]
  ca = "/s/pki/ca.crt"
  [host."https://10.251.0.11:5000".header]
    Authorization = "` + auth + `"
`},
		{Registry: "10.251.0.11:5000", Content: `# nodeexec test cluster: the test registry under its own address; trusted, but the
# node has no credentials for it (pods need an imagePullSecret)
server = "https://10.251.0.11:5000"
ca = "/s/pki/ca.crt"

[host."https://10.251.0.11:5000"]
  capabilities = ["pull", "resolve"]
  ca = "/s/pki/ca.crt"
`},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("hosts files (-want +got):\n%s", d)
	}
	c := containerdConfig(l.node(2))
	if !strings.Contains(c, `[plugins."io.containerd.grpc.v1.cri".registry]`+"\n    config_path = \"/s/containerd-nodeexec-tc-2/certs.d\"") {
		t.Errorf("containerd config lacks the registry config_path:\n%s", c)
	}
}

func TestRegistryConfigYAML(t *testing.T) {
	l := testLayout(t)
	var cfg struct {
		Version string
		Storage struct {
			Filesystem struct{ RootDirectory string }
		}
		HTTP struct {
			Addr string
			TLS  struct{ Certificate, Key string }
		}
		Auth struct {
			Htpasswd struct{ Realm, Path string }
		}
	}
	if err := yaml.Unmarshal([]byte(registryConfigYAML(l)), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Version != "0.1" || cfg.Storage.Filesystem.RootDirectory != "/s/registry/data" || cfg.HTTP.Addr != ":5000" ||
		cfg.HTTP.TLS.Certificate != "/s/pki/registry.crt" || cfg.HTTP.TLS.Key != "/s/pki/registry.key" ||
		cfg.Auth.Htpasswd.Path != "/s/registry/htpasswd" || cfg.Auth.Htpasswd.Realm == "" {
		t.Errorf("registry config %+v", cfg)
	}
	cert := registryCert(l)
	if !cert.Server || !slices.Equal(cert.IPs, []string{"127.0.0.1", "10.251.0.11"}) {
		t.Errorf("registry certificate %+v", cert)
	}
}

func TestHtpasswdLine(t *testing.T) {
	line, err := htpasswdLine("nodeexec", "secret")
	if err != nil {
		t.Fatal(err)
	}
	user, hash, ok := strings.Cut(strings.TrimSuffix(line, "\n"), ":")
	if !ok || user != "nodeexec" || !strings.HasPrefix(hash, "$2") {
		t.Fatalf("htpasswd line %q", line)
	}
	if err := bcrypt.CompareHashAndPassword([]byte(hash), []byte("secret")); err != nil {
		t.Errorf("hash does not match the password: %v", err)
	}
	if err := bcrypt.CompareHashAndPassword([]byte(hash), []byte("other")); err == nil {
		t.Error("hash matches another password")
	}
}

func TestDockerConfigAndPullSecret(t *testing.T) {
	reg := Registry{Host: "127.0.0.1:15000", NodeHost: "10.251.0.11:5000", Username: "u", Password: "p"}
	var cfg struct {
		Auths map[string]struct{ Auth string }
	}
	if err := json.Unmarshal(reg.DockerConfigJSON(), &cfg); err != nil {
		t.Fatal(err)
	}
	want := base64.StdEncoding.EncodeToString([]byte("u:p"))
	if len(cfg.Auths) != 2 || cfg.Auths["127.0.0.1:15000"].Auth != want || cfg.Auths["10.251.0.11:5000"].Auth != want {
		t.Errorf("docker config %+v", cfg)
	}
	s := reg.PullSecret("ns", "pull")
	if s.Namespace != "ns" || s.Name != "pull" || s.Type != corev1.SecretTypeDockerConfigJson ||
		string(s.Data[corev1.DockerConfigJsonKey]) != string(reg.DockerConfigJSON()) ||
		s.Labels["app.kubernetes.io/managed-by"] != "nodeexec" {
		t.Errorf("pull secret %+v", s)
	}
}

func TestPushTarget(t *testing.T) {
	served := []string{"docker.io", "nodeexec.local", "10.251.0.11:5000", "127.0.0.1:15000"}
	for _, tc := range []struct {
		ref, target, err string
	}{
		{ref: "busybox:stable", target: "127.0.0.1:15000/library/busybox:stable"},
		{ref: "docker.io/library/busybox:stable", target: "127.0.0.1:15000/library/busybox:stable"},
		{ref: "nodeexec.local/agent:0.1.0", target: "127.0.0.1:15000/agent:0.1.0"},
		{ref: "nodeexec.local/team/controller:0.1.0", target: "127.0.0.1:15000/team/controller:0.1.0"},
		{ref: "10.251.0.11:5000/private/app:1", target: "127.0.0.1:15000/private/app:1"},
		{ref: "127.0.0.1:15000/private/app:1", target: "127.0.0.1:15000/private/app:1"},
		{ref: "quay.example/app:1", err: "not served by the test registry"},
		{ref: "busybox", err: "needs a tag"},
		{ref: "busybox:1@sha256:" + strings.Repeat("a", 64), err: "not a digest"},
		{ref: "Busybox:1", err: "image name"},
		{ref: "", err: "image name"},
	} {
		_, target, err := pushTarget(tc.ref, "127.0.0.1:15000", served)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("pushTarget(%q) = %q, %v; want an error containing %q", tc.ref, target, err, tc.err)
			}
			continue
		}
		if err != nil || target != tc.target {
			t.Errorf("pushTarget(%q) = %q, %v; want %q", tc.ref, target, err, tc.target)
		}
	}
	if _, _, err := pushTarget("quay.example/app:1", "h", served); !errors.Is(err, ErrNotServed) {
		t.Errorf("unserved name: %v, want ErrNotServed", err)
	}
}
