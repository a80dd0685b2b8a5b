package testcluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/distribution/reference"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	digest "github.com/opencontainers/go-digest"
	"golang.org/x/crypto/bcrypt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The test registry: the CNCF distribution registry (github.com/distribution/distribution/v3,
// its cmd/registry built from the Go module proxy), in the hub network namespace on
// <hub IP>:registryPort with TLS (a serving certificate signed by the cluster CA) and
// htpasswd authentication, forwarded to the host's 127.0.0.1:<RegistryHostPort>.
const (
	// DefaultRegistryVersion of github.com/distribution/distribution/v3 built for the
	// test registry.
	DefaultRegistryVersion = "3.1.2"
	// DefaultRegistryHostPort is the port on the host's 127.0.0.1 where the test
	// registry is reachable (pushes from this machine).
	DefaultRegistryHostPort = 15000
	// RegistryUser is the test registry's only user; its password is random per cluster.
	RegistryUser = "nodeexec"

	registryPort   = 5000 // inside the hub namespace, on every address
	registryModule = "github.com/distribution/distribution/v3"
	registryRealm  = "nodeexec-testcluster"

	procRegistry        = "registry"
	procRegistrySockFwd = "registry-sock" // in the hub: unix socket -> 127.0.0.1:5000
	procRegistryHostFwd = "registry-fwd"  // on the host: 127.0.0.1:RegistryHostPort -> unix socket
)

// Registry describes the test cluster's registry. The nodes pull through it as a
// real cluster's nodes pull from a registry:
//
//   - Names under MirroredRegistries ("docker.io" for short names such as
//     busybox:stable, and "nodeexec.local") are served by the test registry: each
//     node's containerd has a hosts.toml for them pointing at NodeHost, with the
//     node's own credentials (an Authorization header, as a node credential provider
//     would give), so pods need no pull secret. The repository is the name's path:
//     busybox:stable is NodeHost/library/busybox:stable, nodeexec.local/agent:0.2.0
//     is NodeHost/agent:0.2.0.
//   - Names under NodeHost itself (e.g. "10.251.0.11:5000/library/busybox:stable")
//     reach the same repositories, but the nodes have NO credentials for them: a pod
//     needs an imagePullSecret (see PullSecret), otherwise the kubelet reports
//     ErrImagePull with the registry's "401 Unauthorized".
type Registry struct {
	// Host is host:port of the registry from this machine ("127.0.0.1:15000"):
	// push here. Its certificate is valid for it.
	Host string
	// NodeHost is host:port of the registry from the nodes ("10.251.0.11:5000").
	NodeHost string
	// MirroredRegistries are the registry host names the nodes resolve through the
	// test registry with node credentials: "docker.io" and "nodeexec.local".
	MirroredRegistries []string
	// CAFile is the PEM file of the cluster CA, which signed the registry's certificate.
	CAFile string
	// Username and Password of the registry's only user (htpasswd, bcrypt).
	Username, Password string
	// DockerConfigDir holds a docker config.json with the credentials for Host and
	// NodeHost: DOCKER_CONFIG=<DockerConfigDir> makes authn.DefaultKeychain (and
	// docker/crane/skopeo-like tools) use them.
	DockerConfigDir string
}

// registryState is persisted in cluster.json.
type registryState struct {
	Version  string `json:"version"`
	HostPort int    `json:"hostPort"`
	Password string `json:"password"`
}

// mirroredRegistries are the registry names served by the test registry with node
// credentials: the default registry of short names (computed by
// github.com/distribution/reference, the normalization the kubelet and containerd
// apply: "docker.io") and the registry of the project's own default images.
func mirroredRegistries() []string {
	short, err := reference.ParseNormalizedNamed(BusyboxImage)
	if err != nil {
		panic(err) // a constant
	}
	local, err := reference.ParseNormalizedNamed(PauseImage)
	if err != nil {
		panic(err) // a constant
	}
	return []string{reference.Domain(short), reference.Domain(local)}
}

func (l layout) registryDir() string       { return filepath.Join(l.o.StateDir, "registry") }
func (l layout) registrySock() string      { return filepath.Join(l.o.RunDir, "registry.sock") }
func (l layout) registryNodeHost() string  { return l.hubIP() + ":" + strconv.Itoa(registryPort) }
func (l layout) registryConfig() string    { return filepath.Join(l.registryDir(), "config.yml") }
func (l layout) registryHtpasswd() string  { return filepath.Join(l.registryDir(), "htpasswd") }
func (l layout) registryDockerDir() string { return filepath.Join(l.registryDir(), "docker") }
func (l layout) registryBinary(version string) string {
	return filepath.Join(l.o.CacheDir, "registry", "v"+version, "registry")
}

