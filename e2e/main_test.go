//go:build e2e

// Package e2e runs nodeexec against a real cluster: by default the project's
// local test cluster (internal/testcluster: etcd, kube-apiserver, two real
// kubelets, containerd), started if it is not running. Run with
// `make test-e2e` or `go test -tags e2e ./e2e/`.
//
// NODEEXEC_E2E_KUBECONFIG points the suite at another cluster instead; then
// NODEEXEC_E2E_IMAGE must name an image every node already has, and
// NODEEXEC_E2E_AGENT_IMAGE the nsenter backend's agent image (default
// agent.DefaultImage, which TestMain builds and imports into the local
// test cluster).
package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeexec/nodeexec/internal/agentimage"
	"github.com/nodeexec/nodeexec/internal/testcluster"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
)

// env is what every test uses; set up once by TestMain.
var env struct {
	kubeconfig string
	config     *rest.Config
	client     kubernetes.Interface
	image      string
	nodes      []string // real nodes, sorted
	cli        string   // path of the built nodeexec binary
	// cluster is the local test cluster (nil with NODEEXEC_E2E_KUBECONFIG):
	// tests that add and remove real nodes need it.
	cluster *testcluster.Cluster
}

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(rssChild(mode))
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 85*time.Minute)
	defer cancel()
	env.image = os.Getenv("NODEEXEC_E2E_IMAGE")
	if env.image == "" {
		env.image = debugpod.DefaultImage
	}
	env.kubeconfig = os.Getenv("NODEEXEC_E2E_KUBECONFIG")
	// The CLI, built once: static, as `make build` builds it, and also the
	// binary of nodeexec's image below.
	dir, err := os.MkdirTemp("", "nodeexec-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if env.cli, err = agentimage.BuildBinary(ctx, "..", dir); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: building the CLI: %v\n", err)
		return 1
	}
	if env.kubeconfig == "" {
		c, err := testcluster.Start(ctx, testcluster.Options{Log: os.Stderr})
		if err != nil {
			fmt.Fprintf(os.Stderr, "e2e: starting the test cluster: %v\n", err)
			return 1
		}
		env.kubeconfig = c.Kubeconfig()
		env.cluster = c
		fmt.Fprintf(os.Stderr, "e2e: nodes run containerd %s\n", c.ContainerdVersion())
		// nodeexec's one image (the agent of the nsenter and runtime
		// backends and resident agents, and the watcher's controller in
		// deploy/), built from this tree with go-containerregistry. It is
		// pushed to the cluster's registry, as on a real cluster, and also
		// imported into every node: on a reused cluster the nodes may hold
		// an older build under the same tag, which imagePullPolicy
		// IfNotPresent would run.
		img, err := agentimage.ImageFromFile(env.cli)
		if err == nil {
			_, err = c.PushImage(ctx, agent.DefaultImage, img)
		}
		if err == nil {
			err = agentimage.Import(ctx, c, img, agent.DefaultImage)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "e2e: nodeexec's image: %v\n", err)
			return 1
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", env.kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	cfg.QPS, cfg.Burst = nodeexec.DefaultQPS, nodeexec.DefaultBurst
	env.config = cfg
	env.client = kubernetes.NewForConfigOrDie(cfg)
	nodes, err := env.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: listing nodes: %v\n", err)
		return 1
	}
	for _, n := range nodes.Items {
		if n.Labels["type"] != "kwok" && nodeexec.IsNodeReady(&n) {
			env.nodes = append(env.nodes, n.Name)
		}
	}
	if len(env.nodes) < 2 {
		fmt.Fprintf(os.Stderr, "e2e: want at least 2 Ready real nodes, have %v\n", env.nodes)
		return 1
	}
	code := m.Run()
	// Whatever the tests did, nothing of ours may remain.
	if left := waitNoManagedPods(ctx, 30*time.Second); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: FAIL: pods labelled %s=%s left after the suite: %v\n", nodeexec.LabelManagedBy, nodeexec.ManagedByValue, left)
		return 1
	}
	return code
}

// waitNoManagedPods waits until no pod labelled managed-by=nodeexec exists in
// any namespace, and returns the ones still there after timeout.
func waitNoManagedPods(ctx context.Context, timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for {
		list, err := env.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: nodeexec.LabelManagedBy + "=" + nodeexec.ManagedByValue})
		var left []string
		if err != nil {
			left = []string{"(list failed: " + err.Error() + ")"}
		} else {
			for _, p := range list.Items {
				left = append(left, p.Namespace+"/"+p.Name)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(250 * time.Millisecond)
	}
}
