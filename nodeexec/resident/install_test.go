package resident

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/agent"
)

// pullingPod is an agent pod of the DaemonSet with UID agentDSUID whose
// image cannot be pulled.
func pullingPod(ns, reason, msg string) *corev1.Pod {
	p := agentPod("agent-x", "node-1", false)
	p.Namespace = ns
	p.Spec.Containers = []corev1.Container{{Name: agent.ContainerName, Image: "registry.test/nodeexec/agent:missing"}}
	p.Status = corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
		Name: agent.ContainerName, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}},
	}}}
	return p
}

// uidOnCreate gives created DaemonSets the UID the test pods are owned by.
func uidOnCreate(c *fake.Clientset) {
	c.PrependReactor("create", "daemonsets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		a.(k8stesting.CreateAction).GetObject().(*appsv1.DaemonSet).UID = agentDSUID
		return false, nil, nil
	})
}

func TestInstallFailsFastOnImagePull(t *testing.T) {
	for _, reason := range []string{"ErrImagePull", "ImagePullBackOff", "InvalidImageName"} {
		t.Run(reason, func(t *testing.T) {
			client := fake.NewClientset(pullingPod("agents-x", reason, `failed to pull "registry.test/nodeexec/agent:missing": 401 Unauthorized`))
			uidOnCreate(client)
			start := time.Now()
			err := Install(t.Context(), client, Options{Namespace: "agents-x", Image: "registry.test/nodeexec/agent:missing", Timeout: time.Minute})
			if time.Since(start) > 5*time.Second {
				t.Errorf("Install took %s", time.Since(start))
			}
			var pe *nodeexec.PodError
			if !errors.Is(err, nodeexec.ErrImagePull) || !errors.As(err, &pe) || pe.Image != "registry.test/nodeexec/agent:missing" || pe.Node != "node-1" {
				t.Fatalf("err = %v, want a *PodError wrapping ErrImagePull naming the image and node", err)
			}
			for _, want := range []string{"401 Unauthorized", "rolled back: deleted namespace agents-x"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if _, err := client.CoreV1().Namespaces().Get(t.Context(), "agents-x", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("the namespace Install created is left: %v", err)
			}
		})
	}
}

func TestInstallRollsBackOnlyWhatItDid(t *testing.T) {
	watcherNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "nodeexec-system", Labels: map[string]string{nodeexec.LabelManagedBy: nodeexec.ManagedByValue}}}
	client := fake.NewClientset(watcherNS, pullingPod("nodeexec-system", "ErrImagePull", "not found"))
	uidOnCreate(client)
	err := Install(t.Context(), client, Options{Namespace: "nodeexec-system", Timeout: time.Minute})
	if !errors.Is(err, nodeexec.ErrImagePull) || !strings.Contains(err.Error(), "rolled back: deleted daemonset nodeexec-system/nodeexec-agent") {
		t.Fatalf("err = %v", err)
	}
	if _, err := client.CoreV1().Namespaces().Get(t.Context(), "nodeexec-system", metav1.GetOptions{}); err != nil {
		t.Errorf("the watcher's namespace was deleted: %v", err)
	}
	if _, err := client.AppsV1().DaemonSets("nodeexec-system").Get(t.Context(), DaemonSetName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the DaemonSet Install created is left: %v", err)
	}

	// An update is rolled back to the previous template.
	old := agentDS()
	old.Namespace = "agents-y"
	old.Spec.Template.Spec.Containers[0].Image = "registry.test/nodeexec/agent:good"
	client = fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "agents-y", Labels: old.Labels}}, old, pullingPod("agents-y", "ErrImagePull", "not found"))
	err = Install(t.Context(), client, Options{Namespace: "agents-y", Image: "registry.test/nodeexec/agent:missing", Timeout: time.Minute})
	if !errors.Is(err, nodeexec.ErrImagePull) || !strings.Contains(err.Error(), "previous template again") {
		t.Fatalf("err = %v", err)
	}
	ds, err := client.AppsV1().DaemonSets("agents-y").Get(t.Context(), DaemonSetName, metav1.GetOptions{})
	if err != nil || ds.Spec.Template.Spec.Containers[0].Image != "registry.test/nodeexec/agent:good" {
		t.Errorf("daemonset after rollback: %v, %v", err, ds)
	}
}

