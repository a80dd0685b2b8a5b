package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	ucli "github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeexec/nodeexec/internal/agentimage"
	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/backends"
	"github.com/nodeexec/nodeexec/nodeexec/resident"
)

// Mixed-architecture fleets: which manifest of nodeexec's image each node
// gets, read from the image's registry (no pull), for `version`,
// `--explain`, and the check before a run or `agent install` that refuses
// a node whose platform the image lacks (nodeexec.ErrPlatformNotInImage)
// instead of letting its pod fail with "exec format error". A registry the
// client cannot read (air-gapped, or credentials only the kubelet has) is
// reported once as a warning and nothing is refused.

// registryTimeout bounds the read of an image's platforms from its registry.
const registryTimeout = 5 * time.Second

// readPlatforms reads image's platforms (agentimage.Platforms) with the
// credentials of `docker login`, as `nodeexec image push` pushes
// ($DOCKER_CONFIG/config.json, credential helpers; a private CA through
// SSL_CERT_FILE), within registryTimeout.
func readPlatforms(ctx context.Context, image string) ([]agentimage.PlatformImage, error) {
	ref, err := name.ParseReference(image)
	if err != nil {
		return nil, fmt.Errorf("%q is not an image reference: %w", image, err)
	}
	ctx, cancel := context.WithTimeout(ctx, registryTimeout)
	defer cancel()
	return agentimage.Platforms(ctx, ref, remote.WithAuthFromKeychain(authn.DefaultKeychain))
}

// platformCheck is the read of the agent image's platforms, started in the
// background when the backend is built (it overlaps the node lookup).
type platformCheck struct {
	image string
	done  chan struct{}
	pis   []agentimage.PlatformImage
	err   error
}

// startPlatformCheck starts reading the platforms of the agent image
// (--agent-image) of the backends that run nodeexec's own image
// (backends.Entry.RunsAgentImage: nsenter, runtime, debugpod without
// --no-agent; and the resident agents, which wrap them). Other backends run
// the user's image: nil, nothing is checked.
func startPlatformCheck(c *ucli.Context) *platformCheck {
	if e, ok := backends.Lookup(backendName(c)); !ok || !e.RunsAgentImage() || c.Bool("no-agent") {
		return nil
	}
	p := &platformCheck{image: c.String("agent-image"), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.pis, p.err = readPlatforms(c.Context, p.image)
	}()
	return p
}

// check says which manifest of the agent image each of nodes gets. Not
// explaining, it refuses nodes whose platform the image lacks (an error
// wrapping nodeexec.ErrPlatformNotInImage, before anything is created); a
// registry that cannot be read is a warning on errOut and no refusal.
// Explaining, it returns the lines --explain prints instead. Nodes where
// --use-resident finds a ready resident agent run nothing of the image and
// are left out.
func (p *platformCheck) check(ctx context.Context, c *ucli.Context, errOut io.Writer, client kubernetes.Interface, backend nodeexec.Backend, nodes []*corev1.Node, explain bool) ([]string, error) {
	if p == nil || len(nodes) == 0 {
		return nil, nil
	}
	nodes = withoutResidentAgents(ctx, c, client, backend, nodes)
	<-p.done
	if p.err != nil {
		msg := fmt.Sprintf("agent image %s: its registry was not read (%v): not checked that it has a manifest for each target node's platform (%s); "+
			"the kubelet pulls it with its own credentials (see docs/mixed-fleet.md)", p.image, p.err, strings.Join(nodePlatforms(nodes), ", "))
		if explain {
			return []string{msg}, nil
		}
		warnUnread(ctx, errOut, p.image, msg)
		return nil, nil
	}
	forgetUnread(p.image)
	per, err := agentimage.ForNodes(nodes, p.image, p.pis)
	if !explain {
		return nil, err
	}
	return explainPlatforms(p.image, p.pis, per, err), nil
}

