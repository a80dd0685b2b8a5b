package nodeexec

import (
	"errors"
	"fmt"
	"strings"
)

// ErrPlatformNotInImage: the image of the pod nodeexec would create on a
// node (nodeexec's own image, for the nsenter and runtime backends and the
// resident agents) has no manifest for the node's platform (its
// status.nodeInfo operating system and architecture), so the kubelet would
// fail to pull it ("no match for platform in manifest") or its container to
// start ("exec format error"). A *PlatformError matches it with errors.Is.
// Refused before anything is created.
var ErrPlatformNotInImage = errors.New("the image has no manifest for the node's platform")

// PlatformError reports nodes of one platform that an image cannot run on.
type PlatformError struct {
	// Image is the image reference as given (tag or digest).
	Image string
	// Platform is the nodes' platform, "os/arch" (e.g. "linux/arm64").
	Platform string
	// Nodes are the nodes of that platform, sorted.
	Nodes []string
	// Available are the platforms the image has ("linux/amd64"), in the
	// image's order.
	Available []string
	// Fix is the platform list to push, "linux/amd64,linux/arm64": the
	// image's and the nodes'.
	Fix string
}

func (e *PlatformError) Error() string {
	nodes := strings.Join(e.Nodes, ", ")
	if len(e.Nodes) > 5 {
		nodes = strings.Join(e.Nodes[:5], ", ") + fmt.Sprintf(" and %d more", len(e.Nodes)-5)
	}
	noun := "node"
	if len(e.Nodes) > 1 {
		noun = "nodes"
	}
	has := strings.Join(e.Available, ", ")
	if has == "" {
		has = "none"
	}
	return fmt.Sprintf("%s: image %s has no %s manifest (it has: %s), so it cannot run on %s %s (%s): "+
		"push an image index for every platform of the fleet, `nodeexec image push --platform %s REGISTRY/REPOSITORY`, and use the digest reference it prints",
		ErrPlatformNotInImage.Error(), e.Image, e.Platform, has, noun, nodes, e.Platform, e.Fix)
}

// Is makes errors.Is(err, ErrPlatformNotInImage) true.
func (e *PlatformError) Is(target error) bool { return target == ErrPlatformNotInImage }
