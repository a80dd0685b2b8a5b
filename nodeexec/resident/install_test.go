package resident

import (
	"errors"
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
