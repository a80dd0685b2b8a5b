//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// logClusterVersions writes, once per suite, the versions the tests run
// against: the API server's (discovery) and each real node's kubelet and
// container runtime (its status' nodeInfo), e.g.
// "e2e: cluster: API server v1.34.4; nodes: nodeexec-tc-1 (kubelet v1.34.4, containerd://1.6.20), ...".
func logClusterVersions(w io.Writer, cs kubernetes.Interface, nodes []corev1.Node) {
	server := "unknown"
	if v, err := cs.Discovery().ServerVersion(); err == nil {
		server = v.GitVersion
	} else {
		server = fmt.Sprintf("unknown (%v)", err)
	}
	var ns []string
	for _, n := range nodes {
		if n.Labels["type"] == "kwok" {
			continue
		}
		ns = append(ns, fmt.Sprintf("%s (kubelet %s, %s)", n.Name, n.Status.NodeInfo.KubeletVersion, n.Status.NodeInfo.ContainerRuntimeVersion))
	}
	fmt.Fprintf(w, "e2e: cluster: API server %s; nodes: %s\n", server, strings.Join(ns, ", "))
}