// registryCert is the registry's serving certificate: valid for the address the nodes
// use and the host's loopback.
func registryCert(l layout) certSpec {
	return certSpec{Name: "registry", CommonName: "nodeexec-testcluster-registry", Server: true,
		IPs: []string{"127.0.0.1", l.hubIP()}, DNSNames: []string{"localhost"}}
}

// registryConfigYAML renders the distribution registry's configuration.
func registryConfigYAML(l layout) string {
	q := strconv.Quote
	return `version: 0.1
log:
  level: info
  formatter: text
storage:
  filesystem:
    rootdirectory: ` + q(filepath.Join(l.registryDir(), "data")) + `
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: ` + q(":"+strconv.Itoa(registryPort)) + `
  tls:
    certificate: ` + q(filepath.Join(l.pki, "registry.crt")) + `
    key: ` + q(filepath.Join(l.pki, "registry.key")) + `
auth:
  htpasswd:
    realm: ` + registryRealm + `
    path: ` + q(l.registryHtpasswd()) + `
`
}

// htpasswdLine is the htpasswd entry of user with a bcrypt hash of password. The
// cost is bcrypt's minimum: the registry checks it on every request, and this is a
// test registry with a random password.
func htpasswdLine(user, password string) (string, error) {
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		return "", fmt.Errorf("htpasswd: %w", err)
	}
	return user + ":" + string(h) + "\n", nil
}

func basicAuth(user, password string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
}

// dockerConfigJSON is a docker config.json with credentials for hosts.
func dockerConfigJSON(user, password string, hosts ...string) []byte {
	type entry struct {
		Auth string `json:"auth"`
	}
	auths := map[string]entry{}
	for _, h := range hosts {
		auths[h] = entry{Auth: basicAuth(user, password)}
	}
	b, err := json.MarshalIndent(map[string]any{"auths": auths}, "", "  ")
	if err != nil {
		panic(err) // static structure
	}
	return append(b, '\n')
}

// hostsFile is one containerd hosts.toml (certs.d/<registry>/hosts.toml, containerd
// 1.5+ and 2.x).
type hostsFile struct {
	Registry string // directory name: the registry host as written in image names
	Content  string
}

// containerdHostsFiles renders the nodes' registry configuration (containerd
// config_path). Each file has a [host."..."] tree as well as the top-level
// server: containerd 1.6 refuses a hosts.toml without one ("invalid `host`
// tree") and then ignores the directory. Every mirrored registry is served by the test registry with the
// node's credentials; the registry's own address is trusted (CA) with no credentials.
func containerdHostsFiles(l layout, password string) []hostsFile {
	server := "https://" + l.registryNodeHost()
	ca := filepath.Join(l.pki, "ca.crt")
	var files []hostsFile
	for _, reg := range mirroredRegistries() {
		auth := "Basic " + basicAuth(RegistryUser, password)
		files = append(files, hostsFile{Registry: reg, Content: fmt.Sprintf(`# nodeexec test cluster: %s is served by the test registry, with this node's credentials
server = %q
ca = %q

[header]
  Authorization = %q

[host.%q]
  capabilities = ["pull", "resolve"]
  ca = %q
  [host.%q.header]
    Authorization = %q
`, reg, server, ca, auth, server, ca, server, auth)})
	}
	files = append(files, hostsFile{Registry: l.registryNodeHost(), Content: fmt.Sprintf(`# nodeexec test cluster: the test registry under its own address; trusted, but the
# node has no credentials for it (pods need an imagePullSecret)
server = %q
ca = %q

[host.%q]
  capabilities = ["pull", "resolve"]
  ca = %q
`, server, ca, server, ca)})
	return files
}

// certsDir is the node's containerd registry config_path.
func (n nodeSpec) certsDir() string { return filepath.Join(n.ContainerdDir, "certs.d") }

