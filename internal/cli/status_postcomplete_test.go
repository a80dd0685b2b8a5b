package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

func TestPrintPostComplete(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	ns := &v1alpha1.NodeScript{Spec: v1alpha1.NodeScriptSpec{
		Maintenance:        &v1alpha1.MaintenanceSpec{Cordon: true},
		Rollout:            v1alpha1.RolloutSpec{PostCompleteDelay: &metav1.Duration{Duration: 5 * time.Minute}},
		PostCompleteLabels: map[string]string{"example.com/kernel": "6.8", "a": "b"},
	}, Status: v1alpha1.NodeScriptStatus{NextStart: &metav1.Time{Time: now.Add(90 * time.Second)}}}
	var b bytes.Buffer
	printPostComplete(&b, ns, now)
	want := "pre-pull: the run's image is pulled on each node before it is cordoned (spec.maintenance.prePull)\n" +
		"post-complete delay: 5m0s after each node succeeds before the next starts; next start at 2026-11-27T12:01:30Z (in 1m30s)\n" +
		"post-complete labels: a=b, example.com/kernel=6.8 on each node once it succeeded\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	printPostComplete(&b, &v1alpha1.NodeScript{}, now)
	if strings.TrimSpace(b.String()) != "" {
		t.Errorf("without the fields: %q", b.String())
	}
}
