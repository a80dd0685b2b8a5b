package podexec_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/remotecommand"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

func getLease(t *testing.T, cs *fake.Clientset, name string) *coordinationv1.Lease {
	t.Helper()
	l, err := cs.CoordinationV1().Leases(testNS).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get lease: %v", err)
	}
	return l
}

// TestRunLeaseReleaseDuringRenewal: the last release while a renewal is in
// flight waits for it and deletes the Lease; it used to deadlock (release
// held the lock the renewal needed to record its result, while waiting for
// the renewal loop to end).
func TestRunLeaseReleaseDuringRenewal(t *testing.T) {
	cs := fake.NewClientset()
	entered, unblock := make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	cs.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if once.CompareAndSwap(false, true) {
			close(entered)
			<-unblock
		}
		return false, nil, nil // on to the tracker
	})
	clk := clocktesting.NewFakeClock(t0)
	l, err := podexec.NewLease(podexec.LeaseOptions{Client: cs, Namespace: testNS, RunID: "run1", Holder: "me", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	lease, release, err := l.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a timer", clk.HasWaiters)
	clk.Step(podexec.DefaultLeaseRenewInterval)
	select {
	case <-entered:
	case <-time.After(waitLimit):
		t.Fatal("no renewal started")
	}
	released := make(chan struct{})
	go func() { release(); close(released) }()
	time.Sleep(200 * time.Millisecond) // let release take the lock and wait for the loop
	close(unblock)
	select {
	case <-released:
	case <-time.After(waitLimit):
		t.Fatal("release did not return: deadlocked with the renewal in flight")
	}
	if _, err := cs.CoordinationV1().Leases(testNS).Get(t.Context(), lease.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("lease not deleted by the release: %v", err)
	}
}

func TestRunLeaseLifecycle(t *testing.T) {
	cs := fake.NewClientset()
	clk := clocktesting.NewFakeClock(t0)
	l, err := podexec.NewLease(podexec.LeaseOptions{Client: cs, Namespace: testNS, RunID: "run1", Holder: "me", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	lease, release1, err := l.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if lease.Name != "nodeexec-run-run1" || lease.Labels[nodeexec.LabelRunID] != "run1" || lease.Labels[nodeexec.LabelManagedBy] != nodeexec.ManagedByValue {
		t.Errorf("lease %s labels %v", lease.Name, lease.Labels)
	}
	if got := *lease.Spec.LeaseDurationSeconds; got != 30 {
		t.Errorf("leaseDurationSeconds %d, want 30", got)
	}
	if got := lease.Annotations[nodeexec.AnnotationDeadline]; got != t0.Add(30*time.Second).Format(time.RFC3339) {
		t.Errorf("deadline annotation %q", got)
	}
	// A second holder shares it: one create.
	_, release2, err := l.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	creates := 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == "create" && a.GetResource().Resource == "leases" {
			creates++
		}
	}
	if creates != 1 {
		t.Errorf("%d lease creates, want 1", creates)
	}

	// Renewed every 10s.
	for i := 1; i <= 3; i++ {
		waitFor(t, "a timer", clk.HasWaiters)
		clk.Step(podexec.DefaultLeaseRenewInterval)
		want := t0.Add(time.Duration(i) * podexec.DefaultLeaseRenewInterval)
		waitFor(t, "the renewal", func() bool {
			got := getLease(t, cs, lease.Name).Spec.RenewTime
			return got != nil && got.Time.Equal(want)
		})
		if podexec.LeaseExpired(getLease(t, cs, lease.Name), want.Add(29*time.Second)) {
			t.Errorf("renewed lease expired within its duration")
		}
	}
	release1()
	if _, err := cs.CoordinationV1().Leases(testNS).Get(t.Context(), lease.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("lease deleted while still held: %v", err)
	}
	release2()
	if _, err := cs.CoordinationV1().Leases(testNS).Get(t.Context(), lease.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("lease not deleted by the last release: %v", err)
	}
	// Acquired again: a new Lease.
	_, release3, err := l.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	release3()
}

func TestRunLeaseDeleteRetried(t *testing.T) {
	cs := fake.NewClientset()
	clk := clocktesting.NewFakeClock(t0)
	var deletes atomic.Int32
	cs.PrependReactor("delete", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if deletes.Add(1) <= 2 {
			return true, nil, errors.New("EOF")
		}
		return false, nil, nil
	})
	l, _ := podexec.NewLease(podexec.LeaseOptions{Client: cs, Namespace: testNS, RunID: "run1", Clock: clk})
	lease, release, err := l.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { release(); close(done) }()
	for {
		select {
		case <-done:
			if n := deletes.Load(); n != 3 {
				t.Errorf("%d deletes, want 3", n)
			}
			if _, err := cs.CoordinationV1().Leases(testNS).Get(t.Context(), lease.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("lease left: %v", err)
			}
			return
		default:
			if clk.HasWaiters() {
				clk.Step(time.Second)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
}

func TestRunLeaseForbidden(t *testing.T) {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(coordinationv1.Resource("leases"), "x", errors.New("no"))
	})
	l, _ := podexec.NewLease(podexec.LeaseOptions{Client: cs, Namespace: testNS, RunID: "run1"})
	_, _, err := l.Acquire(t.Context())
	if !errors.Is(err, nodeexec.ErrForbidden) {
		t.Fatalf("err %v, want ErrForbidden", err)
	}
	if want := "create, get, update and delete on leases.coordination.k8s.io"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name the RBAC needed (%q)", err, want)
	}
}

func TestNewLeaseValidates(t *testing.T) {
	cs := fake.NewClientset()
	for _, o := range []podexec.LeaseOptions{
		{Namespace: "ns", RunID: "r"},
		{Client: cs, RunID: "r"},
		{Client: cs, Namespace: "ns"},
		{Client: cs, Namespace: "ns", RunID: "r", Duration: 10 * time.Second, RenewInterval: 10 * time.Second},
	} {
		if _, err := podexec.NewLease(o); err == nil {
			t.Errorf("NewLease(%+v) succeeded", o)
		}
	}
}

func TestOwnedBy(t *testing.T) {
	pod := testPod("p", corev1.PodStatus{})
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "nodeexec-run-r", UID: "lease-uid"}}
	got := podexec.OwnedBy(pod, lease)
	if pod.OwnerReferences != nil || pod.Labels[podexec.LabelLease] != "" {
		t.Error("OwnedBy changed its argument")
	}
	want := []metav1.OwnerReference{{APIVersion: "coordination.k8s.io/v1", Kind: "Lease", Name: "nodeexec-run-r", UID: "lease-uid"}}
	if diff := cmp.Diff(want, got.OwnerReferences); diff != "" {
		t.Errorf("ownerReferences (-want +got):\n%s", diff)
	}
	if got.Labels[podexec.LabelLease] != "nodeexec-run-r" {
		t.Errorf("labels %v", got.Labels)
	}
}

