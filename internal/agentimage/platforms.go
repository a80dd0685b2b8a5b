package agentimage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// PlatformImage is one platform of an image reference: the platform its
// manifest is for and that manifest's digest (the one the kubelet pulls on a
// node of that platform).
type PlatformImage struct {
	Platform v1.Platform
	Digest   v1.Hash
}

// String is "linux/arm64 sha256:...".
func (p PlatformImage) String() string { return p.Platform.String() + " " + p.Digest.String() }

// ErrImageNotFound: the registry answered, and has no manifest for the
// reference (HTTP 404: no such repository, tag or digest).
var ErrImageNotFound = errors.New("the registry has no such image")

// Platforms reads the manifest of ref from its registry, without pulling
// anything else: for an image index (OCI or Docker manifest list), one
// PlatformImage per manifest it lists, in its order, with the platform of
// its descriptor (a zero Platform when the index gives none); for a single
// image, one PlatformImage with its config's os, architecture and variant
// and the image's manifest digest. Requests: one manifest GET, and one
// config blob GET for a single image.
//
// opts are remote's options, after remote.WithContext(ctx) and
// remote.WithUserAgent("nodeexec"): give the credentials with
// remote.WithAuthFromKeychain (authn.DefaultKeychain, as `nodeexec image
// push`), a transport with remote.WithTransport. Without credentials the
// registry is read anonymously.
//
// The error wraps ErrUnauthorized (HTTP 401 or 403), ErrImageNotFound (404),
// ErrUnreachable or ErrUntrusted when that is the cause, else
// go-containerregistry's.
func Platforms(ctx context.Context, ref name.Reference, opts ...remote.Option) ([]PlatformImage, error) {
	opts = append([]remote.Option{remote.WithContext(ctx), remote.WithUserAgent("nodeexec")}, opts...)
	desc, err := remote.Get(ref, opts...)
	if err != nil {
		return nil, classifyRead(ref, err)
	}
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, classifyRead(ref, err)
		}
		m, err := idx.IndexManifest()
		if err != nil {
			return nil, classifyRead(ref, err)
		}
		out := make([]PlatformImage, 0, len(m.Manifests))
		for _, d := range m.Manifests {
			pi := PlatformImage{Digest: d.Digest}
			if d.Platform != nil {
				pi.Platform = *d.Platform
			}
			out = append(out, pi)
		}
		return out, nil
	}
	img, err := desc.Image()
	if err != nil {
		return nil, classifyRead(ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, classifyRead(ref, err)
	}
	p := v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant, OSVersion: cf.OSVersion}
	return []PlatformImage{{Platform: p, Digest: desc.Digest}}, nil
}

// classifyRead wraps a read error of ref with the sentinel of its cause
// (registryFault's; a refusal, 401 or 403, is ErrUnauthorized here).
func classifyRead(ref name.Reference, err error) error {
	reg := ref.Context().RegistryStr()
	switch registryFault(err) {
	case ErrUnauthorized, ErrDenied:
		return fmt.Errorf("reading %s: %w: log in with `docker login %s` (or put its credentials in $DOCKER_CONFIG/config.json): %w", ref, ErrUnauthorized, reg, err)
	case ErrImageNotFound:
		return fmt.Errorf("reading %s: %w: %w", ref, ErrImageNotFound, err)
	case ErrUntrusted:
		return fmt.Errorf("reading %s: %w: add its CA to the system's trust store or point SSL_CERT_FILE at it: %w", ref, ErrUntrusted, err)
	case ErrUnreachable:
		return fmt.Errorf("reading %s: %w %s: %w", ref, ErrUnreachable, reg, err)
	}
	return fmt.Errorf("reading %s: %w", ref, err)
}

