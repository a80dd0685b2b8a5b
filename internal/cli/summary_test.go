package cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeexec/nodeexec/nodeexec"
)

func TestCompactNodes(t *testing.T) {
	seq := func(prefix string, from, to int) []string {
		var out []string
		for i := from; i <= to; i++ {
			out = append(out, fmt.Sprintf("%s%d", prefix, i))
		}
		return out
	}
	tests := []struct {
		name  string
		names []string
		max   int
		want  string
	}{
		{"plain names", []string{"b", "a", "c"}, 10, "a,b,c"},
		{"one numbered", []string{"kwok-node-7"}, 10, "kwok-node-7"},
		{"a range, in any order", append(seq("kwok-node-", 100, 4998), seq("kwok-node-", 1, 99)...), 10, "kwok-node-[1-4998]"},
		{"ranges and singles", []string{"n-1", "n-2", "n-3", "n-7", "n-9", "n-10"}, 10, "n-[1-3,7,9-10]"},
		{"zero-padded keeps its width", []string{"node-007", "node-008", "node-010"}, 10, "node-[007-008,010]"},
		{"suffix", []string{"gpu-2-a", "gpu-1-a"}, 10, "gpu-[1-2]-a"},
		{"mixed", []string{"worker", "kwok-node-2", "kwok-node-1", "control-plane"}, 10, "control-plane,kwok-node-[1-2],worker"},
		{"many ranges cut", []string{"n1", "n3", "n5", "n7", "n9"}, 2, "n[1,3,...] (5 nodes)"},
		{"many items cut", []string{"a", "b", "c", "d", "e"}, 3, "a,b,c and 2 more nodes"},
		{"one more", []string{"a", "b"}, 1, "a and 1 more node"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := compactNodes(tt.names, tt.max); got != tt.want {
				t.Errorf("compactNodes = %q, want %q", got, tt.want)
			}
		})
	}
}

// scaleResults is a run on n nodes kwok-node-1..n where the nodes in fail
// exit with 3 and print "bad", the nodes in none failed without an exit
// code, and the others print "ok".
func scaleResults(n int, fail, none map[int]bool) []nodeexec.NodeResult {
	out := make([]nodeexec.NodeResult, n)
	for i := range n {
		name := fmt.Sprintf("kwok-node-%d", i+1)
		switch {
		case fail[i+1]:
			out[i] = res(name, 3, "bad\n")
		case none[i+1]:
			out[i] = nodeexec.NodeResult{Result: nodeexec.Result{Node: name, ExitCode: -1}, Attempts: 1,
				Err: fmt.Errorf("node %q: %w", name, nodeexec.ErrTimeout)}
		default:
			out[i] = res(name, 0, "ok\n")
		}
	}
	return out
}

// TestRunSummaryAtScale: 5,000 nodes, two failing: the summary is a few
// lines, the failures first, then the counts per exit code, then the groups
// with compact node lists.
func TestRunSummaryAtScale(t *testing.T) {
	var b bytes.Buffer
	printRunSummary(&b, scaleResults(5000, map[int]bool{17: true, 4242: true}, nil))
	got := b.String()
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) > 12 {
		t.Errorf("%d lines, want a short summary:\n%s", len(lines), got)
	}
	for i, want := range []string{
		"FAILED: 2 of 5000 nodes",
		"NODE",
		"kwok-node-17 ",
		"kwok-node-4242 ",
	} {
		if !strings.HasPrefix(lines[i], want) {
			t.Errorf("line %d = %q, want it to start with %q; summary:\n%s", i, lines[i], want, got)
		}
	}
	for _, want := range []string{
		"EXIT CODES: 0 on 4998 nodes, 3 on 2 nodes\n",
		"kwok-node-[1-16,18-4241,4243-5000]",
		"2 of 5000 nodes     3",
		"kwok-node-[17,4242]\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
}

