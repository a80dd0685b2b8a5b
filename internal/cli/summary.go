package cli

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	ucli "github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// The text summary's limits, so that it stays readable at 5,000 nodes.
const (
	// summaryRows is the most nodes listed one per line: a run of at
	// most this many nodes lists every node (in target order); a larger
	// run lists only its failed nodes, up to this many, and groups the
	// rest.
	summaryRows = 20
	// summaryGroups is the most groups (of identical outputs, or of
	// failures with the same error) listed; the rest are counted.
	summaryGroups = 20
	// summaryNodeItems is the most items (names or numbered ranges such as
	// node-[1-4998]) a group's node list shows before "and N more".
	summaryNodeItems = 10
)

// printRunSummary writes -o text's summary after a run (on stderr). Up to
// summaryRows nodes: one line per node, in target order, then the groups of
// identical outputs. More nodes: the failures first (one line each, or
// grouped by error when there are more than summaryRows), a count of nodes
// per exit code, then the groups of identical outputs with compact node
// lists (kwok-node-[1-4998]), at most summaryGroups of them.
func printRunSummary(w io.Writer, results []nodeexec.NodeResult) {
	if len(results) <= summaryRows {
		printSummary(w, results)
		printGroups(w, results)
		return
	}
	failed := nodeexec.Failed(results)
	var ran []nodeexec.NodeResult // failed nodes that ran (not skipped)
	skipped := 0
	for _, r := range failed {
		if errors.Is(r.Err, nodeexec.ErrSkipped) {
			skipped++
			continue
		}
		ran = append(ran, r)
	}
	switch {
	case len(ran) == 0:
	case len(ran) <= summaryRows:
		fmt.Fprintf(w, "FAILED: %d of %d nodes\n", len(ran), len(results))
		printSummary(w, ran)
		fmt.Fprintln(w)
	default:
		fmt.Fprintf(w, "FAILED: %d of %d nodes, by error (NODE and POD stand for each node's name and its pod's)\n", len(ran), len(results))
		printErrorGroups(w, ran)
		fmt.Fprintln(w)
	}
	if skipped > 0 {
		fmt.Fprintf(w, "SKIPPED: %d of %d nodes: %s\n", skipped, len(results), skipReason(failed))
	}
	fmt.Fprintf(w, "EXIT CODES: %s\n", exitCounts(results))
	printGroups(w, results)
}

