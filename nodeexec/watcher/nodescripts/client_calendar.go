package nodescripts

import (
	"context"
	"fmt"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"
	"io"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// Manifests are the objects of a YAML stream nodeexec apply reads.
type Manifests struct {
	Scripts   []*v1alpha1.NodeScript
	Budgets   []*v1alpha1.MaintenanceBudget
	Calendars []*v1alpha1.MaintenanceCalendar
}

// ParseAllManifests is ParseManifests accepting MaintenanceCalendar
// documents too (apiVersion nodeexec.io/v1alpha1, kind
// MaintenanceCalendar), each decoded strictly and checked with
// v1alpha1.ValidateCalendar; all errors of all documents are returned
// together.
func ParseAllManifests(r io.Reader) (Manifests, error) {
	m := Manifests{Budgets: []*v1alpha1.MaintenanceBudget{}, Calendars: []*v1alpha1.MaintenanceCalendar{}}
	var err error
	if m.Scripts, err = parseDocuments(r, &m.Budgets, &m.Calendars); err != nil {
		return Manifests{}, err
	}
	return m, nil
}

// parseCalendar decodes document i as a MaintenanceCalendar into cals, or
// returns why not.
func parseCalendar(i int, doc []byte, cals *[]*v1alpha1.MaintenanceCalendar) []error {
	c := &v1alpha1.MaintenanceCalendar{}
	if fe := v1alpha1.ValidateCalendarDurationSyntax(doc); len(fe) > 0 {
		return []error{fmt.Errorf("document %d: maintenancecalendar: %w", i, fe.ToAggregate())}
	}
	if err := yaml.UnmarshalStrict(doc, c); err != nil {
		return []error{fmt.Errorf("document %d: maintenancecalendar: %w", i, err)}
	}
	for _, o := range *cals {
		if o.Name == c.Name && c.Name != "" {
			return []error{fmt.Errorf("document %d: MaintenanceCalendar %q is in another document too: give each its own metadata.name", i, c.Name)}
		}
	}
	if fe := v1alpha1.ValidateCalendar(c); len(fe) > 0 {
		return []error{fmt.Errorf("document %d: maintenancecalendar %q: %w", i, c.Name, fe.ToAggregate())}
	}
	*cals = append(*cals, c)
	return nil
}

// ApplyCalendars creates or updates each MaintenanceCalendar with
// server-side apply (field manager "nodeexec"), after
// v1alpha1.ValidateCalendar and a server-side dry-run of every one (the
// CRD's schema and CEL rules), so that nothing is applied when any is
// refused; with dryRun, only checks. It returns "created", "configured" or
// "unchanged" per calendar ("checked" with dryRun). RBAC: get, patch on
// maintenancecalendars.
func ApplyCalendars(ctx context.Context, dyn dynamic.Interface, cals []*v1alpha1.MaintenanceCalendar, dryRun bool) ([]string, error) {
	res := dyn.Resource(v1alpha1.CalendarResource)
	objs := make([]*unstructured.Unstructured, len(cals))
	for i, c := range cals {
		if fe := v1alpha1.ValidateCalendar(c); len(fe) > 0 {
			return nil, fmt.Errorf("maintenancecalendar %q: %w", c.Name, fe.ToAggregate())
		}
		cp := c.DeepCopy()
		cp.APIVersion, cp.Kind = v1alpha1.GroupVersion.String(), "MaintenanceCalendar"
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cp)
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{Object: m}
		unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
		objs[i] = u
	}
	return applyChecked(ctx, res, "maintenancecalendar", "MaintenanceCalendar", objs, dryRun)
}

// GetCalendar reads MaintenanceCalendar name. RBAC: get on
// maintenancecalendars.
func GetCalendar(ctx context.Context, dyn dynamic.Interface, name string) (*v1alpha1.MaintenanceCalendar, error) {
	u, err := dyn.Resource(v1alpha1.CalendarResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("maintenancecalendar %s: %w", name, err)
	}
	return nodescript.ToCalendar(u)
}

// Openings lists the next n intervals in which ns may start runs (its
// spec.window and spec.windowRefs combined; see openings), reading the
// calendars it names. RBAC: get on maintenancecalendars. Errors: a
// calendar that cannot be read (the watcher holds the NodeScript then).
func Openings(ctx context.Context, dyn dynamic.Interface, ns *v1alpha1.NodeScript, now time.Time, n int) ([]Opening, error) {
	var cals []*v1alpha1.MaintenanceCalendar
	for _, r := range ns.Spec.WindowRefs {
		c, err := GetCalendar(ctx, dyn, r)
		if err != nil {
			return nil, err
		}
		cals = append(cals, c)
	}
	return nodescript.Openings(ns, cals, now, n)
}

// CalendarOpenings lists the next n intervals in which calendar c is open.
func CalendarOpenings(c *v1alpha1.MaintenanceCalendar, now time.Time, n int) ([]Opening, error) {
	ns := &v1alpha1.NodeScript{Spec: v1alpha1.NodeScriptSpec{CalendarFields: v1alpha1.CalendarFields{WindowRefs: []string{c.Name}}}}
	return nodescript.Openings(ns, []*v1alpha1.MaintenanceCalendar{c}, now, n)
}

// CalendarNow says whether calendar c is open at now and why (see the
// NodeScript's status.calendars).
func CalendarNow(c *v1alpha1.MaintenanceCalendar, now time.Time) (bool, string, error) {
	return nodescript.CalendarNow(c, now)
}
