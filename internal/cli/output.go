package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeexec/nodeexec/nodeexec"
)

// Output formats of `run` (-o).
const (
	formatText   = "text"
	formatJSON   = "json"
	formatNDJSON = "ndjson"
)

// outputRequest: with -o json or ndjson, or --summary-only, the command's
// output goes only into the records (their tails), not onto stdout.
func outputRequest(c *ucli.Context, req nodeexec.Request) nodeexec.Request {
	if c.String("output") != formatText || c.Bool("summary-only") {
		req.Stdout, req.Stderr = nil, nil
	}
	return req
}

// printResults prints what -o asks for after the run: the text summary on
// stderr (with identical outputs grouped), or the JSON array on stdout.
func printResults(c *ucli.Context, streams Streams, results []nodeexec.NodeResult) {
	switch c.String("output") {
	case formatJSON:
		recs := make([]nodeRecord, len(results))
		for i, r := range results {
			recs[i] = record(r)
		}
		enc := json.NewEncoder(streams.Out)
		enc.SetIndent("", "  ")
		_ = enc.Encode(recs)
	case formatNDJSON:
		// Streamed by OnResult.
	default:
		printRunSummary(streams.ErrOut, results)
	}
}

// nodeRecord is one node in -o json / ndjson.
type nodeRecord struct {
	Node            string    `json:"node"`
	ExitCode        int       `json:"exitCode"`
	Error           string    `json:"error,omitempty"`
	Skipped         bool      `json:"skipped,omitempty"`
	Attempts        int       `json:"attempts"`
	DurationSeconds float64   `json:"durationSeconds"`
	Started         time.Time `json:"started"`
	Finished        time.Time `json:"finished"`
	Backend         string    `json:"backend"`
	Namespace       string    `json:"namespace,omitempty"`
	Pod             string    `json:"pod,omitempty"`
	Stdout          string    `json:"stdout"`
	StdoutBytes     int64     `json:"stdoutBytes"`
	StdoutSHA256    string    `json:"stdoutSha256,omitempty"`
	Stderr          string    `json:"stderr"`
	StderrBytes     int64     `json:"stderrBytes"`
	StderrSHA256    string    `json:"stderrSha256,omitempty"`
}

func record(r nodeexec.NodeResult) nodeRecord {
	rec := nodeRecord{
		Node: r.Node, ExitCode: r.ExitCode, Attempts: r.Attempts,
		DurationSeconds: r.Duration().Seconds(), Started: r.Started, Finished: r.Finished,
		Backend: r.Backend, Namespace: r.Namespace, Pod: r.Pod,
		Stdout: string(r.Stdout.Tail), StdoutBytes: r.Stdout.Bytes, StdoutSHA256: r.Stdout.SHA256,
		Stderr: string(r.Stderr.Tail), StderrBytes: r.Stderr.Bytes, StderrSHA256: r.Stderr.SHA256,
	}
	if r.Err != nil {
		rec.Error = r.Err.Error()
		rec.Skipped = errors.Is(r.Err, nodeexec.ErrSkipped)
	}
	return rec
}

// printGroups lists nodes whose exit code, stdout and stderr are identical,
// largest group first, so the odd node stands out, each group's nodes as a
// compact list (compactNodes); at most summaryGroups groups, the rest
// counted. Only for several nodes that ran.
func printGroups(w io.Writer, results []nodeexec.NodeResult) {
	type key struct {
		code     int
		out, err string
	}
	groups := map[key][]nodeexec.NodeResult{}
	var order []key
	for _, r := range results {
		if r.Attempts == 0 { // skipped, or refused before it ran
			continue
		}
		k := key{r.ExitCode, r.Stdout.SHA256, r.Stderr.SHA256}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	ran := 0
	for _, g := range groups {
		ran += len(g)
	}
	if ran < 2 {
		return
	}
	slices.SortStableFunc(order, func(a, b key) int { return len(groups[b]) - len(groups[a]) })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\nIDENTICAL OUTPUTS\tEXIT\tSTDOUT\tNODES\n")
	for i, k := range order {
		if i == summaryGroups-1 && len(order) > summaryGroups {
			var rest []string
			for _, k := range order[i:] {
				for _, r := range groups[k] {
					rest = append(rest, r.Node)
				}
			}
			fmt.Fprintf(tw, "%d of %d nodes\t\t%d more distinct outputs\t%s\n", len(rest), ran, len(order)-i, compactNodes(rest, summaryNodeItems))
			break
		}
		g := groups[k]
		names := make([]string, len(g))
		for j, r := range g {
			names[j] = r.Node
		}
		fmt.Fprintf(tw, "%d of %d nodes\t%d\t%s\t%s\n", len(g), ran, k.code, describe(g[0].Stdout), compactNodes(names, summaryNodeItems))
	}
	_ = tw.Flush()
}

// describe is a short description of an output: size, digest prefix (when
// hashed) and last line.
func describe(o nodeexec.Output) string {
	if o.Bytes == 0 {
		return "(empty)"
	}
	lines := strings.Split(strings.TrimRight(string(o.Tail), "\n"), "\n")
	last := lines[len(lines)-1]
	if len(last) > 40 {
		last = last[:37] + "..."
	}
	if o.SHA256 == "" { // RunnerOptions.SkipDigest
		return fmt.Sprintf("%dB %q", o.Bytes, last)
	}
	return fmt.Sprintf("%dB sha256:%s %q", o.Bytes, o.SHA256[:8], last)
}