// writeHostsFiles writes node n's containerd registry configuration.
func writeHostsFiles(l layout, n nodeSpec, password string) error {
	for _, f := range containerdHostsFiles(l, password) {
		dir := filepath.Join(n.certsDir(), f.Registry)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := writeFileAtomic(filepath.Join(dir, "hosts.toml"), []byte(f.Content), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// buildRegistry builds the distribution registry into the cache, unless it is there.
func (r *runner) buildRegistry(ctx context.Context, version string) (string, error) {
	out := r.l.registryBinary(version)
	if commandExists(out) {
		return out, nil
	}
	goBin, err := goTool()
	if err != nil {
		return "", err
	}
	tmp := filepath.Join(filepath.Dir(out), "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", fmt.Errorf("build registry: %w", err)
	}
	defer os.RemoveAll(tmp)
	r.logf("building %s/cmd/registry v%s (cold: about 2 minutes on 2 cores)", registryModule, version)
	env := []string{"GOCACHE=" + r.l.gocache, "GOBIN=" + tmp, "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off"}
	if _, err := runEnv(ctx, env, r.o.CacheDir, goBin, "install", "-trimpath", "-ldflags", "-s -w",
		registryModule+"/cmd/registry@v"+version); err != nil {
		return "", fmt.Errorf("build registry: %w", err)
	}
	if err := os.Rename(filepath.Join(tmp, "registry"), out); err != nil {
		return "", fmt.Errorf("build registry: %w", err)
	}
	return out, nil
}

// startRegistry writes the registry's configuration, certificate and credentials,
// starts it in the hub namespace with its forwarders, and waits until it answers.
func (r *runner) startRegistry(ctx context.Context, hub nsTarget, bin string, rs *registryState) error {
	l := r.l
	c, err := ensureCA(l.pki)
	if err != nil {
		return err
	}
	if err := c.ensureCert(l.pki, registryCert(l)); err != nil {
		return err
	}
	for _, d := range []string{filepath.Join(l.registryDir(), "data"), l.registryDockerDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	line, err := htpasswdLine(RegistryUser, rs.Password)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		l.registryConfig():   []byte(registryConfigYAML(l)),
		l.registryHtpasswd(): []byte(line),
		filepath.Join(l.registryDockerDir(), "config.json"): dockerConfigJSON(RegistryUser, rs.Password,
			registryHost(rs), l.registryNodeHost()),
	}
	for p, b := range files {
		if err := writeFileAtomic(p, b, 0o600); err != nil {
			return err
		}
	}
	// OTEL_TRACES_EXPORTER=none: the registry would otherwise export traces to an
	// OTLP collector on localhost and log every failure.
	if _, err := r.startDaemon(procRegistry, hub, []string{"env", "OTEL_TRACES_EXPORTER=none", bin, "serve", l.registryConfig()}, false); err != nil {
		return err
	}
	if _, err := r.startDaemon(procRegistrySockFwd, hub, []string{"socat",
		"UNIX-LISTEN:" + l.registrySock() + ",fork,unlink-early,mode=600", "TCP:127.0.0.1:" + strconv.Itoa(registryPort)}, false); err != nil {
		return err
	}
	if err := poll(ctx, 10*time.Second, 20*time.Millisecond, "registry socket", func(context.Context) (bool, error) {
		st, err := os.Stat(l.registrySock())
		return err == nil && st.Mode()&os.ModeSocket != 0, err
	}); err != nil {
		return err
	}
	if _, err := r.startDaemon(procRegistryHostFwd, nsTarget{}, []string{"socat",
		"TCP-LISTEN:" + strconv.Itoa(rs.HostPort) + ",bind=127.0.0.1,fork,reuseaddr", "UNIX-CONNECT:" + l.registrySock()}, false); err != nil {
		return err
	}
	tr, err := registryTransport(filepath.Join(l.pki, "ca.crt"))
	if err != nil {
		return err
	}
	url := "https://" + registryHost(rs) + "/v2/"
	return poll(ctx, 30*time.Second, 50*time.Millisecond, "registry "+url, func(ctx context.Context) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		req.Header.Set("Authorization", "Basic "+basicAuth(RegistryUser, rs.Password))
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return true, nil
	})
}

func registryHost(rs *registryState) string { return "127.0.0.1:" + strconv.Itoa(rs.HostPort) }

// registryTransport trusts the cluster CA (and nothing else).
func registryTransport(caFile string) (*http.Transport, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate", caFile)
	}
	tr := remote.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return tr, nil
}

func randomPassword() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// Registry returns the test registry's addresses and credentials.
func (c *Cluster) Registry() (Registry, error) {
	l := c.r.l
	st, err := l.loadState()
	if err != nil {
		return Registry{}, fmt.Errorf("testcluster: %w: %w", ErrNotRunning, err)
	}
	if st.Registry == nil {
		return Registry{}, fmt.Errorf("testcluster: %w: the running cluster has no registry (started by an older version; Stop and Start it)", ErrNotRunning)
	}
	return Registry{
		Host:               registryHost(st.Registry),
		NodeHost:           l.registryNodeHost(),
		MirroredRegistries: mirroredRegistries(),
		CAFile:             filepath.Join(l.pki, "ca.crt"),
		Username:           RegistryUser,
		Password:           st.Registry.Password,
		DockerConfigDir:    l.registryDockerDir(),
	}, nil
}

// DockerConfigJSON is a docker config.json (the data of a kubernetes.io/dockerconfigjson
// Secret) with the registry's credentials for Host and NodeHost.
func (r Registry) DockerConfigJSON() []byte {
	return dockerConfigJSON(r.Username, r.Password, r.Host, r.NodeHost)
}

// PullSecret is a kubernetes.io/dockerconfigjson Secret with the registry's
// credentials (see DockerConfigJSON), for pods pulling names under NodeHost.
func (r Registry) PullSecret(namespace, name string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "nodeexec"}},
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: r.DockerConfigJSON()},
	}
}

