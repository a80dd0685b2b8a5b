//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/nodeexec/nodeexec/nodeexec/watcher"
	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// installCalendarCRD applies deploy/crd's MaintenanceCalendar CRD, waits
// until it is served, and deletes it when the test ends (deleteCRD: gone before the next test).
func installCalendarCRD(ctx context.Context, t testing.TB, dyn dynamic.Interface) {
	t.Helper()
	b, err := os.ReadFile("../deploy/crd/nodeexec.io_maintenancecalendars.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	u := &unstructured.Unstructured{Object: m}
	if _, err := crds.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "nodeexec-e2e", Force: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteCRD(t, dyn, u.GetName()) })
	if !waitFor(30*time.Second, func() bool {
		_, e := dyn.Resource(v1alpha1.CalendarResource).List(ctx, metav1.ListOptions{Limit: 1})
		return e == nil
	}) {
		t.Fatal("the MaintenanceCalendar CRD was not served within 30s")
	}
}

// applyCalendar applies MaintenanceCalendar doc through the library (as
// nodeexec apply does), deleted when the test ends.
func applyCalendar(ctx context.Context, t testing.TB, dyn dynamic.Interface, doc string) {
	t.Helper()
	m, err := nodescripts.ParseAllManifests(strings.NewReader(doc))
	if err != nil || len(m.Calendars) != 1 {
		t.Fatalf("parse: %v (%d calendars)\n%s", err, len(m.Calendars), doc)
	}
	if _, err := nodescripts.ApplyCalendars(ctx, dyn, m.Calendars, false); err != nil {
		t.Fatalf("apply: %v", err)
	}
	name := m.Calendars[0].Name
	t.Cleanup(func() {
		_ = dyn.Resource(v1alpha1.CalendarResource).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// calendarScript is a NodeScript on node naming calendar in spec.windowRefs.
func calendarScript(name, node, calendar, script, rollout string) string {
	return fmt.Sprintf(`apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  nodeSelector: {matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [%s]}]}
  script: %q
  windowRefs: [%s]
  rollout: %s
`, name, node, script, calendar, rollout)
}

func rfc(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// heldOutside reports whether ns waits for its window with msg in the reason.
func heldOutside(ns *v1alpha1.NodeScript, msg string) bool {
	c := findCond(ns, v1alpha1.ConditionProgressing)
	return c != nil && c.Reason == v1alpha1.HoldOutsideWindow && strings.Contains(c.Message, msg)
}

// TestWatcherCalendar: one MaintenanceCalendar shared by two NodeScripts
// (one per real node). Closed (its one-off window opens in 25 s), neither
// starts, both say so and when it opens; the API server is restarted while
// they wait; once the window opens both run, each once, none before it
// opened. Then a blackout added to the open calendar closes it: a rollout
// of two nodes (one at a time) stops starting after its first node, the
// status names the blackout and its reason; the blackout removed, the
// second node runs.
func TestWatcherCalendar(t *testing.T) {
	if len(env.nodes) < 2 {
		t.Skip("needs 2 real nodes")
	}
	ctx := context.Background()
	dyn := watcherSetup(t)
	installCalendarCRD(ctx, t, dyn)
	a, b := env.nodes[0], env.nodes[1]
	cal := uniqueName("e2e-cal-")
	opens := time.Now().Add(25 * time.Second).Truncate(time.Second)
	calDoc := fmt.Sprintf(`apiVersion: nodeexec.io/v1alpha1
kind: MaintenanceCalendar
metadata: {name: %s}
spec:
  timeZone: Europe/Berlin
  windows:
  - name: tonight
    once: {start: %q, end: %q}
  - name: patch-tuesday
    monthly: {week: 2, weekday: Tue, start: "22:00", duration: 6h}
`, cal, rfc(opens), rfc(opens.Add(30*time.Minute)))
	applyCalendar(ctx, t, dyn, calDoc)
	startWatcherWith(t, watcher.Options{Client: env.client, Dynamic: dyn, Resync: 2 * time.Second})

	t.Run("Shared", func(t *testing.T) {
		if env.cluster == nil {
			t.Skip("needs the local test cluster's fault injection")
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			restoreCluster(ctx, t)
		})
		names := []string{uniqueName("e2e-cal-a-"), uniqueName("e2e-cal-b-")}
		logs := make([]*podLog, 2)
		for i, n := range []string{a, b} {
			cleanupNodeScript(t, dyn, names[i])
			logs[i] = recordPods(t, names[i])
			applyNodeScript(ctx, t, dyn, calendarScript(names[i], n, cal, "echo ran", "{canary: 1}"))
		}
		for _, name := range names {
			ns := waitNodeScript(ctx, t, dyn, name, 20*time.Second, "held outside the calendar's window", func(ns *v1alpha1.NodeScript) bool {
				return heldOutside(ns, "no window open") && ns.Status.NextWindow != nil && len(ns.Status.Calendars) == 1
			})
			if !ns.Status.NextWindow.Time.Equal(opens) || ns.Status.Calendars[0].Open {
				t.Errorf("%s: nextWindow %v, calendars %+v; want %s, closed", name, ns.Status.NextWindow, ns.Status.Calendars, rfc(opens))
			}
		}
		out, errOut, code := cli(ctx, "", "windows", names[0], "--count", "2")
		if code != 0 || !strings.Contains(out, rfc(opens)) || !strings.Contains(out, "Europe/Berlin") {
			t.Errorf("nodeexec windows: exit %d, %s%s; want the one-off window at %s first", code, out, errOut, rfc(opens))
		}
		t.Logf("nodeexec windows:\n%s", out)
		// The API server goes away while they wait; the watcher resumes.
		t0 := time.Now()
		if err := env.cluster.RestartAPIServer(ctx, 2*time.Second); err != nil {
			t.Fatal(err)
		}
		t.Logf("API server restarted while waiting for the window, back after %s", time.Since(t0).Round(time.Millisecond))
		for _, name := range names {
			waitNodeScript(ctx, t, dyn, name, time.Until(opens)+40*time.Second, "complete once the window opened", func(ns *v1alpha1.NodeScript) bool {
				return ns.Status.Stage == v1alpha1.StageComplete
			})
		}
		for i, n := range []string{a, b} {
			runs := logs[i].runs(n, v1alpha1.ActionRun)
			if len(runs) != 1 {
				t.Errorf("%s on %s: run pods %v, want exactly one", names[i], n, runs)
				continue
			}
			if at := logs[i].createdAt(runs[0]); at.Before(opens) {
				t.Errorf("%s on %s: run pod created at %s, before the window opened at %s", names[i], n, at.Format(time.RFC3339Nano), rfc(opens))
			}
		}
		out, _, _ = cli(ctx, "", "status", names[0])
		if !strings.Contains(out, "calendar "+cal+": open: window tonight open until") {
			t.Errorf("nodeexec status lacks the calendar's line:\n%s", out)
		}
	})

	t.Run("Blackout", func(t *testing.T) {
		if time.Now().Before(opens) {
			t.Skip("the window is not open (Shared skipped)")
		}
		name := uniqueName("e2e-cal-freeze-")
		cleanupNodeScript(t, dyn, name)
		log := recordPods(t, name)
		applyNodeScript(ctx, t, dyn, fmt.Sprintf(`apiVersion: nodeexec.io/v1alpha1
kind: NodeScript
metadata: {name: %s}
spec:
  %s
  script: "sleep 4"
  windowRefs: [%s]
  rollout: {canary: 1, maxConcurrency: 1}
`, name, realNodes, cal))
		var first string
		if !waitFor(30*time.Second, func() bool {
			for _, n := range []string{a, b} {
				if s, _ := nodeState(ctx, t, n, name); s.Phase == v1alpha1.PhaseRunning {
					first = n
					return true
				}
			}
			return false
		}) {
			t.Fatal("no node started running in the open window")
		}
		second := a
		if first == a {
			second = b
		}
		freeze := fmt.Sprintf(`{"spec":{"blackouts":[{"name":"e2e-freeze","start":%q,"end":%q,"reason":"e2e change freeze"}]}}`,
			rfc(time.Now().Add(-time.Minute)), rfc(time.Now().Add(time.Hour)))
		if _, err := dyn.Resource(v1alpha1.CalendarResource).Patch(ctx, cal, types.MergePatchType, []byte(freeze), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitNodeScript(ctx, t, dyn, name, 30*time.Second, "held by the blackout after its first node", func(ns *v1alpha1.NodeScript) bool {
			return heldOutside(ns, "blackout e2e-freeze") && heldOutside(ns, "e2e change freeze") &&
				ns.Status.Succeeded == 1 && ns.Status.Running == 0
		})
		time.Sleep(3 * time.Second)
		if runs := log.runs(second, v1alpha1.ActionRun); len(runs) != 0 {
			t.Fatalf("%s started on %s during the blackout: %v", name, second, runs)
		}
		out, _, _ := cli(ctx, "", "status", name)
		if !strings.Contains(out, "calendar "+cal+": closed: blackout e2e-freeze until") {
			t.Errorf("nodeexec status lacks the blackout:\n%s", out)
		}
		if _, err := dyn.Resource(v1alpha1.CalendarResource).Patch(ctx, cal, types.MergePatchType, []byte(`{"spec":{"blackouts":null}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitNodeScript(ctx, t, dyn, name, 30*time.Second, "complete once the blackout is gone", func(ns *v1alpha1.NodeScript) bool {
			return ns.Status.Stage == v1alpha1.StageComplete
		})
	})
}

// TestApplyRejectsBadCalendar: nodeexec apply refuses each bad
// MaintenanceCalendar (and bad spec.windowRefs) naming the field, and
// applies nothing of the file (a good NodeScript in front of it included).
func TestApplyRejectsBadCalendar(t *testing.T) {
	ctx := context.Background()
	dyn := watcherSetup(t)
	cal := "apiVersion: nodeexec.io/v1alpha1\nkind: MaintenanceCalendar\nmetadata: {name: %s}\nspec:\n  timeZone: Europe/Berlin\n"
	good := "apiVersion: nodeexec.io/v1alpha1\nkind: NodeScript\nmetadata: {name: %s}\nspec:\n  nodeSelector: {}\n  script: 'true'\n"
	cases := []badApply{
		{"cron", cal + "  windows: [{name: w, cron: {schedule: '0 25 * * *', duration: 1h}}]\n", "spec.windows[0].cron.schedule"},
		{"cron-tz", cal + "  windows: [{name: w, cron: {schedule: 'CRON_TZ=UTC 0 22 * * 2', duration: 1h}}]\n", "spec.windows[0].cron.schedule"},
		{"cron-duration", cal + "  windows: [{name: w, cron: {schedule: '0 22 * * 2', duration: soon}}]\n", "spec.windows[0].cron.duration"},
		{"once-backwards", cal + "  windows: [{name: w, once: {start: '2026-12-05T22:00:00Z', end: '2026-12-05T20:00:00Z'}}]\n", "spec.windows[0].once.end"},
		{"zone", "apiVersion: nodeexec.io/v1alpha1\nkind: MaintenanceCalendar\nmetadata: {name: %s}\nspec:\n  timeZone: Mars/Olympus\n", "spec.timeZone"},
		{"week-6", cal + "  windows: [{name: w, monthly: {week: 6, weekday: Tue, start: '22:00', duration: 6h}}]\n", "spec.windows[0].monthly.week"},
		{"day-32", cal + "  windows: [{name: w, monthly: {day: 32, start: '22:00', duration: 6h}}]\n", "spec.windows[0].monthly.day"},
		{"weekly-start", cal + "  windows: [{name: w, weekly: {start: '24:00', end: '04:00'}}]\n", "spec.windows[0].weekly.start"},
		{"two-kinds", cal + "  windows: [{name: w, weekly: {start: '22:00', end: '04:00'}, once: {start: '2026-12-05T22:00:00Z', end: '2026-12-06T02:00:00Z'}}]\n", "spec.windows[0]"},
		{"blackout-no-end", cal + "  blackouts: [{name: freeze, start: '2026-12-15T00:00:00Z'}]\n", "spec.blackouts[0].end"},
		{"blackout-time", cal + "  blackouts: [{name: freeze, start: 'December', end: '2027-01-06T00:00:00Z'}]\n", "spec.blackouts[0].start"},
		{"duplicate-window", cal + "  windows: [{name: w, weekly: {start: '22:00', end: '04:00'}}, {name: w, weekly: {start: '10:00', end: '11:00'}}]\n", "spec.windows[1].name"},
		{"windowrefs-dup", good + "  windowRefs: [a, a]\n", "spec.windowRefs[1]"},
		{"windowrefs-name", good + "  windowRefs: [Not_A_Name]\n", "spec.windowRefs[0]"},
	}
	expectApplyRefused(ctx, t, dyn, "e2e-badcal-", good, cases)
}
