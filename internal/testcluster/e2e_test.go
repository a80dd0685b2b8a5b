//go:build e2e

// End-to-end test of the test cluster itself. Needs root; starts the cluster or
// reuses a running one (and leaves it running):
//
//	go test -tags e2e -count=1 -v ./internal/testcluster/     (or: make cluster-test)
package testcluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeexec/nodeexec/internal/testcluster"
)

type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestE2E runs in parallel with TestBuildKubernetesFresh only (the package's
// other e2e tests are sequential, so they are done when it starts): that one
// builds in a temporary directory and touches no cluster; this one waits on
// pods, and on a node it adds and removes.
func TestE2E(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()

	t0 := time.Now()
	c, err := testcluster.Start(ctx, testcluster.Options{Nodes: 2, Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Start took %s", time.Since(t0))
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nodes := c.Nodes()
	if len(nodes) < 2 || nodes[0] != "nodeexec-tc-1" || nodes[1] != "nodeexec-tc-2" {
		t.Fatalf("Nodes() = %v", nodes)
	}
	for _, n := range nodes {
		requireReady(t, ctx, cs, n)
	}
	if a, err := testcluster.Attach(ctx, testcluster.Options{}); err != nil || a.Kubeconfig() != c.Kubeconfig() {
		t.Errorf("Attach = %v, %v", a, err)
	}
	if _, err := testcluster.Attach(ctx, testcluster.Options{StateDir: t.TempDir()}); !errors.Is(err, testcluster.ErrNotRunning) {
		t.Errorf("Attach of an empty state dir: %v, want ErrNotRunning", err)
	}

	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "testcluster-e2e-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	waitSA(t, ctx, cs, ns.Name)
	host, _ := os.Hostname()

	for _, node := range nodes[:2] {
		t.Run("tools-pod/"+node, func(t *testing.T) {
			out := runPod(t, ctx, cs, ns.Name, pod("tools", node, testcluster.ToolsImage, false, "sh", "-c", "echo ok from $(hostname); ls /bin | wc -l"))
			if !strings.Contains(out, "ok from tools") {
				t.Errorf("output %q", out)
			}
		})
		t.Run("busybox-default-image/"+node, func(t *testing.T) {
			p := pod("bb", node, testcluster.BusyboxImage, false, "sh", "-c", "echo busybox ok")
			p.Spec.Containers[0].ImagePullPolicy = "" // defaulted by the API server
			out := runPod(t, ctx, cs, ns.Name, p)
			if !strings.Contains(out, "busybox ok") {
				t.Errorf("output %q", out)
			}
		})
		t.Run("hostpid-nsenter/"+node, func(t *testing.T) {
			// recipe gotcha 2: PID 1 of the node is the node's own init
			p := pod("nsenter", node, testcluster.ToolsImage, true, "nsenter", "-t", "1", "-m", "-u", "-i", "-n", "-p", "--", "cat", "/etc/hostname")
			p.Spec.HostPID = true
			out := runPod(t, ctx, cs, ns.Name, p)
			if strings.TrimSpace(out) != host {
				t.Errorf("nsenter -t 1 ... cat /etc/hostname = %q, want the host's %q", out, host)
			}
		})
	}

	// a statically linked probe, imported with ImportImage: a gRPC call to the node's
	// containerd through a hostPath socket mount, and an in-cluster API call through
	// the kubernetes Service
	dir := t.TempDir()
	img := filepath.Join(dir, "probe.tar")
	buildProbeImage(t, ctx, dir, img)
	if err := c.ImportImage(ctx, img); err != nil {
		t.Fatal(err)
	}
	for _, node := range nodes[:2] {
		t.Run("containerd-socket/"+node, func(t *testing.T) {
			out := runPod(t, ctx, cs, ns.Name, socketPod(node))
			// Debian's 1.6 says "1.6.20~ds1", containerd 2 built from the module proxy "v2.3.7"
			if !regexp.MustCompile(`containerd version v?[12]\.`).MatchString(out) {
				t.Errorf("probe output %q", out)
			}
		})
		t.Run("in-cluster-api/"+node, func(t *testing.T) {
			out := runPod(t, ctx, cs, ns.Name, pod("api", node, "nodeexec.local/e2e-probe:1", false, "/probe", "api"))
			if !strings.Contains(out, "gitVersion v") {
				t.Errorf("probe output %q", out)
			}
		})
	}

	t.Run("pod-security-baseline", func(t *testing.T) {
		p := pod("priv", nodes[0], testcluster.ToolsImage, true, "true")
		_, err := cs.CoreV1().Pods(testcluster.BaselineNamespace).Create(ctx, p, metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("privileged pod in %s: %v, want Forbidden", testcluster.BaselineNamespace, err)
		}
	})

	t.Run("add-remove-node", func(t *testing.T) {
		t0 := time.Now()
		name, err := c.AddNode(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("AddNode %s took %s", name, time.Since(t0))
		requireReady(t, ctx, cs, name)
		// images imported before the node joined are there (pull policy Never)
		p := socketPod(name)
		p.Spec.Containers[0].ImagePullPolicy = corev1.PullNever
		if out := runPod(t, ctx, cs, ns.Name, p); !strings.Contains(out, "containerd version") {
			t.Errorf("probe on the new node: %q", out)
		}
		t0 = time.Now()
		if err := c.RemoveNode(ctx, name); err != nil {
			t.Fatal(err)
		}
		t.Logf("RemoveNode %s took %s", name, time.Since(t0))
		if _, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("Node %s after RemoveNode: %v", name, err)
		}
		for _, n := range c.Nodes() {
			if n == name {
				t.Errorf("Nodes() still lists %s", name)
			}
		}
		if _, err := os.Stat(filepath.Join(testcluster.DefaultRunDir, "kubelet-"+name+".pid")); !os.IsNotExist(err) {
			t.Errorf("kubelet pid file of %s: %v", name, err)
		}
	})
}

func requireReady(t *testing.T, ctx context.Context, cs kubernetes.Interface, name string) {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return
		}
	}
	t.Fatalf("node %s not Ready: %+v", name, n.Status.Conditions)
}

func waitSA(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string) {
	t.Helper()
	if err := testcluster.WaitDefaultServiceAccount(ctx, cs, ns); err != nil {
		t.Fatal(err)
	}
}

func pod(name, node, image string, privileged bool, cmd ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-"},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: "c", Image: image, Command: cmd, ImagePullPolicy: corev1.PullIfNotPresent,
				SecurityContext: &corev1.SecurityContext{Privileged: &privileged},
			}},
		},
	}
}

