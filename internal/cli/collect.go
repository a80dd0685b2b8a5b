package cli

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

// collectExpired deletes, in the background, the pods and Leases in ns of
// earlier runs whose client died (podexec.CollectExpired): every run and
// shell does this in its namespace, so a killed client's pods do not wait
// for `nodeexec gc`. Best effort: errors (RBAC to list leases, say) are
// logged at -v 1 and do not affect the run.
func collectExpired(ctx context.Context, client kubernetes.Interface, ns string) {
	log := logr.FromContextOrDiscard(ctx)
	go func() {
		deleted, err := podexec.CollectExpired(ctx, client, ns, time.Now())
		if len(deleted) > 0 {
			log.V(1).Info("collected the objects of earlier runs whose client died", "deleted", deleted)
		}
		if err != nil && ctx.Err() == nil {
			log.V(1).Info("collecting the objects of earlier runs whose client died", "err", err)
		}
	}()
}
