//go:build e2e

package e2e

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
)

// record is one node of `run -o json|ndjson`.
type record struct {
	Node     string `json:"node"`
	ExitCode int    `json:"exitCode"`
	Error    string `json:"error"`
	Skipped  bool   `json:"skipped"`
	Attempts int    `json:"attempts"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	// StdoutSHA256 is the digest of the whole stdout.
	StdoutSHA256 string `json:"stdoutSha256"`
	Backend      string `json:"backend"`
	Pod          string `json:"pod"`
}

// TestRunCanaryHaltsOnFailure: a failing canary stops the run; the other
// node is not run, and says why.
func TestRunCanaryHaltsOnFailure(t *testing.T) {
	ctx := t.Context()
	stdout, stderr, code := cli(ctx, "", "run", "--all", "--canary", "1", "-o", "json", "--", "sh", "-c", "echo canary; exit 5")
	if code != 1 {
		t.Errorf("exit %d, want 1; stderr:\n%s", code, stderr)
	}
	var recs []record
	if err := json.Unmarshal([]byte(stdout), &recs); err != nil {
		t.Fatalf("-o json is not a JSON array: %v\n%s", err, stdout)
	}
	if len(recs) != len(env.nodes) {
		t.Fatalf("%d records for %d nodes", len(recs), len(env.nodes))
	}
	first, rest := recs[0], recs[1:]
	if first.ExitCode != 5 || first.Stdout != "canary\n" || first.Attempts != 1 || first.Backend != "nsenter" || first.Pod == "" {
		t.Errorf("canary record = %+v", first)
	}
	for _, r := range rest {
		if !r.Skipped || r.Attempts != 0 || !strings.Contains(r.Error, "canary failed") {
			t.Errorf("node after the canary: %+v, want skipped because the canary failed", r)
		}
	}
}

// TestRunJSONOneNodeDigest: -o json on one named node keeps the stdout's
// digest (the text output of one node skips hashing, json must not).
func TestRunJSONOneNodeDigest(t *testing.T) {
	stdout, stderr, code := cli(t.Context(), "", "run", "--node", env.nodes[0], "-o", "json", "--", "echo", "digest")
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	var recs []record
	if err := json.Unmarshal([]byte(stdout), &recs); err != nil || len(recs) != 1 {
		t.Fatalf("-o json: %v, %d records\n%s", err, len(recs), stdout)
	}
	sum := sha256.Sum256([]byte("digest\n"))
	if got := recs[0]; got.Stdout != "digest\n" || got.StdoutSHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("record stdout %q sha256 %q, want %q and %x", got.Stdout, got.StdoutSHA256, "digest\n", sum)
	}
}

// TestRunErrorBudget: with no failure allowed and one node at a time, the
// first failure stops the run.
func TestRunErrorBudget(t *testing.T) {
	stdout, stderr, code := cli(t.Context(), "", "run", "--all", "--max-errors", "0", "--max-concurrency", "1", "-o", "ndjson", "--", "false")
	if code != 1 {
		t.Errorf("exit %d, want 1; stderr:\n%s", code, stderr)
	}
	var ran, skipped int
	sc := bufio.NewScanner(strings.NewReader(stdout))
	for sc.Scan() {
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("-o ndjson line is not JSON: %v: %q", err, sc.Text())
		}
		if r.Skipped {
			skipped++
			if !strings.Contains(r.Error, "more than the error budget of 0") {
				t.Errorf("skipped without the budget's reason: %+v", r)
			}
		} else {
			ran++
		}
	}
	if ran != 1 || skipped != len(env.nodes)-1 {
		t.Errorf("ran %d, skipped %d; want 1 and %d\n%s", ran, skipped, len(env.nodes)-1, stdout)
	}
}

// TestRunGroupsIdenticalOutputs: the text summary groups nodes with the same
// output, and a node with a different output stands alone.
func TestRunGroupsIdenticalOutputs(t *testing.T) {
	ctx := t.Context()
	_, stderr, code := cli(ctx, "", "run", "--all", "--", "echo", "same everywhere")
	if code != 0 || !strings.Contains(stderr, "IDENTICAL OUTPUTS") || !strings.Contains(stderr, "2 of 2 nodes") {
		t.Errorf("exit %d; want one group of 2 nodes; stderr:\n%s", code, stderr)
	}
	// Each test node has its own network namespace, so its node IP differs.
	_, stderr, code = cli(ctx, "", "run", "--all", "--", "sh", "-c", "ip -4 -o addr show | grep -v ' lo ' | awk '{print $4}'")
	if code != 0 || strings.Count(stderr, "1 of 2 nodes") != 2 {
		t.Errorf("exit %d; want two groups of one node; stderr:\n%s", code, stderr)
	}
}
