package cli

import (
	"errors"
	"fmt"
	"time"

	ucli "github.com/urfave/cli/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeexec/nodeexec/nodeexec/agent"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

// gcCommand deletes pods left by runs whose client was killed.
func gcCommand(streams Streams) *ucli.Command {
	return &ucli.Command{
		Name:  "gc",
		Usage: "delete nodeexec pods left by a killed client (its run's Lease expired, or its deadline passed)",
		Description: "A run deletes its pod on success, failure, timeout and Ctrl-C. A client killed outright cannot:\n" +
			"its run's Lease (renewed every 10s) expires 30s later, and gc - like every later run and shell in\n" +
			"the namespace, and the watcher cluster-wide - deletes its pods and the Lease. Pods past their\n" +
			"deadline are deleted too. Pods without a deadline (resident agents) and the watcher's run pods\n" +
			"(owned by a NodeScript) are never touched. Run records (Leases nodeexec-record-..., see agent install\n" +
			"--transport recorded) that no agent used are deleted after their deadline. Prints each object it deleted.",
		Flags: []ucli.Flag{
			&ucli.BoolFlag{Name: "all-namespaces", Aliases: []string{"A"}, Usage: "every namespace instead of -n's"},
		},
		Action: func(c *ucli.Context) error {
			if err := noArgs(c, ": it collects every expired nodeexec pod of -n's namespace, or of all with -A"); err != nil {
				return err
			}
			if c.Bool("all-namespaces") && c.IsSet("namespace") {
				return fmt.Errorf("--all-namespaces and --namespace %q: give one of them (-A collects in every namespace, -n in one)", c.String("namespace"))
			}
			client, _, ns, err := client(c)
			if err != nil {
				return err
			}
			if c.Bool("all-namespaces") {
				ns = ""
			} else if err := namespaceExists(c, client, ns); err != nil {
				return err
			}
			now := time.Now()
			collected, cerr := podexec.CollectExpired(c.Context, client, ns, now)
			for _, o := range collected {
				fmt.Fprintf(streams.Out, "%s deleted\n", o)
			}
			if st := apierrors.APIStatus(nil); cerr != nil && !errors.As(cerr, &st) {
				return cerr // no answer from the API server: the second pass would only say it again
			}
			deleted, err := podexec.CollectGarbage(c.Context, client, ns, now)
			for _, p := range deleted {
				fmt.Fprintf(streams.Out, "pod/%s deleted\n", p)
			}
			records, rerr := agent.CollectRecords(c.Context, client, ns, now)
			for _, r := range records {
				fmt.Fprintf(streams.Out, "lease/%s deleted\n", r)
			}
			return errors.Join(cerr, err, rerr)
		},
	}
}

// namespaceExists refuses a namespace that does not exist (from -n, or the
// kubeconfig context's). A caller who may not get namespaces is not
// refused: what follows says what it may not do.
func namespaceExists(c *ucli.Context, client kubernetes.Interface, ns string) error {
	_, err := client.CoreV1().Namespaces().Get(c.Context, ns, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && c.IsSet("namespace"):
		return fmt.Errorf("--namespace %q: no such namespace: give an existing one (kubectl get namespaces), or -A for every namespace", ns)
	case apierrors.IsNotFound(err):
		return fmt.Errorf("namespace %q (the kubeconfig context's) does not exist: give an existing one with -n (kubectl get namespaces), or -A for every namespace", ns)
	case err != nil && !apierrors.IsForbidden(err):
		return fmt.Errorf("namespace %q: %w", ns, err)
	}
	return nil
}