// ErrNotServed is wrapped by PushImage's error for a name whose registry the test
// registry does not serve.
var ErrNotServed = errors.New("not served by the test registry")

// pushTarget maps an image name the nodes use to the repository in the test
// registry (under host): the name's path, with its tag.
func pushTarget(ref, host string, served []string) (reference.Named, string, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return nil, "", fmt.Errorf("image name %q: %w", ref, err)
	}
	tagged, ok := named.(reference.NamedTagged)
	if !ok {
		return nil, "", fmt.Errorf("image name %q needs a tag (e.g. %s:1)", ref, named.Name())
	}
	if _, ok := named.(reference.Digested); ok {
		return nil, "", fmt.Errorf("image name %q: give a tag, not a digest (PushImage returns the digest)", ref)
	}
	if dom := reference.Domain(named); !slices.Contains(served, dom) {
		return nil, "", fmt.Errorf("image name %q: registry %q is %w (use one of %s)", ref, dom, ErrNotServed, strings.Join(served, ", "))
	}
	return named, host + "/" + reference.Path(named) + ":" + tagged.Tag(), nil
}

// PushImage pushes img to the test registry under ref, which names it as the nodes
// pull it: a name under a mirrored registry ("busybox:stable",
// "nodeexec.local/agent:0.2.0"; pods need no pull secret) or under the registry's
// own address (Registry().NodeHost or Host, e.g. "10.251.0.11:5000/team/app:1";
// pods need an imagePullSecret). ref must carry a tag. It returns ref's repository
// with the pushed manifest's digest ("nodeexec.local/agent@sha256:..."), which
// every node resolves to exactly this image. Errors: a bad or unserved name
// (ErrNotServed), no running registry (ErrNotRunning), or the registry's answer.
func (c *Cluster) PushImage(ctx context.Context, ref string, img v1.Image) (string, error) {
	reg, err := c.Registry()
	if err != nil {
		return "", err
	}
	return pushImage(ctx, reg, ref, img)
}

func pushImage(ctx context.Context, reg Registry, ref string, img v1.Image) (string, error) {
	return pushTaggable(ctx, reg, ref, img)
}

// pushable is what pushTaggable uploads: an image or an image index.
type pushable interface {
	remote.Taggable
	Digest() (v1.Hash, error)
}

// pushTaggable is PushImage and PushIndex (pushindex.go): remote.Push
// uploads an image, or an index with every image it lists.
func pushTaggable(ctx context.Context, reg Registry, ref string, img pushable) (string, error) {
	served := append(slices.Clone(reg.MirroredRegistries), reg.NodeHost, reg.Host)
	named, target, err := pushTarget(ref, reg.Host, served)
	if err != nil {
		return "", fmt.Errorf("testcluster: PushImage: %w", err)
	}
	tag, err := name.NewTag(target, name.StrictValidation)
	if err != nil {
		return "", fmt.Errorf("testcluster: PushImage %s: %w", ref, err)
	}
	tr, err := registryTransport(reg.CAFile)
	if err != nil {
		return "", fmt.Errorf("testcluster: PushImage %s: %w", ref, err)
	}
	if err := remote.Push(tag, img, remote.WithContext(ctx), remote.WithTransport(tr),
		remote.WithAuth(&authn.Basic{Username: reg.Username, Password: reg.Password})); err != nil {
		return "", fmt.Errorf("testcluster: PushImage %s (to %s): %w", ref, target, err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", fmt.Errorf("testcluster: PushImage %s: %w", ref, err)
	}
	dref, err := reference.WithDigest(reference.TrimNamed(named), digest.Digest(d.String()))
	if err != nil {
		return "", fmt.Errorf("testcluster: PushImage %s: %w", ref, err)
	}
	return reference.FamiliarString(dref), nil
}
