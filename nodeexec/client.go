package nodeexec

import (
	"errors"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Client-side rate limits used when ClientOptions leaves them zero.
//
// client-go's own defaults (5 QPS, burst 10) cap a fan-out that costs three
// requests per node at under two nodes a second. The API server's Priority and
// Fairness is the real guard against overload, so nodeexec asks for more.
const (
	DefaultQPS   float32 = 50
	DefaultBurst int     = 100
)

// ClientOptions are the client settings a user controls, with kubectl's
// meaning. The zero value loads the kubeconfig the way kubectl does (the
// KUBECONFIG variable, else ~/.kube/config, else the in-cluster config).
type ClientOptions struct {
	// Kubeconfig is the path of a kubeconfig file. Defaults to kubectl's loading rules.
	Kubeconfig string
	// Context is the kubeconfig context to use. Defaults to the current context.
	Context string
	// Namespace for the objects nodeexec creates. Defaults to the context's
	// namespace, else "default".
	Namespace string
	// QPS and Burst are the client-side rate limits. Defaults to DefaultQPS and
	// DefaultBurst; a negative QPS disables client-side limiting.
	QPS   float32
	Burst int
}

// Validate reports the first invalid field.
func (o ClientOptions) Validate() error {
	if o.Burst < 0 {
		return fmt.Errorf("Burst %d is negative: give 0 for the default %d, or a positive number", o.Burst, DefaultBurst)
	}
	return nil
}

// RESTConfig loads the client configuration and the namespace to use, with
// UpgradeRetries installed (a 429 on a streaming upgrade is retried after
// the server's Retry-After; client-go retries the other requests itself).
// Errors come from reading or parsing the kubeconfig (clientcmd).
func (o ClientOptions) RESTConfig() (*rest.Config, string, error) {
	if err := o.Validate(); err != nil {
		return nil, "", err
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.Kubeconfig != "" {
		rules.ExplicitPath = o.Kubeconfig
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: o.Context}
	if o.Namespace != "" {
		overrides.Context.Namespace = o.Namespace
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, "", errors.New("no kubeconfig found: set --kubeconfig or KUBECONFIG (for the local test cluster: `make cluster-up`)")
		}
		return nil, "", fmt.Errorf("loading kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("reading the namespace from the kubeconfig: %w", err)
	}
	if o.Namespace != "" {
		ns = o.Namespace
	}
	if ns == "" {
		ns = "default"
	}
	cfg.QPS, cfg.Burst = o.QPS, o.Burst
	if cfg.QPS == 0 {
		cfg.QPS = DefaultQPS
	}
	if cfg.Burst == 0 {
		cfg.Burst = DefaultBurst
	}
	cfg.UserAgent = "nodeexec"
	// A 429 on an exec or port-forward upgrade is retried like client-go
	// retries its other requests (see UpgradeRetries).
	cfg.Wrap(UpgradeRetries)
	return cfg, ns, nil
}

// Clientset builds a typed client from cfg.
func Clientset(cfg *rest.Config) (kubernetes.Interface, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the Kubernetes client: %w", err)
	}
	return cs, nil
}