// explainPlatforms are --explain's lines: the image's platforms, then per
// node platform the nodes and the digest reference their kubelet pulls.
func explainPlatforms(image string, pis []agentimage.PlatformImage, per []agentimage.NodeImage, err error) []string {
	var have []string
	for _, pi := range pis {
		have = append(have, pi.String())
	}
	kind := "single image"
	if len(pis) != 1 {
		kind = "index"
	}
	lines := []string{fmt.Sprintf("agent image %s (%s): %s", image, kind, strings.Join(have, ", "))}
	repo := image
	if ref, rerr := name.ParseReference(image); rerr == nil {
		repo = ref.Context().Name()
	}
	for _, g := range groupNodes(per) {
		switch {
		case g.err != "":
			lines = append(lines, fmt.Sprintf("  node %s: %s: not checked", strings.Join(g.nodes, ", "), g.err))
		case g.ok:
			lines = append(lines, fmt.Sprintf("  %s: node %s gets %s@%s", g.platform, strings.Join(g.nodes, ", "), repo, g.digest))
		default:
			lines = append(lines, fmt.Sprintf("  %s: node %s: NOT in the image: a run there is refused", g.platform, strings.Join(g.nodes, ", ")))
		}
	}
	if err != nil {
		lines = append(lines, "  "+err.Error())
	}
	return lines
}

// nodeGroup is the nodes of one platform (or one that reports none).
type nodeGroup struct {
	platform, digest, err string
	ok                    bool
	nodes                 []string
}

// groupNodes groups per by platform, in the order platforms first appear;
// at most 10 node names each ("and N more").
func groupNodes(per []agentimage.NodeImage) []nodeGroup {
	var out []nodeGroup
	idx := map[string]int{}
	count := map[string]int{}
	for _, ni := range per {
		k := ni.Platform.String()
		g := nodeGroup{platform: k, ok: ni.OK}
		if ni.PlatformErr != nil {
			k, g.err = "?"+ni.Node, ni.PlatformErr.Error()
		}
		if ni.OK {
			g.digest = ni.Image.Digest.String()
		}
		i, seen := idx[k]
		if !seen {
			i = len(out)
			idx[k] = i
			out = append(out, g)
		}
		count[k]++
		if len(out[i].nodes) < 10 {
			out[i].nodes = append(out[i].nodes, ni.Node)
		} else if count[k] == 11 {
			out[i].nodes = append(out[i].nodes, "...")
		}
	}
	for k, i := range idx {
		if n := count[k]; n > 10 {
			out[i].nodes[len(out[i].nodes)-1] = fmt.Sprintf("and %d more", n-10)
		}
	}
	return out
}

// nodePlatforms are the distinct platforms of nodes, sorted.
func nodePlatforms(nodes []*corev1.Node) []string {
	var out []string
	for _, n := range nodes {
		if p, err := agentimage.NodePlatform(n); err == nil && !slices.Contains(out, p.String()) {
			out = append(out, p.String())
		}
	}
	slices.Sort(out)
	return out
}

// withoutResidentAgents drops, with --use-resident, the nodes where a ready
// resident agent runs (the run uses it, not the agent image): asked of the
// run's backend (resident.Backend.ReadyNodes), whose lookup the run then
// reuses, so that a run looks its agents up once; without such a backend,
// by resident.ReadyNodes (one list). When that fails every node is kept.
func withoutResidentAgents(ctx context.Context, c *ucli.Context, client kubernetes.Interface, backend nodeexec.Backend, nodes []*corev1.Node) []*corev1.Node {
	if !c.Bool("use-resident") {
		return nodes
	}
	var ready map[string]bool
	var err error
	if rb, ok := nodeexec.As[*resident.Backend](backend); ok {
		names := make([]string, len(nodes))
		for i, n := range nodes {
			names[i] = n.Name
		}
		ready, err = rb.ReadyNodes(ctx, names)
	} else {
		ready, err = resident.ReadyNodes(ctx, client, c.String("resident-namespace"))
	}
	if err != nil {
		return nodes
	}
	return slices.DeleteFunc(slices.Clone(nodes), func(n *corev1.Node) bool { return ready[n.Name] })
}