func TestInstallAndUninstallRespectOwnership(t *testing.T) {
	watcherNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "nodeexec-system", Labels: map[string]string{nodeexec.LabelManagedBy: nodeexec.ManagedByValue}}}
	foreignDS := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: DaemonSetName, Namespace: "nodeexec-system", Labels: map[string]string{"app": "someone-else"}}}
	client := fake.NewClientset(watcherNS, foreignDS)
	if err := Install(t.Context(), client, Options{Namespace: "nodeexec-system", Timeout: time.Second}); err == nil || !strings.Contains(err.Error(), "not nodeexec's agent DaemonSet") {
		t.Errorf("Install over a foreign DaemonSet: %v", err)
	}
	if err := Uninstall(t.Context(), client, Options{Namespace: "nodeexec-system", Timeout: time.Second}); err == nil || !strings.Contains(err.Error(), "not deleted") {
		t.Errorf("Uninstall of a foreign DaemonSet: %v", err)
	}
	if _, err := client.AppsV1().DaemonSets("nodeexec-system").Get(t.Context(), DaemonSetName, metav1.GetOptions{}); err != nil {
		t.Errorf("the foreign DaemonSet was deleted: %v", err)
	}

	// Agents installed into the watcher's namespace: uninstall removes the
	// DaemonSet and keeps the namespace it did not create.
	ds := agentDS()
	ds.Namespace = "nodeexec-system"
	client = fake.NewClientset(watcherNS, ds)
	if err := Uninstall(t.Context(), client, Options{Namespace: "nodeexec-system", Timeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Namespaces().Get(t.Context(), "nodeexec-system", metav1.GetOptions{}); err != nil {
		t.Errorf("Uninstall deleted a namespace it did not create: %v", err)
	}
	if _, err := client.AppsV1().DaemonSets("nodeexec-system").Get(t.Context(), DaemonSetName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the agent DaemonSet is left: %v", err)
	}

	// Its own namespace is deleted.
	o, _ := Options{}.withDefaults(time.Now())
	client = fake.NewClientset(BuildNamespace(o))
	if err := Uninstall(t.Context(), client, Options{Timeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Namespaces().Get(t.Context(), DefaultNamespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Uninstall kept the namespace Install created: %v", err)
	}
}

// crashingPod is a Running agent pod of the DaemonSet with UID agentDSUID
// whose container started and exited: waiting in reason (CrashLoopBackOff,
// or none: terminated between restarts), restarted restarts times.
func crashingPod(ns, name, node, reason string, restarts int32) *corev1.Pod {
	p := agentPod(name, node, false)
	p.Namespace = ns
	cs := &p.Status.ContainerStatuses[0]
	cs.RestartCount = restarts
	cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error", Message: "agent: bad flag\n"}}
	if reason != "" {
		cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "back-off 20s restarting failed container=agent"}}
	} else {
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error"}}
	}
	return p
}

// installRequests counts the fake's requests by verb and resource.
func installRequests(c *fake.Clientset) map[string]int {
	n := map[string]int{}
	for _, a := range c.Actions() {
		n[a.GetVerb()+" "+a.GetResource().Resource]++
	}
	return n
}

// TestInstallFailsFastOnAgentThatCannotStart: every agent that cannot start
// ends the wait and is rolled back, in whatever phase its pod is (a pull
// error while Pending; a container that started and then crash-loops or
// keeps restarting while Running), among healthy agents; the pods are read
// by one list and one watch.
func TestInstallFailsFastOnAgentThatCannotStart(t *testing.T) {
	healthy := func(ns string) []runtime.Object {
		var objs []runtime.Object
		for i := range 50 {
			p := agentPod(fmt.Sprintf("agent-ok-%d", i), fmt.Sprintf("node-ok-%d", i), true)
			p.Namespace = ns
			objs = append(objs, p)
		}
		return objs
	}
	runContainerError := crashingPod("agents-x", "agent-bad", "node-7", "RunContainerError", 1)
	runContainerError.Status.ContainerStatuses[0].State.Waiting.Message = "exec format error"
	for _, tc := range []struct {
		name       string
		pod        *corev1.Pod
		reason     string
		isPull     bool
		mentioning []string
	}{
		{"Pending ErrImagePull", pullingPod("agents-x", "ErrImagePull", "not found"), "ErrImagePull", true, []string{"not found"}},
		{"Running CrashLoopBackOff", crashingPod("agents-x", "agent-bad", "node-7", "CrashLoopBackOff", 3), "CrashLoopBackOff", false,
			[]string{"restarted 3 times", "last exit code 2 (Error): agent: bad flag"}},
		{"Running restarting, not ready", crashingPod("agents-x", "agent-bad", "node-7", "", 1), "CrashLoopBackOff", false,
			[]string{"restarted 1 times", "last exit code 2"}},
		{"Running RunContainerError", runContainerError, "RunContainerError", false, []string{"exec format error"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(append(healthy("agents-x"), tc.pod)...)
			uidOnCreate(client)
			start := time.Now()
			err := Install(t.Context(), client, Options{Namespace: "agents-x", Timeout: time.Minute})
			if time.Since(start) > 5*time.Second {
				t.Errorf("Install took %s", time.Since(start))
			}
			var pe *nodeexec.PodError
			if !errors.As(err, &pe) || pe.Reason != tc.reason || pe.Node != tc.pod.Spec.NodeName || pe.Pod != tc.pod.Name || errors.Is(err, nodeexec.ErrImagePull) != tc.isPull {
				t.Fatalf("err = %v (%#v), want a *PodError %s naming pod %s on %s", err, pe, tc.reason, tc.pod.Name, tc.pod.Spec.NodeName)
			}
			for _, want := range append(tc.mentioning, "the agent cannot start on node "+tc.pod.Spec.NodeName, "rolled back: deleted namespace agents-x") {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			n := installRequests(client)
			if n["list pods"] != 1 || n["watch pods"] != 1 {
				t.Errorf("pod requests %v, want one list and one watch", n)
			}
		})
	}
}

// TestInstallWaitHealthyRollout: a rollout whose agents all start ends the
// wait without an error; a crash-looping pod of an older template (being
// replaced) does not count; each check of the wait costs one DaemonSet get,
// and the pods are read once (list, then watch) for the whole Install.
func TestInstallWaitHealthyRollout(t *testing.T) {
	const nodes, checksBeforeReady = 200, 4
	var objs []runtime.Object
	for i := range nodes {
		p := agentPod(fmt.Sprintf("agent-%d", i), fmt.Sprintf("node-%d", i), i%2 == 0)
		p.Namespace = DefaultNamespace
		p.Labels["pod-template-generation"] = "1"
		objs = append(objs, p)
	}
	old := crashingPod(DefaultNamespace, "agent-old", "node-0", "CrashLoopBackOff", 5)
	old.Labels["pod-template-generation"] = "0"
	objs = append(objs, old)
	client := fake.NewClientset(objs...)
	uidOnCreate(client)
	gets := 0
	client.PrependReactor("get", "daemonsets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj, err := client.Tracker().Get(appsv1.SchemeGroupVersion.WithResource("daemonsets"), a.GetNamespace(), a.(k8stesting.GetAction).GetName())
		if err != nil {
			return true, nil, err
		}
		ds := obj.(*appsv1.DaemonSet).DeepCopy()
		ds.Generation = 1
		ds.Annotations = map[string]string{"deprecated.daemonset.template.generation": "1"}
		ds.Status = appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: nodes, UpdatedNumberScheduled: nodes, NumberAvailable: nodes / 2}
		if gets++; gets > checksBeforeReady {
			ds.Status.NumberAvailable = nodes
		}
		return true, ds, nil
	})
	if err := Install(t.Context(), client, Options{Timeout: time.Minute}); err != nil {
		t.Fatalf("Install: %v", err)
	}
	n := installRequests(client)
	if n["list pods"] != 1 || n["watch pods"] > 1 || n["get daemonsets"] != checksBeforeReady+1 {
		t.Errorf("requests %v, want one pod list, at most one watch and %d DaemonSet gets", n, checksBeforeReady+1)
	}
}

