package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
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

// Largest values of run's --retries and --tail-bytes.
const (
	// maxRetries bounds --retries: each retry creates another pod after a
	// doubling backoff; a node that failed ten times in a row needs a
	// person, not an eleventh pod.
	maxRetries = 10
	// maxTailBytes bounds --tail-bytes (1 MiB): twice this per node is kept
	// in memory until the run ends.
	maxTailBytes = 1 << 20
)

// rolloutFlags are the rollout controls of a one-shot run and its output format.
func rolloutFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.IntFlag{Name: "canary", Usage: "run on the first `N` target nodes first; the others only if all of them succeed"},
		&ucli.StringSliceFlag{Name: "batch", Usage: "stage sizes after the canary, counts or percentages, e.g. --batch 1,5,20% (the last repeats)"},
		&ucli.StringFlag{Name: "max-errors", Usage: "error budget `N|P%`: once more nodes failed, start no more (default: no limit)"},
		&ucli.IntFlag{Name: "retries", Usage: fmt.Sprintf("retry a node `N` times (at most %d) after an infrastructure failure (image pull, kubelet rejection, eviction), with backoff", maxRetries)},
		&ucli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: formatText, Usage: "text (streamed, prefixed output and a summary), json (one array at the end) or ndjson (one record per node as it finishes)"},
		&ucli.IntFlag{Name: "tail-bytes", Value: nodeexec.DefaultTailBytes, Usage: fmt.Sprintf("bytes of each node's stdout and stderr kept for json/ndjson and the summary (at most %d, 1 MiB)", maxTailBytes)},
	}
}

// newRunner applies the rollout flags to o and builds the Runner. Flag errors
// name the flag; nothing has touched the cluster yet.
func newRunner(c *ucli.Context, streams Streams, o nodeexec.RunnerOptions) (*nodeexec.Runner, error) {
	o.Canary = c.Int("canary")
	o.Retries = c.Int("retries")
	o.TailBytes = c.Int("tail-bytes")
	for _, f := range []string{"canary", "retries", "tail-bytes"} {
		if n := c.Int(f); n < 0 {
			return nil, fmt.Errorf("--%s %d: give 0 or more", f, n)
		}
	}
	if o.Retries > maxRetries {
		return nil, fmt.Errorf("--retries %d: too large, at most %d", o.Retries, maxRetries)
	}
	if o.TailBytes > maxTailBytes {
		return nil, fmt.Errorf("--tail-bytes %d: too large, at most %d (1 MiB)", o.TailBytes, maxTailBytes)
	}
	for _, s := range splitCSV(c.StringSlice("batch")) {
		v, err := parseCountOrPercentFlag("batch", s, false)
		if err != nil {
			return nil, err
		}
		o.Batches = append(o.Batches, v)
	}
	if s := c.String("max-errors"); s != "" || c.IsSet("max-errors") {
		v, err := parseCountOrPercentFlag("max-errors", s, true)
		if err != nil {
			return nil, err
		}
		o.MaxErrors = &v
	}
	switch c.String("output") {
	case formatText, formatJSON:
	case formatNDJSON:
		var mu sync.Mutex
		enc := json.NewEncoder(streams.Out)
		o.OnResult = func(r nodeexec.NodeResult) {
			mu.Lock()
			defer mu.Unlock()
			_ = enc.Encode(record(r))
		}
	default:
		return nil, fmt.Errorf("--output %q: want text, json or ndjson", c.String("output"))
	}
	r, err := nodeexec.NewRunner(o)
	if err != nil {
		return nil, fmt.Errorf("%w (check --canary, --batch, --max-errors, --retries, --tail-bytes)", err)
	}
	return r, nil
}

// outputRequest: with -o json or ndjson the command's output goes only into
// the records, not onto stdout.
func outputRequest(c *ucli.Context, req nodeexec.Request) nodeexec.Request {
	if c.String("output") != formatText {
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
		printSummary(streams.ErrOut, results)
		printGroups(streams.ErrOut, results)
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
// largest group first, so the odd node stands out. Only for several nodes
// that ran.
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
	for _, k := range order {
		g := groups[k]
		var names []string
		for _, r := range g {
			names = append(names, r.Node)
		}
		fmt.Fprintf(tw, "%d of %d nodes\t%d\t%s\t%s\n", len(g), ran, k.code, describe(g[0].Stdout), strings.Join(names, ","))
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
