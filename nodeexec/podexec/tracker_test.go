package podexec_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

var testSelector = nodeexec.LabelRunID + "=" + testRunID

// listOptions returns the options of every LIST of resource, in order.
func listOptions(cs *fake.Clientset, resource string) []metav1.ListOptions {
	var out []metav1.ListOptions
	for _, a := range cs.Actions() {
		if la, ok := a.(k8stesting.ListActionImpl); ok && a.GetResource().Resource == resource {
			out = append(out, la.GetListOptions())
		}
	}
	return out
}

func countVerb(cs *fake.Clientset, verb, resource string) int {
	n := 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}

func receive(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitLimit):
		t.Fatalf("no notification for %s", what)
	}
}

func startedEvent(name, pod string) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: testNS},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: pod, Namespace: testNS},
		Reason:         "Started",
	}
}

func TestTrackerSharedWatch(t *testing.T) {
	ours := testPod("ours", runningStatus())
	theirs := testPod("theirs", runningStatus())
	theirs.Labels[nodeexec.LabelRunID] = "other-run"
	cs := fake.NewClientset(ours, theirs)
	tr := podexec.NewTracker(cs, testNS, testSelector)

	if tr.Get("ours") != nil || tr.Started("ours", testContainer) {
		t.Fatal("Get or Started report something before Acquire")
	}

	release1 := tr.Acquire(t.Context())
	release2 := tr.Acquire(t.Context())
	waitFor(t, "the tracker to list pods", func() bool { return tr.Get("ours") != nil })
	waitFor(t, "the tracker to watch events", func() bool { return countVerb(cs, "watch", "events") == 1 })
	waitFor(t, "the tracker to watch pods", func() bool { return countVerb(cs, "watch", "pods") == 1 })

	if got := tr.Get("theirs"); got != nil {
		t.Errorf("Get returned a pod outside the selector: %v", got.Labels)
	}
	var selectors []string
	for _, o := range listOptions(cs, "pods") {
		selectors = append(selectors, o.LabelSelector)
	}
	if diff := cmp.Diff([]string{testSelector}, selectors); diff != "" {
		t.Errorf("pod LIST selectors mismatch (-want +got):\n%s", diff)
	}
	evLists := listOptions(cs, "events")
	if len(evLists) != 1 || evLists[0].FieldSelector != "involvedObject.kind=Pod,reason=Started" {
		t.Errorf("event LISTs %+v, want one with the Started field selector", evLists)
	}

	// Releasing one holder keeps the watch; releasing twice is harmless.
	release1()
	release1()
	if tr.Get("ours") == nil {
		t.Fatal("the watch stopped while a holder remained")
	}
	release2()
	if got := tr.Get("ours"); got != nil {
		t.Errorf("Get after the last release = %v, want nil", got.Name)
	}

	// A new Acquire starts a new watch.
	release3 := tr.Acquire(t.Context())
	defer release3()
	waitFor(t, "the tracker to list pods again", func() bool { return tr.Get("ours") != nil })
	if n := countVerb(cs, "list", "pods"); n != 2 {
		t.Errorf("%d pod LISTs after re-acquiring, want 2", n)
	}
}

func TestTrackerSubscribe(t *testing.T) {
	cs := fake.NewClientset()
	tr := podexec.NewTracker(cs, testNS, testSelector)
	release := tr.Acquire(t.Context())
	defer release()
	ch, unsubscribe := tr.Subscribe("p")
	defer unsubscribe()
	otherCh, unsubscribeOther := tr.Subscribe("other")
	defer unsubscribeOther()

	pods := cs.CoreV1().Pods(testNS)
	if _, err := pods.Create(t.Context(), testPod("p", corev1.PodStatus{}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	receive(t, ch, "the pod's creation")
	if tr.Get("p") == nil {
		t.Fatal("Get returned nil after the creation notification")
	}

	pod := testPod("p", runningStatus())
	if _, err := pods.UpdateStatus(t.Context(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	receive(t, ch, "the status update")
	if got := tr.Get("p"); got == nil || got.Status.Phase != corev1.PodRunning {
		t.Fatalf("Get after the update = %v, want the running pod", got)
	}
	// The handler that notified "p" is done: had it notified "other", it would have by now.
	if len(otherCh) != 0 {
		t.Error("a subscriber of another pod was notified")
	}

	if err := pods.Delete(t.Context(), "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	receive(t, ch, "the deletion")
	if got := tr.Get("p"); got != nil {
		t.Errorf("Get after deletion = %v, want nil", got.Name)
	}
}

func TestTrackerStarted(t *testing.T) {
	cs := fake.NewClientset()
	tr := podexec.NewTracker(cs, testNS, testSelector)
	release := tr.Acquire(t.Context())
	defer release()
	ch, unsubscribe := tr.Subscribe("p")

	events := cs.CoreV1().Events(testNS)
	// Events are handled in order: once "p" is seen Started, the earlier ones were handled too.
	for i, pod := range []string{"late", "p"} {
		if _, err := events.Create(t.Context(), startedEvent(fmt.Sprintf("ev%d", i), pod), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	receive(t, ch, "the Started event")
	waitFor(t, "Started(p)", func() bool { return tr.Started("p", testContainer) })

	// An event naming another container of the pod is not this one's.
	ch2, unsubscribe2 := tr.Subscribe("two")
	defer unsubscribe2()
	ev := startedEvent("ev-other", "two")
	ev.InvolvedObject.FieldPath = "spec.containers{nodeexec-agent}"
	if _, err := events.Create(t.Context(), ev, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	receive(t, ch2, "the other container's Started event")
	if tr.Started("two", testContainer) || !tr.Started("two", "nodeexec-agent") {
		t.Errorf("Started(two, %s) = %v, Started(two, nodeexec-agent) = %v: want false, true", testContainer, tr.Started("two", testContainer), tr.Started("two", "nodeexec-agent"))
	}

	// An event seen before anyone subscribed to the pod does not count.
	_, unsubscribeLate := tr.Subscribe("late")
	defer unsubscribeLate()
	if tr.Started("late", testContainer) {
		t.Error(`Started("late") = true for an event seen before the subscription`)
	}

	unsubscribe()
	if tr.Started("p", testContainer) {
		t.Error(`Started("p") = true after the last subscriber left`)
	}
}