func TestAgentPodFailureTemplates(t *testing.T) {
	ds := agentDS()
	ds.Annotations = map[string]string{"deprecated.daemonset.template.generation": "2"}
	cur := crashingPod(DefaultNamespace, "agent-new", "node-1", "CrashLoopBackOff", 1)
	cur.Labels["pod-template-generation"] = "2"
	old := crashingPod(DefaultNamespace, "agent-old", "node-2", "CrashLoopBackOff", 1)
	old.Labels["pod-template-generation"] = "1"
	running := agentPod("agent-restarted", "node-3", true)
	running.Status.ContainerStatuses[0].RestartCount = 4 // restarted, now running and ready
	if pe := AgentPodFailure(ds, []corev1.Pod{*old, *running}); pe != nil {
		t.Errorf("an older template's pod, or one running again: %v", pe)
	}
	if pe := AgentPodFailure(ds, []corev1.Pod{*old, *running, *cur}); pe == nil || pe.Pod != "agent-new" {
		t.Errorf("current template's crash loop: %v", pe)
	}
	// A pull failure counts in any template, as before.
	pull := pullingPod(DefaultNamespace, "ImagePullBackOff", "not found")
	pull.Labels["pod-template-generation"] = "1"
	if pe := AgentPodFailure(ds, []corev1.Pod{*pull}); pe == nil || pe.Reason != "ImagePullBackOff" {
		t.Errorf("pull failure: %v", pe)
	}
}