func TestExecutorHoldsLease(t *testing.T) {
	h := newHarness(t)
	lease, err := podexec.NewLease(podexec.LeaseOptions{Client: h.cs, Namespace: testNS, RunID: testRunID, Clock: h.clock})
	if err != nil {
		t.Fatal(err)
	}
	h.exec, err = podexec.New(podexec.Options{Client: h.client, Streamer: h.streamer, Tracker: h.tracker, Backend: testBackend, Clock: h.clock, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	var seen *corev1.Pod
	var leaseDuringRun bool
	h.streamer.fn = func(ctx context.Context, _ int, _ remotecommand.StreamOptions) error {
		seen, _ = h.cs.CoreV1().Pods(testNS).Get(ctx, "p", metav1.GetOptions{})
		_, lerr := h.cs.CoordinationV1().Leases(testNS).Get(ctx, podexec.LeaseName(testRunID), metav1.GetOptions{})
		leaseDuringRun = lerr == nil
		return nil
	}
	if _, err := h.run(t, t.Context(), testPod("p", runningStatus()), nodeexec.Request{Command: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	if !leaseDuringRun {
		t.Error("no Lease while the command ran")
	}
	if seen == nil || seen.Labels[podexec.LabelLease] != podexec.LeaseName(testRunID) || len(seen.OwnerReferences) != 1 || seen.OwnerReferences[0].Kind != "Lease" {
		t.Errorf("pod not owned by the run's Lease: %+v", seen)
	}
	if _, err := h.cs.CoordinationV1().Leases(testNS).Get(t.Context(), podexec.LeaseName(testRunID), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Lease left after the run: %v", err)
	}
}

func TestCollectExpired(t *testing.T) {
	now := t0
	mkLease := func(ns, name string, renewed time.Time) *coordinationv1.Lease {
		rt := metav1.NewMicroTime(renewed)
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1",
				Labels: map[string]string{nodeexec.LabelManagedBy: nodeexec.ManagedByValue}},
			Spec: coordinationv1.LeaseSpec{RenewTime: &rt, LeaseDurationSeconds: ptr.To(int32(30))},
		}
	}
	mkPod := func(ns, name, lease string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name),
			Labels: map[string]string{nodeexec.LabelManagedBy: nodeexec.ManagedByValue, podexec.LabelLease: lease}}}
	}
	agent := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "agent", Labels: map[string]string{nodeexec.LabelManagedBy: nodeexec.ManagedByValue}}}
	w := watcherPod("a", "watcher-run", now.Add(-time.Hour))
	w.Labels[podexec.LabelLease] = "nodeexec-run-dead"
	// A finished run's pod, which its run deleted and the kubelet is still
	// stopping, is not deleted again; one deleted with a longer grace period is.
	ended := mkPod("a", "ended-pod", "nodeexec-run-gone")
	ended.DeletionTimestamp, ended.DeletionGracePeriodSeconds = &metav1.Time{Time: now}, ptr.To(podexec.DeleteGracePeriod)
	slow := mkPod("a", "slow-pod", "nodeexec-run-gone")
	slow.DeletionTimestamp, slow.DeletionGracePeriodSeconds = &metav1.Time{Time: now}, ptr.To(int64(30))
	cs := fake.NewClientset(ended, slow,
		mkLease("a", "nodeexec-run-live", now.Add(-29*time.Second)),
		mkLease("a", "nodeexec-run-dead", now.Add(-31*time.Second)),
		mkLease("b", "nodeexec-run-dead2", now.Add(-time.Hour)),
		mkLease("a", "other-lease", now.Add(-time.Hour)),
		mkPod("a", "live-pod", "nodeexec-run-live"),
		mkPod("a", "dead-pod", "nodeexec-run-dead"),
		mkPod("a", "orphan-pod", "nodeexec-run-gone"),
		mkPod("b", "dead-pod2", "nodeexec-run-dead2"),
		agent, w,
	)
	got, err := podexec.CollectExpired(t.Context(), cs, "a", now)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if diff := cmp.Diff([]string{"lease/a/nodeexec-run-dead", "pod/a/dead-pod", "pod/a/orphan-pod", "pod/a/slow-pod"}, got); diff != "" {
		t.Errorf("namespace a (-want +got):\n%s", diff)
	}
	// Each collected pod has its Event: outcome unknown, and why.
	evs, _ := cs.CoreV1().Events("a").List(t.Context(), metav1.ListOptions{})
	why := map[string]string{}
	for _, e := range evs.Items {
		if e.Reason != podexec.ReasonOutcomeUnknown || e.Type != corev1.EventTypeWarning || e.InvolvedObject.UID != types.UID("uid-"+e.InvolvedObject.Name) ||
			e.Labels[nodeexec.LabelManagedBy] != nodeexec.ManagedByValue || !strings.HasPrefix(e.Message, "outcome unknown: ") {
			t.Errorf("event %+v: want a Warning %s on the pod, labelled", e, podexec.ReasonOutcomeUnknown)
		}
		why[e.InvolvedObject.Name] = e.Message
	}
	if len(why) != 3 || !strings.Contains(why["dead-pod"], "stopped renewing the run Lease nodeexec-run-dead (last renewed ") ||
		!strings.Contains(why["orphan-pod"], "its run Lease nodeexec-run-gone no longer exists") {
		t.Errorf("events by pod: %v; want one per collected pod saying why", why)
	}
	got, err = podexec.CollectExpired(t.Context(), cs, "", now)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if diff := cmp.Diff([]string{"lease/b/nodeexec-run-dead2", "pod/b/dead-pod2"}, got); diff != "" {
		t.Errorf("all namespaces (-want +got):\n%s", diff)
	}
	pods, _ := cs.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{})
	var left []string
	for _, p := range pods.Items {
		left = append(left, p.Name)
	}
	slices.Sort(left)
	if diff := cmp.Diff([]string{"agent", "ended-pod", "live-pod", "watcher-run"}, left); diff != "" {
		t.Errorf("pods left (-want +got):\n%s", diff)
	}
}