// printErrorGroups lists failures grouped by their error (genericError),
// largest group first.
func printErrorGroups(w io.Writer, failed []nodeexec.NodeResult) {
	type group struct {
		msg   string
		exit  int
		nodes []string
	}
	byKey := map[string]*group{}
	var order []*group
	for _, r := range failed {
		msg := genericError(r)
		k := strconv.Itoa(r.ExitCode) + "\x00" + msg
		g := byKey[k]
		if g == nil {
			g = &group{msg: msg, exit: r.ExitCode}
			byKey[k] = g
			order = append(order, g)
		}
		g.nodes = append(g.nodes, r.Node)
	}
	slices.SortStableFunc(order, func(a, b *group) int { return len(b.nodes) - len(a.nodes) })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODES\tEXIT\tERROR\tWHICH")
	for i, g := range order {
		if i == summaryGroups {
			rest := 0
			for _, g := range order[i:] {
				rest += len(g.nodes)
			}
			fmt.Fprintf(tw, "%d\t\t%d more errors\t(-o ndjson has every node's record)\n", rest, len(order)-i)
			break
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", len(g.nodes), exitText(g.exit), g.msg, compactNodes(g.nodes, summaryNodeItems))
	}
	_ = tw.Flush()
}

// genericError is r's error with the pod's name replaced by POD and then the
// node's by NODE (a pod's name holds its node's), so that one failure on
// many nodes is one group.
func genericError(r nodeexec.NodeResult) string {
	msg := r.Err.Error()
	if r.Pod != "" {
		msg = strings.ReplaceAll(msg, r.Pod, "POD")
	}
	return strings.ReplaceAll(msg, r.Node, "NODE")
}

// skipReason is the reason of the first skipped node (they share it: the
// canary, the error budget or the cancellation).
func skipReason(results []nodeexec.NodeResult) string {
	for _, r := range results {
		if errors.Is(r.Err, nodeexec.ErrSkipped) {
			return strings.ReplaceAll(r.Err.Error(), r.Node, "NODE")
		}
	}
	return ""
}

// exitCounts is "0 on 4998 nodes, 3 on 2 nodes, none on 1 node (no exit
// code: timeout, pod failure...), skipped 5", by exit code ascending.
func exitCounts(results []nodeexec.NodeResult) string {
	counts := map[int]int{}
	none, skipped := 0, 0
	for _, r := range results {
		switch {
		case errors.Is(r.Err, nodeexec.ErrSkipped):
			skipped++
		case r.ExitCode < 0:
			none++
		default:
			counts[r.ExitCode]++
		}
	}
	codes := make([]int, 0, len(counts))
	for c := range counts {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	var parts []string
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%d on %s", c, plural(counts[c], "node")))
	}
	if none > 0 {
		parts = append(parts, fmt.Sprintf("none on %s (no exit code: timeout, pod or connection failure)", plural(none, "node")))
	}
	if skipped > 0 {
		parts = append(parts, fmt.Sprintf("skipped %d", skipped))
	}
	return strings.Join(parts, ", ")
}

func exitText(code int) string {
	if code < 0 {
		return "-"
	}
	return strconv.Itoa(code)
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// compactNodes renders node names compactly: names that differ only in
// their last number become one item with the numbers as ranges,
// kwok-node-[1-3,7,9-12] (zero-padded numbers keep their width); other names
// stay as they are. Items are sorted (by prefix, then number); after
// maxItems items the rest are counted: "a,b,c and 7 more nodes".
func compactNodes(names []string, maxItems int) string {
	type key struct {
		prefix, suffix string
		width          int // digits of a zero-padded number, else 0
	}
	nums := map[key][]int{}
	var keys []key
	var plain []string
	for _, n := range names {
		p, d, s, ok := splitNumber(n)
		v, err := strconv.Atoi(d)
		if !ok || err != nil || v > 1<<40 {
			plain = append(plain, n)
			continue
		}
		k := key{prefix: p, suffix: s}
		if len(d) > 1 && d[0] == '0' {
			k.width = len(d)
		}
		if _, seen := nums[k]; !seen {
			keys = append(keys, k)
		}
		nums[k] = append(nums[k], v)
	}
	type item struct {
		sortKey string
		first   int
		text    string
		nodes   int
	}
	var items []item
	for _, n := range plain {
		items = append(items, item{sortKey: n, text: n, nodes: 1})
	}
	for _, k := range keys {
		vs := nums[k]
		slices.Sort(vs)
		vs = slices.Compact(vs)
		format := func(v int) string {
			if k.width > 0 {
				return fmt.Sprintf("%0*d", k.width, v)
			}
			return strconv.Itoa(v)
		}
		if len(vs) == 1 {
			items = append(items, item{sortKey: k.prefix, first: vs[0], text: k.prefix + format(vs[0]) + k.suffix, nodes: 1})
			continue
		}
		var ranges []string
		for i := 0; i < len(vs); {
			j := i
			for j+1 < len(vs) && vs[j+1] == vs[j]+1 {
				j++
			}
			if j == i {
				ranges = append(ranges, format(vs[i]))
			} else {
				ranges = append(ranges, format(vs[i])+"-"+format(vs[j]))
			}
			i = j + 1
		}
		// A long list of ranges is cut within its brackets.
		text := k.prefix + "[" + strings.Join(ranges, ",") + "]" + k.suffix
		if len(ranges) > maxItems {
			text = fmt.Sprintf("%s[%s,...]%s (%d nodes)", k.prefix, strings.Join(ranges[:maxItems], ","), k.suffix, len(vs))
		}
		items = append(items, item{sortKey: k.prefix, first: vs[0], text: text, nodes: len(vs)})
	}
	slices.SortStableFunc(items, func(a, b item) int {
		if c := strings.Compare(a.sortKey, b.sortKey); c != 0 {
			return c
		}
		return a.first - b.first
	})
	var texts []string
	rest := 0
	for i, it := range items {
		if i >= maxItems {
			rest += it.nodes
			continue
		}
		texts = append(texts, it.text)
	}
	out := strings.Join(texts, ",")
	if rest > 0 {
		out += fmt.Sprintf(" and %d more", rest)
		if rest == 1 {
			out += " node"
		} else {
			out += " nodes"
		}
	}
	return out
}

// splitNumber splits name around its last run of digits: "kwok-node-17" is
// "kwok-node-", "17", "".
func splitNumber(name string) (prefix, digits, suffix string, ok bool) {
	end := -1
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] >= '0' && name[i] <= '9' {
			end = i + 1
			break
		}
	}
	if end < 0 {
		return "", "", "", false
	}
	start := end
	for start > 0 && name[start-1] >= '0' && name[start-1] <= '9' {
		start--
	}
	return name[:start], name[start:end], name[end:], true
}

// checkScaleFlags checks run's --max-per-zone and --summary-only, naming the
// flag.
func checkScaleFlags(c *ucli.Context) error {
	if c.IsSet("max-per-zone") && c.Int("max-per-zone") <= 0 {
		return fmt.Errorf("--max-per-zone %d: give a positive number of nodes per zone (leave the flag out for no zone limit)", c.Int("max-per-zone"))
	}
	if c.Bool("summary-only") && c.String("output") != formatText {
		return fmt.Errorf("--summary-only is for -o text; -o %s prints no streamed output anyway (leave --summary-only out)", c.String("output"))
	}
	return nil
}

// warnNoZone says, with a zone limit, how many target nodes have no zone
// label: they count as one zone (nodeexec.NoZone).
func warnNoZone(w io.Writer, perZone int, nodes []*corev1.Node) {
	if perZone <= 0 {
		return
	}
	n := nodeexec.CountZones(nodes)[nodeexec.NoZone]
	switch {
	case n == 0:
	case n == len(nodes):
		fmt.Fprintf(w, "warning: --max-per-zone %d: none of the %s has the label %s; they count as one zone, so at most %d run at once\n", perZone, plural(n, "target node"), nodeexec.ZoneLabel, perZone)
	default:
		fmt.Fprintf(w, "warning: --max-per-zone %d: %d of %d target nodes have no label %s; they count as one zone of their own (at most %d of them at once)\n", perZone, n, len(nodes), nodeexec.ZoneLabel, perZone)
	}
}