// socketPod runs the probe against the node's containerd socket, mounted at the
// standard path.
func socketPod(node string) *corev1.Pod {
	p := pod("sock", node, "nodeexec.local/e2e-probe:1", false, "/probe", "cri", "/run/containerd/containerd.sock")
	sock := filepath.Join(testcluster.DefaultRunDir, "containerd-"+node+".sock")
	typ := corev1.HostPathSocket
	p.Spec.Volumes = []corev1.Volume{{Name: "sock", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: sock, Type: &typ}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "sock", MountPath: "/run/containerd/containerd.sock"}}
	return p
}

// runPod creates p, waits until it ends, and returns its log; it fails the test if
// the pod does not succeed within a minute.
func runPod(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string, p *corev1.Pod) string {
	t.Helper()
	t0 := time.Now()
	p, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var phase corev1.PodPhase
	for time.Since(t0) < time.Minute {
		got, err := cs.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		phase = got.Status.Phase
		if phase == corev1.PodSucceeded || phase == corev1.PodFailed {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	b, err := cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of %s: %v", p.Name, err)
	}
	t.Logf("pod %s on %s: %s in %s: %q", p.Name, p.Spec.NodeName, phase, time.Since(t0).Round(time.Millisecond), strings.TrimSpace(string(b)))
	if phase != corev1.PodSucceeded {
		t.Fatalf("pod %s: phase %s", p.Name, phase)
	}
	return string(b)
}

// probeSource is a standard-library-only program: "cri SOCKET" makes the gRPC call
// containerd.services.version.v1.Version/Version over h2c on a unix socket; "api"
// calls GET /version on the kubernetes Service with the pod's service account.
const probeSource = `package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

func main() {
	var err error
	switch os.Args[1] {
	case "cri":
		err = cri(os.Args[2])
	case "api":
		err = api()
	}
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
}

func cri(sock string) error {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	req, _ := http.NewRequest("POST", "http://containerd/containerd.services.version.v1.Version/Version", bytes.NewReader([]byte{0, 0, 0, 0, 0}))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if len(body) < 7 || body[5] != 0x0a {
		return fmt.Errorf("unexpected reply %q (grpc-status %q)", body, resp.Trailer.Get("Grpc-Status"))
	}
	n := int(body[6])
	fmt.Printf("containerd version %s grpc-status %s\n", body[7:7+n], resp.Trailer.Get("Grpc-Status"))
	return nil
}

func api() error {
	const sa = "/var/run/secrets/kubernetes.io/serviceaccount/"
	token, err := os.ReadFile(sa + "token")
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(sa + "ca.crt")
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	url := "https://" + net.JoinHostPort(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")) + "/version"
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+string(token))
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var v struct{ GitVersion string }
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return err
	}
	fmt.Printf("%s: %s gitVersion %s\n", url, resp.Status, v.GitVersion)
	return nil
}
`

func buildProbeImage(t *testing.T, ctx context.Context, dir, out string) {
	t.Helper()
	src := filepath.Join(dir, "probe")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(probeSource), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module probe\n\ngo 1.24\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "probe-bin")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build probe: %v\n%s", err, out)
	}
	err := testcluster.BuildImage(ctx, out, testcluster.ImageSpec{
		Name:  "nodeexec.local/e2e-probe:1",
		Files: []testcluster.ImageFile{{Src: bin, Dst: "/probe", Mode: 0o755}},
	})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(os.Stderr) // keep go test -v output tidy after the build
}