// TestInstallRecordedRollsBackItsRBAC: a recorded install in an existing
// namespace whose agent cannot start deletes the DaemonSet and the service
// account, Role and RoleBinding it created; one that finds a service
// account it does not own refuses before creating anything else.
func TestInstallRecordedRollsBackItsRBAC(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "agents-r"}}
	client := fake.NewClientset(ns, pullingPod("agents-r", "ErrImagePull", "not found"))
	uidOnCreate(client)
	err := Install(t.Context(), client, Options{Namespace: "agents-r", Transport: TransportRecorded, Timeout: time.Minute})
	if !errors.Is(err, nodeexec.ErrImagePull) || !strings.Contains(err.Error(), "deleted the agents' serviceaccount, role, rolebinding") {
		t.Fatalf("err = %v", err)
	}
	if _, err := client.CoreV1().ServiceAccounts("agents-r").Get(t.Context(), RecordServiceAccount, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the service account is left: %v", err)
	}
	if _, err := client.RbacV1().RoleBindings("agents-r").Get(t.Context(), RecordServiceAccount, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the RoleBinding is left: %v", err)
	}

	foreign := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: RecordServiceAccount, Namespace: "agents-r"}}
	client = fake.NewClientset(ns, foreign)
	err = Install(t.Context(), client, Options{Namespace: "agents-r", Transport: TransportRecorded, Timeout: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "serviceaccount agents-r/nodeexec-agent exists and is not nodeexec's") {
		t.Fatalf("err = %v", err)
	}
	if _, err := client.AppsV1().DaemonSets("agents-r").Get(t.Context(), DaemonSetName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a DaemonSet was created: %v", err)
	}
}
