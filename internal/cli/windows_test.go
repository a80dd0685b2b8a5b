package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"sigs.k8s.io/yaml"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// TestPrintWindows: docs/maintenancecalendar.md's worked example (Patch
// Tuesday with a December freeze) as nodeexec windows prints it, for the
// NodeScript and for the calendar during the freeze.
func TestPrintWindows(t *testing.T) {
	docs := strings.Split(`apiVersion: nodeexec.io/v1alpha1
kind: MaintenanceCalendar
metadata: {name: patch-tuesday}
spec:
  timeZone: Europe/Berlin
  windows:
  - name: patch-tuesday
    monthly: {week: 2, weekday: Tue, start: "22:00", duration: 6h}
  blackouts:
  - name: december-freeze
    start: "2026-12-01T00:00:00+01:00"
    end: "2027-01-01T00:00:00+01:00"
    reason: December change freeze
---
apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: kernel-update}
spec:
  nodeSelector: {matchLabels: {pool: workers}}
  script: apt-get install -y linux-image-generic
  windowRefs: [patch-tuesday]
`, "---\n")
	var objs []runtime.Object
	for _, d := range docs {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(d), &m); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{v1alpha1.Resource: "NodeScriptList", v1alpha1.CalendarResource: "MaintenanceCalendarList"}, objs...)
	now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	if err := printWindows(t.Context(), &b, dyn, "kernel-update", "", 3, now); err != nil {
		t.Fatal(err)
	}
	b.WriteString("\n")
	if err := printWindows(t.Context(), &b, dyn, "", "patch-tuesday", 2, time.Date(2026, 12, 8, 23, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	want := `NodeScript kernel-update: calendars patch-tuesday
OPENS (UTC)           CLOSES (UTC)          LOCAL (Europe/Berlin)                                LASTS
2027-01-12T21:00:00Z  2027-01-13T03:00:00Z  Tue 2027-01-12 22:00 CET - Wed 2027-01-13 04:00 CET  6h0m0s
2027-02-09T21:00:00Z  2027-02-10T03:00:00Z  Tue 2027-02-09 22:00 CET - Wed 2027-02-10 04:00 CET  6h0m0s
2027-03-09T21:00:00Z  2027-03-10T03:00:00Z  Tue 2027-03-09 22:00 CET - Wed 2027-03-10 04:00 CET  6h0m0s

MaintenanceCalendar patch-tuesday (Europe/Berlin): closed: blackout december-freeze until 2026-12-31T23:00:00Z: December change freeze
OPENS (UTC)           CLOSES (UTC)          LOCAL (Europe/Berlin)                                LASTS
2027-01-12T21:00:00Z  2027-01-13T03:00:00Z  Tue 2027-01-12 22:00 CET - Wed 2027-01-13 04:00 CET  6h0m0s
2027-02-09T21:00:00Z  2027-02-10T03:00:00Z  Tue 2027-02-09 22:00 CET - Wed 2027-02-10 04:00 CET  6h0m0s
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	if err := printWindows(t.Context(), &b, dyn, "", "gone", 2, now); err == nil || !strings.Contains(err.Error(), "maintenancecalendar gone") {
		t.Errorf("missing calendar: %v", err)
	}
}
