// Package backends is the table of nodeexec's backends (registry.go): one
// Entry per backend, which the command line, the NodeScript watcher and the
// CRD's enum all read. It builds a backend from its name, for callers that
// read the backend from data at run time: the NodeScript watcher takes it
// from spec.backend. It is the one package that imports the backends
// (debugpod, nsenterpod, ephemeral, runtimeexec); its callers know them only
// as nodeexec.Backend and the optional interfaces of package nodeexec
// (CompletionPodBuilder, Requirer, PodDescriber, ...).
package backends

import (
	"fmt"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
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

// NodeNames are the names NewNode accepts, the default first: the
// backends the watcher may run (WatcherNames).
func NodeNames() []string { return WatcherNames() }

// nodeEntry is the entry of the node backend name ("" for DefaultName),
// or an error naming the names NewNode accepts.
func nodeEntry(name string) (Entry, error) {
	if name == "" {
		name = DefaultName
	}
	e, ok := Lookup(name)
	if !ok || !e.RunToCompletion {
		return Entry{}, fmt.Errorf("unknown backend %q: want one of %s", name, strings.Join(NodeNames(), ", "))
	}
	return e, nil
}

// DefaultImage is the image the node backend name ("" for the default,
// debugpod) runs when NodeOptions.Image is empty: Entry.DefaultImage
// (debugpod.DefaultImage for debugpod, agent.DefaultImage for nsenter). It
// fails for a name NewNode does not accept. deploy/policy's admission
// policy computes the same images for a NodeScript without
// spec.backend.image (a test pins it to this function).
func DefaultImage(name string) (string, error) {
	e, err := nodeEntry(name)
	if err != nil {
		return "", err
	}
	return e.DefaultImage, nil
}

// NewNode returns the node backend o.Name names, built with its entry's
// Node (its package's New). Errors name the option (Name, and those of the
// backend's New); nothing is created and the API server is not contacted.
func NewNode(o NodeOptions) (nodeexec.Backend, error) {
	e, err := nodeEntry(o.Name)
	if err != nil {
		if len(ContainerNames()) > 0 {
			err = fmt.Errorf("%w (%s target a container, not a node)", err, strings.Join(ContainerNames(), " and "))
		}
		return nil, err
	}
	cfg := o.Config
	if cfg == nil {
		cfg = &rest.Config{}
	}
	po := podexec.PodOptions{
		Client: o.Client, Config: cfg, Namespace: o.Namespace, RunID: o.RunID,
		Image: o.Image, ImagePullSecrets: o.ImagePullSecrets,
	}
	return e.Node(o, po)
}