func TestRunCollectorCollectsOnItsInterval(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	rt := metav1.NewMicroTime(t0.Add(-20 * time.Second))
	cs := fake.NewClientset(
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "nodeexec-run-x", Labels: map[string]string{nodeexec.LabelManagedBy: nodeexec.ManagedByValue}},
			Spec: coordinationv1.LeaseSpec{RenewTime: &rt, LeaseDurationSeconds: ptr.To(int32(30))}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p", Labels: map[string]string{nodeexec.LabelManagedBy: nodeexec.ManagedByValue, podexec.LabelLease: "nodeexec-run-x"}}},
	)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- podexec.RunCollector(ctx, cs, "", 0, clk) }()
	waitFor(t, "a timer", clk.HasWaiters)
	if _, err := cs.CoreV1().Pods("a").Get(t.Context(), "p", metav1.GetOptions{}); err != nil {
		t.Fatalf("pod of a live run collected: %v", err)
	}
	clk.Step(podexec.DefaultCollectInterval) // the Lease is now 35s old
	waitFor(t, "the collection", func() bool {
		_, err := cs.CoreV1().Pods("a").Get(t.Context(), "p", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("RunCollector: %v", err)
	}
}

// A run that starts while CollectExpired runs creates its Lease, then its pod;
// if both appear between the collector's two lists, the pod must not be taken
// for one whose Lease is gone.
func TestCollectExpiredSparesRunStartingMeanwhile(t *testing.T) {
	cs := fake.NewClientset()
	started := false
	// The Lease list answers with what existed, then the new run creates its
	// Lease and pod. (The tracker, not the clientset: the clientset is locked
	// while a reactor runs.)
	cs.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		gvr := coordinationv1.SchemeGroupVersion.WithResource("leases")
		list, err := cs.Tracker().List(gvr, coordinationv1.SchemeGroupVersion.WithKind("Lease"), "a")
		if err != nil || started {
			return true, list, err
		}
		started = true
		rt := metav1.NewMicroTime(t0)
		if err := cs.Tracker().Add(&coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "nodeexec-run-new", Labels: map[string]string{nodeexec.LabelManagedBy: nodeexec.ManagedByValue}},
			Spec:       coordinationv1.LeaseSpec{RenewTime: &rt, LeaseDurationSeconds: ptr.To(int32(30))},
		}); err != nil {
			t.Error(err)
		}
		if err := cs.Tracker().Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "new-pod",
			Labels: map[string]string{nodeexec.LabelManagedBy: nodeexec.ManagedByValue, podexec.LabelLease: "nodeexec-run-new"}}}); err != nil {
			t.Error(err)
		}
		return true, list, nil
	})
	got, err := podexec.CollectExpired(t.Context(), cs, "a", t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("deleted %v, want nothing", got)
	}
	if _, err := cs.CoreV1().Pods("a").Get(t.Context(), "new-pod", metav1.GetOptions{}); err != nil {
		t.Errorf("the new run's pod: %v", err)
	}
}
