//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// badApply is a document nodeexec apply must refuse: doc holds one %s for
// the object's name, want is the field the refusal must name.
type badApply struct{ name, doc, want string }

// expectApplyRefused runs, per case, nodeexec apply -f on a file holding a
// valid NodeScript (good, one %s for its name) followed by the case's
// document, and fails the case unless apply exits non-zero, its stderr
// names the case's field, and neither object exists afterwards as a
// NodeScript or a MaintenanceCalendar (nothing applied, not even the valid
// document before the bad one). Names are unique per case (prefix).
func expectApplyRefused(ctx context.Context, t *testing.T, dyn dynamic.Interface, prefix, good string, cases []badApply) {
	t.Helper()
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := uniqueName(prefix)
			file := dir + "/" + c.name + ".yaml"
			body := fmt.Sprintf(good, name+"-ok") + "---\n" + fmt.Sprintf(c.doc, name)
			if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			out, errOut, code := cli(ctx, "", "apply", "-f", file)
			if code == 0 || !strings.Contains(errOut, c.want) {
				t.Errorf("apply: exit %d, stderr %q; want a failure naming %s", code, errOut, c.want)
			}
			for _, n := range []string{name, name + "-ok"} {
				for _, r := range []struct {
					kind string
					res  dynamic.NamespaceableResourceInterface
				}{{"nodescript", dyn.Resource(v1alpha1.Resource)}, {"maintenancecalendar", dyn.Resource(v1alpha1.CalendarResource)}} {
					if _, err := r.res.Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
						t.Errorf("%s %s exists after a refused apply (stdout %q)", r.kind, n, out)
						_ = r.res.Delete(ctx, n, metav1.DeleteOptions{})
					}
				}
			}
		})
	}
}