// checkInstallPlatforms refuses, before `agent install` creates anything,
// an agent image that lacks the platform of a Linux node (where the
// DaemonSet schedules an agent): the error wraps
// nodeexec.ErrPlatformNotInImage. Nodes that cannot be listed (RBAC) or a
// registry that cannot be read are a warning on errOut, no refusal.
func checkInstallPlatforms(ctx context.Context, errOut io.Writer, client kubernetes.Interface, image string) error {
	type read struct {
		pis []agentimage.PlatformImage
		err error
	}
	ch := make(chan read, 1)
	go func() {
		pis, err := readPlatforms(ctx, image)
		ch <- read{pis, err}
	}()
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{corev1.LabelOSStable: "linux"}).String()})
	r := <-ch
	switch {
	case err != nil:
		fmt.Fprintf(errOut, "warning: not checked that agent image %s has every node's platform: listing nodes: %v\n", image, err)
		return nil
	case r.err != nil:
		var nodes []*corev1.Node
		for i := range list.Items {
			nodes = append(nodes, &list.Items[i])
		}
		warnUnread(ctx, errOut, image, fmt.Sprintf("agent image %s: its registry was not read (%v): not checked that it has a manifest for each node's platform (%s); "+
			"the kubelet pulls it with its own credentials (see docs/mixed-fleet.md)", image, r.err, strings.Join(nodePlatforms(nodes), ", ")))
		return nil
	}
	forgetUnread(image)
	nodes := make([]*corev1.Node, 0, len(list.Items))
	for i := range list.Items {
		nodes = append(nodes, &list.Items[i])
	}
	if _, err := agentimage.ForNodes(nodes, image, r.pis); err != nil {
		return fmt.Errorf("agent install: %w; nothing was installed", err)
	}
	return nil
}

// ImagePlatforms is what `nodeexec version` says of the agent image: its
// platforms and digests, and which one the cluster's nodes get.
type ImagePlatforms struct {
	// Image is the resident agents' image, else the agent image the
	// nsenter and runtime backends use ($NODEEXEC_AGENT_IMAGE or the default).
	Image     string           `json:"image"`
	Platforms []PlatformDigest `json:"platforms,omitempty"`
	// Nodes groups the cluster's nodes by platform.
	Nodes []NodePlatformImage `json:"nodes,omitempty"`
	// RegistryError says why the registry was not read.
	RegistryError string `json:"registryError,omitempty"`
}

// PlatformDigest is one manifest of an image.
type PlatformDigest struct {
	Platform string `json:"platform"`
	Digest   string `json:"digest"`
}

// NodePlatformImage is the nodes of one platform and the digest they get
// ("" when the image has none for them: Missing).
type NodePlatformImage struct {
	Platform string `json:"platform"`
	Nodes    int    `json:"nodes"`
	Digest   string `json:"digest,omitempty"`
	Missing  bool   `json:"missing,omitempty"`
}

// imagePlatformsFor reads image's platforms and maps the cluster's nodes
// onto them; what cannot be read is in RegistryError (the node list, when
// refused, is left out).
func imagePlatformsFor(ctx context.Context, client kubernetes.Interface, image string) *ImagePlatforms {
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	ip := &ImagePlatforms{Image: image}
	pis, err := readPlatforms(ctx, image)
	if err != nil {
		ip.RegistryError = err.Error()
		return ip
	}
	for _, pi := range pis {
		ip.Platforms = append(ip.Platforms, PlatformDigest{Platform: pi.Platform.String(), Digest: pi.Digest.String()})
	}
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return ip
	}
	nodes := make([]*corev1.Node, 0, len(list.Items))
	for i := range list.Items {
		nodes = append(nodes, &list.Items[i])
	}
	per, _ := agentimage.ForNodes(nodes, image, pis)
	byPlatform := map[string]int{}
	for _, ni := range per {
		if ni.PlatformErr != nil {
			continue
		}
		k := ni.Platform.String()
		i, ok := byPlatform[k]
		if !ok {
			i = len(ip.Nodes)
			byPlatform[k] = i
			ip.Nodes = append(ip.Nodes, NodePlatformImage{Platform: k, Missing: !ni.OK})
			if ni.OK {
				ip.Nodes[i].Digest = ni.Image.Digest.String()
			}
		}
		ip.Nodes[i].Nodes++
	}
	slices.SortFunc(ip.Nodes, func(a, b NodePlatformImage) int { return strings.Compare(a.Platform, b.Platform) })
	return ip
}