// NodePlatform is the platform of node as the kubelet reports it:
// status.nodeInfo.operatingSystem and .architecture, each falling back to
// the node's kubernetes.io/os and kubernetes.io/arch labels. The error
// names the node when neither gives both.
func NodePlatform(node *corev1.Node) (v1.Platform, error) {
	p := v1.Platform{OS: node.Status.NodeInfo.OperatingSystem, Architecture: node.Status.NodeInfo.Architecture}
	if p.OS == "" {
		p.OS = node.Labels[corev1.LabelOSStable]
	}
	if p.Architecture == "" {
		p.Architecture = node.Labels[corev1.LabelArchStable]
	}
	if p.OS == "" || p.Architecture == "" {
		return p, fmt.Errorf("node %s reports no platform (status.nodeInfo.operatingSystem/architecture, labels %s/%s)", node.Name, corev1.LabelOSStable, corev1.LabelArchStable)
	}
	return p, nil
}

// Match returns the entry of images the kubelet pulls on a node of platform
// node, as containerd's default platform matcher picks it: the first whose
// os and architecture are the node's (an arm64 variant "" and "v8" are the
// same; nodes report no variant). A single image whose config names no os
// or architecture runs anywhere. Entries of os "unknown" (attestations) are
// never picked.
func Match(node v1.Platform, images []PlatformImage) (PlatformImage, bool) {
	for _, im := range images {
		p := im.Platform
		if p.OS == "unknown" {
			continue
		}
		if len(images) == 1 && p.OS == "" && p.Architecture == "" {
			return im, true
		}
		if p.OS != node.OS || p.Architecture != node.Architecture {
			continue
		}
		if node.Variant != "" && p.Variant != "" && normVariant(p) != normVariant(node) {
			continue
		}
		return im, true
	}
	return PlatformImage{}, false
}

func normVariant(p v1.Platform) string {
	if p.Architecture == "arm64" && p.Variant == "v8" {
		return ""
	}
	return p.Variant
}

// NodeImage is what one node gets of an image: its platform and the
// manifest the kubelet pulls there.
type NodeImage struct {
	Node string
	// Platform is the node's (NodePlatform); zero when PlatformErr is set.
	Platform v1.Platform
	// Image is the matching entry; OK is false when the image has none.
	Image PlatformImage
	OK    bool
	// PlatformErr is set for a node that reports no platform (then the
	// node is not checked).
	PlatformErr error
}

// ForNodes says which manifest of image (its reference as given; images is
// Platforms' answer for it) each of nodes gets, in the nodes' order. The
// error, when some nodes' platforms have no manifest, joins one
// *nodeexec.PlatformError per missing platform (errors.Is(err,
// nodeexec.ErrPlatformNotInImage)), naming the nodes, their platform, the
// image and the `nodeexec image push --platform` that fixes it. A node that
// reports no platform is not refused (its NodeImage says so).
func ForNodes(nodes []*corev1.Node, image string, images []PlatformImage) ([]NodeImage, error) {
	out := make([]NodeImage, 0, len(nodes))
	missing := map[string][]string{}
	var order []string
	for _, n := range nodes {
		ni := NodeImage{Node: n.Name}
		p, err := NodePlatform(n)
		if err != nil {
			ni.PlatformErr = err
			out = append(out, ni)
			continue
		}
		ni.Platform = p
		ni.Image, ni.OK = Match(p, images)
		if !ni.OK {
			k := p.String()
			if _, seen := missing[k]; !seen {
				order = append(order, k)
			}
			missing[k] = append(missing[k], n.Name)
		}
		out = append(out, ni)
	}
	if len(order) == 0 {
		return out, nil
	}
	var have []string
	for _, im := range images {
		if im.Platform.OS == "unknown" {
			continue
		}
		if s := im.Platform.String(); s != "" && !slices.Contains(have, s) {
			have = append(have, s)
		}
	}
	fix := slices.Clone(have)
	for _, k := range order {
		if !slices.Contains(fix, k) {
			fix = append(fix, k)
		}
	}
	slices.Sort(fix)
	var errs []error
	for _, k := range order {
		ns := slices.Clone(missing[k])
		slices.Sort(ns)
		errs = append(errs, &nodeexec.PlatformError{Image: image, Platform: k, Nodes: ns, Available: have, Fix: strings.Join(fix, ",")})
	}
	return out, errors.Join(errs...)
}
