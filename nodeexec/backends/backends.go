// Package backends builds a node backend from its name, for callers that
// read the backend from data at run time: the NodeScript watcher takes it
// from spec.backend. It is the one package that imports the node backends
// (debugpod, nsenterpod); its callers know them only as nodeexec.Backend and
// the optional interfaces of package nodeexec (CompletionPodBuilder,
// Requirer, PodDescriber, ...).
package backends

import (
	"fmt"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/debugpod"
	"github.com/nodeexec/nodeexec/nodeexec/nsenterpod"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
	"github.com/nodeexec/nodeexec/nsenter"
)

// NodeOptions choose and configure a node backend: one that runs on a node
// it is given (Request.Node), as opposed to one that targets a container.
type NodeOptions struct {
	// Name is the backend: debugpod (the default when empty) or nsenter.
	Name string
	// Client and Config are the backend's (see debugpod.Options and
	// nsenterpod.Options). Client is required. Config is used only for
	// exec streams; nil stands for an empty configuration, enough for a
	// caller that only builds pods (CompletionPod), as the watcher does.
	Client kubernetes.Interface
	Config *rest.Config
	// Namespace of the pods; the backend's default when empty.
	Namespace string
	// RunID labels the pods; the backend generates one when empty.
	RunID string
	// Image of the pod's container; the backend's default when empty.
	Image string
	// ImagePullSecrets are secret names in Namespace.
	ImagePullSecrets []string
	// Profile is kubectl debug's profile, for debugpod; its default when
	// empty. The nsenter backend ignores it.
	Profile string
	// Namespaces are the Linux namespaces to enter, for nsenter; its default
	// when empty. The debugpod backend ignores them.
	Namespaces []string
	// HostNetwork and HostIPC put the nsenter backend's pods in the node's
	// network and IPC namespaces; nil is its default (true). The debugpod
	// backend ignores them (its profile decides).
	HostNetwork, HostIPC *bool
}

// NodeNames are the names NewNode accepts, the default first.
func NodeNames() []string { return []string{debugpod.Name, nsenterpod.Name} }

// DefaultImage is the image the node backend name ("" for the default,
// debugpod) runs when NodeOptions.Image is empty: debugpod.DefaultImage
// for debugpod, agent.DefaultImage for nsenter. It fails for a name
// NewNode does not accept. deploy/policy's admission policy computes the
// same images for a NodeScript without spec.backend.image (a test pins it
// to this function).
func DefaultImage(name string) (string, error) {
	switch name {
	case "", debugpod.Name:
		return debugpod.DefaultImage, nil
	case nsenterpod.Name:
		return agent.DefaultImage, nil
	default:
		return "", fmt.Errorf("unknown backend %q: want one of %s", name, strings.Join(NodeNames(), ", "))
	}
}

// NewNode returns the node backend o.Name names, built with its package's
// New. Errors name the option (Name, and those of the backend's New); nothing is created and the API server is not contacted.
func NewNode(o NodeOptions) (nodeexec.Backend, error) {
	cfg := o.Config
	if cfg == nil {
		cfg = &rest.Config{}
	}
	po := podexec.PodOptions{
		Client: o.Client, Config: cfg, Namespace: o.Namespace, RunID: o.RunID,
		Image: o.Image, ImagePullSecrets: o.ImagePullSecrets,
	}
	switch o.Name {
	case "", debugpod.Name:
		return debugpod.New(debugpod.Options{PodOptions: po, Profile: o.Profile})
	case nsenterpod.Name:
		var nss []nsenter.Namespace
		for _, n := range o.Namespaces {
			nss = append(nss, nsenter.Namespace(n))
		}
		return nsenterpod.New(nsenterpod.Options{PodOptions: po, Namespaces: nss, HostNetwork: o.HostNetwork, HostIPC: o.HostIPC})
	default:
		return nil, fmt.Errorf("unknown backend %q: want one of %s (runtime and ephemeral target a container, not a node)", o.Name, strings.Join(NodeNames(), ", "))
	}
}