// TestRunSummaryManyFailures: more failures than summaryRows are grouped
// by error, with the node's name replaced; distinct outputs beyond
// summaryGroups are counted.
func TestRunSummaryManyFailures(t *testing.T) {
	fail, none := map[int]bool{}, map[int]bool{}
	for i := 1; i <= 300; i++ {
		fail[i] = true
	}
	for i := 301; i <= 350; i++ {
		none[i] = true
	}
	results := scaleResults(5000, fail, none)
	// Every other node prints something of its own (echo $NODE).
	for i := 1000; i < 5000; i++ {
		out := results[i].Node + "\n"
		results[i].Stdout = nodeexec.Output{Tail: []byte(out), Bytes: int64(len(out)), SHA256: fmt.Sprintf("%064x", i)}
	}
	var b bytes.Buffer
	printRunSummary(&b, results)
	got := b.String()
	if n := strings.Count(got, "\n"); n > 40 {
		t.Errorf("%d lines, want at most 40:\n%s", n, got)
	}
	for _, want := range []string{
		"FAILED: 350 of 5000 nodes, by error",
		"300    3     command on node \"NODE\" exited with code 3",
		"kwok-node-[1-300]",
		"50     -     node \"NODE\": ",
		"kwok-node-[301-350]",
		"EXIT CODES: 0 on 4650 nodes, 3 on 300 nodes, none on 50 nodes",
		"3984 of 5000 nodes        3984 more distinct outputs            kwok-node-[1017-5000]", // 19 shown of 4003 groups: the rest counted
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
}

// TestRunSummarySmallRunUnchanged: up to summaryRows nodes, one line per
// node in target order, as before.
func TestRunSummarySmallRunUnchanged(t *testing.T) {
	results := []nodeexec.NodeResult{res("b", 0, "x\n"), res("a", 1, "y\n")}
	var b, want bytes.Buffer
	printRunSummary(&b, results)
	printSummary(&want, results)
	printGroups(&want, results)
	if b.String() != want.String() {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want.String())
	}
}

func TestWarnNoZone(t *testing.T) {
	n := func(name, zone string) *corev1.Node {
		l := map[string]string{}
		if zone != "" {
			l[nodeexec.ZoneLabel] = zone
		}
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
	}
	tests := []struct {
		name    string
		perZone int
		nodes   []*corev1.Node
		want    string
	}{
		{"no limit", 0, []*corev1.Node{n("a", "")}, ""},
		{"all labelled", 2, []*corev1.Node{n("a", "z1"), n("b", "z2")}, ""},
		{"some missing", 2, []*corev1.Node{n("a", "z1"), n("b", ""), n("c", "")}, "warning: --max-per-zone 2: 2 of 3 target nodes have no label topology.kubernetes.io/zone; they count as one zone of their own (at most 2 of them at once)\n"},
		{"none labelled", 3, []*corev1.Node{n("a", ""), n("b", "")}, "warning: --max-per-zone 3: none of the 2 target nodes has the label topology.kubernetes.io/zone; they count as one zone, so at most 3 run at once\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			warnNoZone(&b, tt.perZone, tt.nodes)
			if b.String() != tt.want {
				t.Errorf("got %q, want %q", b.String(), tt.want)
			}
		})
	}
}

func TestScaleFlagErrors(t *testing.T) {
	tests := map[string]struct {
		args []string
		want string
	}{
		"max-per-zone 0":          {[]string{"--max-per-zone", "0"}, "--max-per-zone 0: give a positive number of nodes per zone (leave the flag out for no zone limit)"},
		"max-per-zone negative":   {[]string{"--max-per-zone", "-3"}, "--max-per-zone -3: give a positive number"},
		"max-per-zone word":       {[]string{"--max-per-zone", "few"}, `--max-per-zone "few"`},
		"summary-only with json":  {[]string{"--summary-only", "-o", "json"}, "--summary-only is for -o text; -o json"},
		"summary-only and ndjson": {[]string{"-o", "ndjson", "--summary-only"}, "--summary-only is for -o text; -o ndjson"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			args := append([]string{"nodeexec", "--kubeconfig", unreachableKubeconfig(t), "run", "--all"}, tc.args...)
			args = append(args, "--", "true")
			code := Run(t.Context(), Streams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, args)
			if code != 2 || !strings.Contains(errOut.String(), tc.want) || out.Len() != 0 {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2, nothing and %q", code, out.String(), errOut.String(), tc.want)
			}
		})
	}
}

// TestRunSummaryErrorsNamePods: an error that names each node's pod (whose
// name holds the node's) is one group, with POD for the pod's name.
func TestRunSummaryErrorsNamePods(t *testing.T) {
	results := scaleResults(100, nil, nil)
	for i := range 30 {
		r := &results[i]
		r.Pod = "nodeexec-" + r.Node + fmt.Sprintf("-x%03d", i)
		r.ExitCode = -1
		r.Err = fmt.Errorf("exec in pod default/%s on node %q: outcome unknown: pod default/%s no longer holds the command's output", r.Pod, r.Node, r.Pod)
	}
	var b bytes.Buffer
	printRunSummary(&b, results)
	got := b.String()
	want := `30     -     exec in pod default/POD on node "NODE": outcome unknown: pod default/POD no longer holds the command's output  kwok-node-[1-30]`
	if !strings.Contains(got, want) {
		t.Errorf("summary lacks %q:\n%s", want, got)
	}
}
