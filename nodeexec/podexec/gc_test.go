package podexec_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

func TestCollectGarbage(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	pod := func(ns, name string, managed bool, deadline string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{}, Annotations: map[string]string{}}}
		if managed {
			p.Labels[nodeexec.LabelManagedBy] = nodeexec.ManagedByValue
		}
		if deadline != "" {
			p.Annotations[nodeexec.AnnotationDeadline] = deadline
		}
		return p
	}
	client := fake.NewClientset(
		pod("a", "expired", true, now.Add(-time.Minute).Format(time.RFC3339)),
		pod("b", "expired-too", true, now.Add(-time.Hour).Format(time.RFC3339)),
		pod("a", "running", true, now.Add(time.Minute).Format(time.RFC3339)),
		pod("a", "agent", true, ""),
		pod("a", "not-ours", false, now.Add(-time.Hour).Format(time.RFC3339)),
		pod("a", "garbled", true, "yesterday"),
		watcherPod("a", "watcher-run", now.Add(-time.Hour)),
		deleting(pod("a", "ended", true, now.Add(-time.Minute).Format(time.RFC3339)), podexec.DeleteGracePeriod),
		deleting(pod("b", "slow", true, now.Add(-time.Minute).Format(time.RFC3339)), 30),
	)
	got, err := podexec.CollectGarbage(t.Context(), client, "a", now)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a/expired"}, got); diff != "" {
		t.Errorf("namespace a (-want +got):\n%s", diff)
	}
	got, err = podexec.CollectGarbage(t.Context(), client, "", now)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"b/expired-too", "b/slow"}, got); diff != "" {
		t.Errorf("all namespaces (-want +got):\n%s", diff)
	}
	left, _ := client.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{})
	if len(left.Items) != 6 {
		t.Errorf("%d pods left, want the 6 that are not expired nodeexec pods (the watcher's run pod is its own; the ended one is being deleted)", len(left.Items))
	}
}

// deleting marks p as deleted with a grace period of grace seconds.
func deleting(p *corev1.Pod, grace int64) *corev1.Pod {
	p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &metav1.Time{Time: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)}, &grace
	return p
}

// watcherPod is a watcher run pod: owned by a NodeScript, past its deadline.
func watcherPod(ns, name string, deadline time.Time) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: name, UID: types.UID("uid-" + name),
		Labels:          map[string]string{nodeexec.LabelManagedBy: nodeexec.ManagedByValue},
		Annotations:     map[string]string{nodeexec.AnnotationDeadline: deadline.Format(time.RFC3339)},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "nodeexec.io/v1alpha1", Kind: "NodeScript", Name: "ns1", UID: "uid-ns1"}},
	}}
}
