package testcluster

import (
	"context"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// PushIndex is PushImage for an image index (a multi-platform image, e.g.
// internal/agentimage.Index): it uploads every image idx lists, then idx,
// under ref in the cluster's registry, and returns ref's digest form (the
// index's digest). The kubelets pull ref and containerd picks the image of
// their node's platform. Errors as PushImage's.
func (c *Cluster) PushIndex(ctx context.Context, ref string, idx v1.ImageIndex) (string, error) {
	reg, err := c.Registry()
	if err != nil {
		return "", err
	}
	return pushTaggable(ctx, reg, ref, idx)
}