// printImagePlatforms writes version's text lines for ip.
func printImagePlatforms(w io.Writer, ip *ImagePlatforms) {
	if ip == nil {
		return
	}
	if ip.RegistryError != "" {
		fmt.Fprintf(w, "Agent Image Platforms: unknown: the registry was not reached (%s)\n", ip.RegistryError)
		return
	}
	var ps []string
	for _, p := range ip.Platforms {
		ps = append(ps, p.Platform+" "+p.Digest)
	}
	fmt.Fprintf(w, "Agent Image Platforms: %s (%s)\n", strings.Join(ps, ", "), ip.Image)
	var missing []string
	for _, n := range ip.Nodes {
		noun := "nodes"
		if n.Nodes == 1 {
			noun = "node"
		}
		if n.Missing {
			missing = append(missing, n.Platform)
			fmt.Fprintf(w, "Node Platform: %s, %d %s: NOT in the agent image\n", n.Platform, n.Nodes, noun)
			continue
		}
		fmt.Fprintf(w, "Node Platform: %s, %d %s: gets %s\n", n.Platform, n.Nodes, noun, n.Digest)
	}
	if len(missing) > 0 {
		all := slices.Clone(missing)
		for _, p := range ip.Platforms {
			if !slices.Contains(all, p.Platform) && !strings.HasPrefix(p.Platform, "unknown") {
				all = append(all, p.Platform)
			}
		}
		slices.Sort(all)
		fmt.Fprintf(w, "  runs on %s are refused: push an index for every platform: nodeexec image push --platform %s REGISTRY/REPOSITORY\n",
			strings.Join(missing, ", "), strings.Join(all, ","))
	}
}

// versionAgentImage is the image `nodeexec version` reads the platforms
// of: the resident agents' when installed, else the agent image of the
// nsenter and runtime backends ($NODEEXEC_AGENT_IMAGE or the default).
func versionAgentImage(a *AgentVersion) string {
	if a != nil && a.Image != "" {
		return a.Image
	}
	return envOr("NODEEXEC_AGENT_IMAGE", agent.DefaultImage)
}

// warnUnread prints msg, the warning that image's registry could not be
// read, once per image: a marker file in the user's cache directory
// ($XDG_CACHE_HOME/nodeexec/unread-registries/<sha256 of the image>)
// silences it afterwards (logged at -v 1 instead) until a read succeeds
// (forgetUnread). An air-gapped cluster's users are told once, not on
// every run. Without a cache directory it is printed every time.
func warnUnread(ctx context.Context, errOut io.Writer, image, msg string) {
	path := unreadMarker(image)
	if path != "" {
		if _, err := os.Stat(path); err == nil {
			logr.FromContextOrDiscard(ctx).V(1).Info(msg)
			return
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
			_ = os.WriteFile(path, []byte(image+"\n"), 0o644)
		}
	}
	fmt.Fprintf(errOut, "warning: %s (said once for this image; -v 1 repeats it)\n", msg)
}

// forgetUnread removes image's warnUnread marker: its registry was read.
func forgetUnread(image string) {
	if path := unreadMarker(image); path != "" {
		_ = os.Remove(path)
	}
}

// unreadMarker is warnUnread's marker file for image, "" without a cache
// directory.
func unreadMarker(image string) string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	sum := sha256.Sum256([]byte(image))
	return filepath.Join(dir, "nodeexec", "unread-registries", hex.EncodeToString(sum[:]))
}
