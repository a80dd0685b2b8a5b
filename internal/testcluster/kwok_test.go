package testcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/template"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"
)

func TestKwokOptionsResolve(t *testing.T) {
	o, err := KwokOptions{}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	want := KwokOptions{PodCompleteAfter: time.Second, Version: "v0.8.0"}
	if diff := cmp.Diff(want, o); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	o, err = KwokOptions{Version: "0.7.0", FailNodes: []string{"kwok-node-3", "kwok-node-1", "kwok-node-3"}, PodCompleteAfter: 5 * time.Second}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	want = KwokOptions{PodCompleteAfter: 5 * time.Second, Version: "v0.7.0", FailNodes: []string{"kwok-node-1", "kwok-node-3"}}
	if diff := cmp.Diff(want, o); diff != "" {
		t.Errorf("resolved (-want +got):\n%s", diff)
	}
	for _, bad := range []KwokOptions{
		{Version: "latest"},
		{PodCompleteAfter: -time.Second},
		{PodCompleteAfter: time.Microsecond},
		{PodStartDelay: -time.Second},
		{PodStartDelay: time.Microsecond},
		{FailNodes: []string{""}},
		{FailNodes: []string{"a,b"}},
	} {
		if _, err := bad.resolve(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

func TestKwokArgs(t *testing.T) {
	argv := kwokArgs("/c/kwok/v0.8.0/kwok-x", "/s/kwok", KwokOptions{})
	for _, want := range []string{"--config=/s/kwok/config.yaml", "--kubeconfig=/s/kwok/kubeconfig",
		"--manage-all-nodes=false", "--manage-nodes-with-label-selector=type=kwok", "--cidr=10.246.0.0/16"} {
		if !slices.Contains(argv, want) {
			t.Errorf("argv %v lacks %s", argv, want)
		}
	}
	for _, a := range argv {
		if strings.HasPrefix(a, "--node-lease-duration-seconds") {
			t.Errorf("lease heartbeat without Heartbeat: %v", argv)
		}
	}
	hb := kwokArgs("/c/kwok/v0.8.0/kwok-x", "/s/kwok", KwokOptions{Heartbeat: true})
	if !slices.Contains(hb, "--node-lease-duration-seconds=40") {
		t.Errorf("Heartbeat argv %v", hb)
	}
	cfg := []byte("config")
	if kwokFingerprint(argv, cfg) == kwokFingerprint(hb, cfg) || kwokFingerprint(argv, cfg) == kwokFingerprint(argv, []byte("other")) {
		t.Error("fingerprint ignores argv or config")
	}
	if kwokFingerprint(argv, cfg) != kwokFingerprint(slices.Clone(argv), cfg) {
		t.Error("fingerprint not stable")
	}
}

// Abbreviated copies of kwok v0.8.0's stock stages (kustomize/stage/...); only
// what kwokConfig looks at.
var testStockStages = map[string]string{
	"node/fast/node-initialize.yaml": `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-initialize
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'NotIn'
      values: ['True']
  next:
    statusTemplate: "phase: Running"
`,
	"node/heartbeat-with-lease/node-heartbeat-with-lease.yaml": `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-heartbeat-with-lease
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector: {matchExpressions: [{key: .status.phase, operator: In, values: [Running]}]}
  next: {statusTemplate: "phase: Running"}
`,
	"pod/general/pod-create.yaml":                   testPodStage("pod-create", ".status.podIP", "DoesNotExist"),
	"pod/general/pod-init-container-running.yaml":   testPodStage("pod-init-container-running", ".status.phase", "In", "Pending"),
	"pod/general/pod-init-container-completed.yaml": testPodStage("pod-init-container-completed", ".status.phase", "In", "Pending"),
	"pod/general/pod-ready.yaml":                    testPodStage("pod-ready", ".status.phase", "In", "Pending"),
	"pod/general/pod-complete.yaml":                 testPodStage("pod-complete", ".metadata.ownerReferences.[].kind", "In", "Job"),
	"pod/general/pod-delete.yaml":                   testPodStage("pod-delete", ".metadata.deletionTimestamp", "Exists"),
}

func testPodStage(name, key, op string, values ...string) string {
	v := ""
	if len(values) > 0 {
		v = `, values: ["` + strings.Join(values, `","`) + `"]`
	}
	return `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: ` + name + `
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '` + key + `', operator: ` + op + v + `}
  weight: 1
  delay:
    durationMilliseconds: 1000
    durationFrom: {expressionFrom: '.metadata.annotations["` + name + `.stage.kwok.x-k8s.io/delay"]'}
    jitterDurationMilliseconds: 5000
  next: {statusTemplate: "phase: Running"}
`
}

func testStages(t *testing.T, heartbeat bool) []kwokStage {
	t.Helper()
	var st []kwokStage
	for _, f := range kwokStageFiles(heartbeat) {
		doc, ok := testStockStages[f]
		if !ok {
			t.Fatalf("no test copy of %s", f)
		}
		st = append(st, kwokStage{f, []byte(doc)})
	}
	return st
}

type testStage struct {
	APIVersion string `json:"apiVersion"`
	Kind       string
	Metadata   struct{ Name string }
	Options    map[string]int
	Spec       struct {
		ResourceRef struct{ APIGroup, Kind string } `json:"resourceRef"`
		Selector    struct {
			MatchLabels      map[string]string `json:"matchLabels"`
			MatchExpressions []struct {
				Key, Operator string
				Values        []string
			} `json:"matchExpressions"`
		}
		Weight int
		Delay  struct {
			DurationMilliseconds       int64 `json:"durationMilliseconds"`
			JitterDurationMilliseconds int64 `json:"jitterDurationMilliseconds"`
		}
		Next struct {
			StatusTemplate string `json:"statusTemplate"`
		}
	}
}

func parseKwokConfig(t *testing.T, b []byte) []testStage {
	t.Helper()
	var out []testStage
	for _, doc := range strings.Split(string(b), "---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var s testStage
		if err := yaml.Unmarshal([]byte(doc), &s); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		out = append(out, s)
	}
	return out
}

func stageByName(stages []testStage, name string) *testStage {
	for i := range stages {
		if stages[i].Metadata.Name == name {
			return &stages[i]
		}
	}
	return nil
}

func exprString(s *testStage) []string {
	var out []string
	for _, e := range s.Spec.Selector.MatchExpressions {
		out = append(out, e.Key+" "+e.Operator+" "+strings.Join(e.Values, ","))
	}
	return out
}

func TestKwokConfig(t *testing.T) {
	o, _ := KwokOptions{PodCompleteAfter: 2500 * time.Millisecond}.resolve()
	b, err := kwokConfig(testStages(t, false), o)
	if err != nil {
		t.Fatal(err)
	}
	stages := parseKwokConfig(t, b)
	var names []string
	for _, s := range stages {
		names = append(names, s.Kind+"/"+s.Metadata.Name)
	}
	want := []string{"KwokConfiguration/", "Stage/node-initialize", "Stage/pod-create", "Stage/pod-init-container-running",
		"Stage/pod-init-container-completed", "Stage/pod-ready", "Stage/pod-complete", "Stage/pod-delete", "Stage/nodeexec-pod-complete"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Fatalf("documents (-want +got):\n%s", diff)
	}
	if stages[0].APIVersion != "config.kwok.x-k8s.io/v1alpha1" || stages[0].Options["podPlayStageParallelism"] != kwokParallelism {
		t.Errorf("KwokConfiguration %+v", stages[0])
	}
	// the stock pod-complete stage leaves nodeexec pods alone
	pc := stageByName(stages, "pod-complete")
	if diff := cmp.Diff([]string{".metadata.ownerReferences.[].kind In Job", `.metadata.labels["app.kubernetes.io/managed-by"] NotIn nodeexec`}, exprString(pc)); diff != "" {
		t.Errorf("pod-complete selector (-want +got):\n%s", diff)
	}
	// pod-delete leaves ended pods to the API server
	if diff := cmp.Diff([]string{".metadata.deletionTimestamp Exists ", ".status.phase NotIn Succeeded,Failed"}, exprString(stageByName(stages, "pod-delete"))); diff != "" {
		t.Errorf("pod-delete selector (-want +got):\n%s", diff)
	}
	// the other stock stages are unchanged
	if diff := cmp.Diff([]string{".status.phase In Pending"}, exprString(stageByName(stages, "pod-ready"))); diff != "" {
		t.Errorf("pod-ready selector (-want +got):\n%s", diff)
	}
	ok := stageByName(stages, "nodeexec-pod-complete")
	if ok.APIVersion != "kwok.x-k8s.io/v1alpha1" || ok.Spec.ResourceRef.Kind != "Pod" || ok.Spec.ResourceRef.APIGroup != "v1" {
		t.Errorf("nodeexec-pod-complete %+v", ok)
	}
	if diff := cmp.Diff(map[string]string{"app.kubernetes.io/managed-by": "nodeexec"}, ok.Spec.Selector.MatchLabels); diff != "" {
		t.Errorf("matchLabels (-want +got):\n%s", diff)
	}
	// no FailNodes: no nodeName expression (NotIn with no values is invalid in kwok)
	// resident agents (component=agent) run until deleted
	if diff := cmp.Diff([]string{".metadata.deletionTimestamp DoesNotExist ", ".status.phase In Running", `.metadata.labels["app.kubernetes.io/component"] NotIn agent`}, exprString(ok)); diff != "" {
		t.Errorf("nodeexec-pod-complete selector (-want +got):\n%s", diff)
	}
	if ok.Spec.Delay.DurationMilliseconds != 2500 {
		t.Errorf("delay %d ms, want 2500", ok.Spec.Delay.DurationMilliseconds)
	}
	// without PodStartDelay, kwok's own pod start delays (1-5 s per stage)
	for _, name := range []string{"pod-create", "pod-ready"} {
		if d := stageByName(stages, name).Spec.Delay; d.DurationMilliseconds != 1000 || d.JitterDurationMilliseconds != 5000 {
			t.Errorf("%s delay %+v, want kwok's 1000-5000 ms", name, d)
		}
	}
	if !strings.Contains(ok.Spec.Next.StatusTemplate, "phase: Succeeded") {
		t.Errorf("template:\n%s", ok.Spec.Next.StatusTemplate)
	}

	o.FailNodes = []string{"kwok-node-2", "kwok-node-7"}
	o.Heartbeat = true
	o.PodStartDelay = 200 * time.Millisecond
	b, err = kwokConfig(testStages(t, true), o)
	if err != nil {
		t.Fatal(err)
	}
	stages = parseKwokConfig(t, b)
	if stageByName(stages, "node-heartbeat-with-lease") == nil {
		t.Error("Heartbeat: no node-heartbeat-with-lease stage")
	}
	for _, name := range []string{"pod-create", "pod-ready"} {
		if d := stageByName(stages, name).Spec.Delay; d.DurationMilliseconds != 200 || d.JitterDurationMilliseconds != 400 {
			t.Errorf("PodStartDelay 200ms: %s delay %+v, want 200-400 ms", name, d)
		}
	}
	ok = stageByName(stages, "nodeexec-pod-complete")
	if diff := cmp.Diff([]string{".metadata.deletionTimestamp DoesNotExist ", ".status.phase In Running", `.metadata.labels["app.kubernetes.io/component"] NotIn agent`, ".spec.nodeName NotIn kwok-node-2,kwok-node-7"}, exprString(ok)); diff != "" {
		t.Errorf("nodeexec-pod-complete selector (-want +got):\n%s", diff)
	}
	fail := stageByName(stages, "nodeexec-pod-fail")
	if fail == nil {
		t.Fatal("no nodeexec-pod-fail stage")
	}
	if diff := cmp.Diff([]string{".metadata.deletionTimestamp DoesNotExist ", ".status.phase In Running", `.metadata.labels["app.kubernetes.io/component"] NotIn agent`, ".spec.nodeName In kwok-node-2,kwok-node-7"}, exprString(fail)); diff != "" {
		t.Errorf("nodeexec-pod-fail selector (-want +got):\n%s", diff)
	}
	if !strings.Contains(fail.Spec.Next.StatusTemplate, "phase: Failed") || !strings.Contains(fail.Spec.Next.StatusTemplate, "exitCode: 1") {
		t.Errorf("fail template:\n%s", fail.Spec.Next.StatusTemplate)
	}

	// a stock stage missing from the module is an error, not a silent gap
	if _, err := kwokConfig(testStages(t, false)[:3], o); err == nil {
		t.Error("no error without pod-complete")
	}
}

// renderKwokTemplate renders a status template as kwok v0.8.0's gotpl does: the
// object through JSON (numbers as json.Number), TrimSpace'd text, the functions the
// templates use, then YAML to a PodStatus.
func renderKwokTemplate(t *testing.T, text string, pod *corev1.Pod) corev1.PodStatus {
	t.Helper()
	funcs := template.FuncMap{
		"Now": func() string { return "2026-11-21T10:00:05Z" },
		"Quote": func(s any) string {
			b, err := json.Marshal(s)
			if err != nil || len(b) == 0 {
				return `""`
			}
			if b[0] == '"' {
				return string(b)
			}
			return strconv.Quote(string(b))
		},
	}
	tpl, err := template.New("_").Funcs(funcs).Parse(strings.TrimSpace(text))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(pod)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var data any
	if err := dec.Decode(&data); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := tpl.Execute(&out, data); err != nil {
		t.Fatal(err)
	}
	var st corev1.PodStatus
	if err := yaml.UnmarshalStrict(out.Bytes(), &st); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	return st
}

func TestPodEndTemplates(t *testing.T) {
	o, _ := KwokOptions{FailNodes: []string{"kwok-node-2"}}.resolve()
	templates := map[string]string{}
	for _, s := range nodeexecStages(o) {
		spec := s["spec"].(map[string]any)
		templates[s["metadata"].(map[string]any)["name"].(string)] = spec["next"].(map[string]any)["statusTemplate"].(string)
	}
	started := metav1.NewTime(time.Date(2026, 11, 21, 10, 0, 1, 0, time.UTC))
	pod := &corev1.Pod{
		Spec: corev1.PodSpec{NodeName: "kwok-node-1", Containers: []corev1.Container{
			{Name: "main", Image: "busybox:stable"}, {Name: "side", Image: "tools:1"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "side", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}},
			{Name: "main", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}},
		}},
	}
	for _, tc := range []struct {
		stage    string
		pod      *corev1.Pod
		phase    corev1.PodPhase
		exit     int32
		reason   string
		startedV string
	}{
		{"nodeexec-pod-complete", pod, corev1.PodSucceeded, 0, "Completed", "2026-11-21T10:00:01Z"},
		{"nodeexec-pod-fail", pod, corev1.PodFailed, 1, "Error", "2026-11-21T10:00:01Z"},
		// no container status yet: startedAt falls back to now
		{"nodeexec-pod-complete", &corev1.Pod{Spec: pod.Spec}, corev1.PodSucceeded, 0, "Completed", "2026-11-21T10:00:05Z"},
	} {
		st := renderKwokTemplate(t, templates[tc.stage], tc.pod)
		if st.Phase != tc.phase {
			t.Errorf("%s: phase %s, want %s", tc.stage, st.Phase, tc.phase)
		}
		if len(st.ContainerStatuses) != 2 {
			t.Fatalf("%s: container statuses %+v", tc.stage, st.ContainerStatuses)
		}
		for i, cs := range st.ContainerStatuses {
			term := cs.State.Terminated
			if cs.Name != pod.Spec.Containers[i].Name || cs.Image != pod.Spec.Containers[i].Image || cs.Ready || term == nil ||
				term.ExitCode != tc.exit || term.Reason != tc.reason ||
				term.StartedAt.UTC().Format(time.RFC3339) != tc.startedV || term.FinishedAt.UTC().Format(time.RFC3339) != "2026-11-21T10:00:05Z" {
				t.Errorf("%s: container status %+v (terminated %+v)", tc.stage, cs, term)
			}
		}
		for _, c := range st.Conditions {
			if (c.Type == corev1.PodReady || c.Type == corev1.ContainersReady) && c.Status != corev1.ConditionFalse {
				t.Errorf("%s: condition %+v", tc.stage, c)
			}
		}
		if len(st.Conditions) != 2 {
			t.Errorf("%s: conditions %+v", tc.stage, st.Conditions)
		}
	}
}

func TestKwokNode(t *testing.T) {
	n := kwokNode("kwok-node-7", map[string]string{"zone": "a", "type": "ignored"})
	wantLabels := map[string]string{"type": "kwok", "kubernetes.io/hostname": "kwok-node-7", "kubernetes.io/os": "linux", "zone": "a"}
	if diff := cmp.Diff(wantLabels, n.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if n.Name != "kwok-node-7" || n.Annotations["kwok.x-k8s.io/node"] != "fake" {
		t.Errorf("node %+v", n.ObjectMeta)
	}
	if diff := cmp.Diff([]corev1.Taint{{Key: "kwok.x-k8s.io/node", Value: "fake", Effect: corev1.TaintEffectNoSchedule}}, n.Spec.Taints); diff != "" {
		t.Errorf("taints (-want +got):\n%s", diff)
	}
	for _, rl := range []corev1.ResourceList{n.Status.Capacity, n.Status.Allocatable} {
		for name, want := range map[corev1.ResourceName]string{"cpu": "32", "memory": "256Gi", "pods": "110"} {
			if q := rl[name]; q.Cmp(resource.MustParse(want)) != 0 {
				t.Errorf("%s = %s, want %s", name, q.String(), want)
			}
		}
	}
	if KwokNodeName(12) != "kwok-node-12" {
		t.Error(KwokNodeName(12))
	}
}

func TestRawRatePod(t *testing.T) {
	p := rawRatePod("kwok-node-3", "abc")
	if p.Spec.NodeName != "kwok-node-3" || p.Spec.RestartPolicy != corev1.RestartPolicyNever ||
		p.Labels[KwokPodLabel] != KwokPodLabelValue || p.Labels["nodeexec.io/raw-pod-rate"] != "abc" ||
		len(p.Spec.Tolerations) != 1 || p.Spec.Tolerations[0].Operator != corev1.TolerationOpExists ||
		!slices.Equal(p.Spec.Containers[0].Command, []string{"sh", "-c", "true"}) {
		t.Errorf("pod %+v", p)
	}
}

func TestForEach(t *testing.T) {
	var sum atomic.Int64
	if err := forEach(context.Background(), 8, 1000, func(_ context.Context, i int) error {
		sum.Add(int64(i))
		return nil
	}); err != nil || sum.Load() != 999*1000/2 {
		t.Errorf("forEach: %v, sum %d", err, sum.Load())
	}
	if err := forEach(context.Background(), 4, 0, func(context.Context, int) error { return errors.New("called") }); err != nil {
		t.Errorf("n=0: %v", err)
	}
	var calls atomic.Int64
	boom := errors.New("boom")
	err := forEach(context.Background(), 4, 10000, func(_ context.Context, i int) error {
		calls.Add(1)
		if i == 10 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || calls.Load() == 10000 {
		t.Errorf("first error: %v after %d calls", err, calls.Load())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := forEach(ctx, 4, 10, func(context.Context, int) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled ctx: %v", err)
	}
}

func TestKwokWatchPatch(t *testing.T) {
	// the patch is a one-line change of the condition
	if strings.Count(kwokWatchPatch.old, "\n") != 2 || !strings.Contains(kwokWatchPatch.new, `opts.ResourceVersion == ""`) ||
		strings.TrimPrefix(kwokWatchPatch.old, "\tif !o.EnableListPager || o.EnableStreamWatch {") !=
			strings.TrimPrefix(kwokWatchPatch.new, "\tif (!o.EnableListPager || o.EnableStreamWatch) && opts.ResourceVersion == \"\" {") {
		t.Errorf("patch %+v", kwokWatchPatch)
	}
}

func TestWaitNodesReady(t *testing.T) {
	node := func(name string, ready corev1.ConditionStatus) *corev1.Node {
		n := kwokNode(name, nil)
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}
		return n
	}
	cs := fake.NewClientset(node("kwok-node-1", corev1.ConditionTrue), node("kwok-node-2", corev1.ConditionUnknown),
		node("other", corev1.ConditionFalse))
	watching := make(chan struct{}, 10)
	cs.PrependWatchReactor("nodes", func(k8stesting.Action) (bool, watch.Interface, error) {
		watching <- struct{}{}
		return false, nil, nil
	})
	o, _ := Options{}.resolve()
	k := &Kwok{c: &Cluster{r: newRunner(o)}, cs: cs}
	done := make(chan error, 1)
	go func() {
		done <- k.waitNodesReady(context.Background(), []string{"kwok-node-1", "kwok-node-2"}, 10*time.Second)
	}()
	<-watching
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("returned before kwok-node-2 was Ready: %v", err)
	default:
	}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(context.Background(), node("kwok-node-2", corev1.ConditionTrue), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// a node that never gets Ready: the timeout says how many are
	err := k.waitNodesReady(context.Background(), []string{"kwok-node-1", "kwok-node-3"}, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "(1 are)") {
		t.Errorf("timeout error %v", err)
	}
}

func TestWaitPodsEnded(t *testing.T) {
	pod := func(name string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"run": "x"}},
			Status: corev1.PodStatus{Phase: phase}}
	}
	cs := fake.NewClientset(pod("a", corev1.PodSucceeded), pod("b", corev1.PodRunning))
	pods := cs.CoreV1().Pods("ns")
	synced := make(chan struct{})
	var marked atomic.Bool
	done := make(chan error, 1)
	go func() {
		done <- waitPodsEnded(context.Background(), pods, "run=x", 3, synced, func() { marked.Store(true) })
	}()
	<-synced
	time.Sleep(50 * time.Millisecond)
	if _, err := pods.Create(context.Background(), pod("c", corev1.PodFailed), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.UpdateStatus(context.Background(), pod("b", corev1.PodSucceeded), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil || !marked.Load() {
			t.Fatalf("waitPodsEnded: %v, marked %v", err, marked.Load())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waitPodsEnded did not return")
	}
	// the fake clientset's DeleteCollection deletes nothing: do it as the API server
	cs.PrependReactor("delete-collection", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sel := a.(k8stesting.DeleteCollectionAction).GetListRestrictions().Labels
		// (the tracker, not the clientset: reactors run under the fake's lock)
		obj, err := cs.Tracker().List(corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithKind("Pod"), "ns")
		if err != nil {
			return true, nil, err
		}
		for _, p := range obj.(*corev1.PodList).Items {
			if sel.Matches(labels.Set(p.Labels)) {
				if err := cs.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "ns", p.Name); err != nil {
					return true, nil, err
				}
			}
		}
		return true, nil, nil
	})
	if _, err := pods.Create(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "ns"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := deletePodsAndWait(context.Background(), pods, "run=x"); err != nil {
		t.Fatal(err)
	}
	if l, _ := pods.List(context.Background(), metav1.ListOptions{}); len(l.Items) != 1 || l.Items[0].Name != "other" {
		t.Errorf("pods after deletePodsAndWait: %+v", l.Items)
	}
}

func TestDeleteAll(t *testing.T) {
	for _, collectionFails := range []bool{false, true} {
		objs := map[string]bool{}
		for i := range 100 {
			objs[strconv.Itoa(i)] = true
		}
		var mu sync.Mutex
		var logged []string
		err := deleteAll(context.Background(), func(f string, a ...any) { logged = append(logged, f) }, "things",
			func(context.Context) error {
				mu.Lock()
				defer mu.Unlock()
				n := 0
				for k := range objs { // the API server gives up part way
					if n++; n > 30 && collectionFails {
						return errors.New("stream error: INTERNAL_ERROR")
					}
					delete(objs, k)
				}
				return nil
			},
			func(context.Context) ([]string, error) {
				mu.Lock()
				defer mu.Unlock()
				var left []string
				for k := range objs {
					left = append(left, k)
				}
				return left, nil
			},
			func(_ context.Context, name string) error {
				mu.Lock()
				defer mu.Unlock()
				delete(objs, name)
				return nil
			})
		if err != nil || len(objs) != 0 || (len(logged) == 1) != collectionFails {
			t.Errorf("collection fails %v: %v, %d left, logged %v", collectionFails, err, len(objs), logged)
		}
	}
	// objects that do not go away: an error, not an endless loop
	err := deleteAll(context.Background(), func(string, ...any) {}, "things", func(context.Context) error { return nil },
		func(context.Context) ([]string, error) { return []string{"stuck"}, nil },
		func(context.Context, string) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "1 left") {
		t.Errorf("stuck object: %v", err)
	}
}
