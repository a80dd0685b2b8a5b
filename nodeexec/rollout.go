package nodeexec

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeexec/nodeexec/internal/rollout"
)

// DefaultTailBytes is how much of the end of each stream a NodeResult keeps
// when RunnerOptions.TailBytes is zero.
const DefaultTailBytes = 4 << 10

// DefaultRetryBackoff is the first pause before retrying a node after an
// infrastructure failure; it doubles with each retry, with up to 50% jitter.
const DefaultRetryBackoff = time.Second

// ErrSkipped marks a node that was not run because the run stopped first: a
// canary failed, or failures exceeded the error budget (MaxErrors).
var ErrSkipped = errors.New("not run")

// Output summarises one stream of one node.
type Output struct {
	// Tail is the last TailBytes bytes of the stream.
	Tail []byte
	// Bytes is the stream's whole length.
	Bytes int64
	// SHA256 is the hex digest of the whole stream: equal digests, equal
	// output. Empty when RunnerOptions.SkipDigest is set.
	SHA256 string
}

// recorder keeps a stream's length, digest (h, nil when not asked for) and
// tail.
type recorder struct {
	max  int
	n    int64
	h    hash.Hash
	tail []byte
}

func newRecorder(max int, digest bool) *recorder {
	r := &recorder{max: max}
	if digest {
		r.h = sha256.New()
	}
	return r
}

// Write hashes p (when a digest is asked for) and keeps the stream's last max bytes in a buffer of at
// most 2*max bytes: each byte is copied into it at most twice, whatever the
// sizes of the writes.
func (r *recorder) Write(p []byte) (int, error) {
	r.n += int64(len(p))
	if r.h != nil {
		r.h.Write(p)
	}
	switch {
	case r.max <= 0:
	case len(p) >= r.max:
		r.tail = append(r.tail[:0], p[len(p)-r.max:]...)
	default:
		if len(r.tail)+len(p) > 2*r.max {
			// Keep what the tail still needs before p (copy handles the overlap).
			r.tail = append(r.tail[:0], r.tail[len(r.tail)-(r.max-len(p)):]...)
		}
		r.tail = append(r.tail, p...)
	}
	return len(p), nil
}

func (r *recorder) output() Output {
	tail := r.tail[max(0, len(r.tail)-r.max):]
	o := Output{Tail: append([]byte(nil), tail...), Bytes: r.n}
	if r.h != nil {
		o.SHA256 = hex.EncodeToString(r.h.Sum(nil))
	}
	return o
}

// tee writes to w (when non-nil) and to the recorder.
func tee(w io.Writer, r *recorder) io.Writer {
	if w == nil {
		return r
	}
	return io.MultiWriter(w, r)
}

// validateRollout checks the rollout fields of o, naming the field.
func validateRollout(o RunnerOptions) error {
	if o.Canary < 0 {
		return fmt.Errorf("Canary %d is negative: give the number of canary nodes, or 0 for none", o.Canary)
	}
	for i, b := range o.Batches {
		if err := checkCountOrPercent(b, false); err != nil {
			return fmt.Errorf("Batches[%d] %q: %w", i, b.String(), err)
		}
	}
	if o.MaxErrors != nil {
		if err := checkCountOrPercent(*o.MaxErrors, true); err != nil {
			return fmt.Errorf("MaxErrors %q: %w", o.MaxErrors.String(), err)
		}
	}
	if o.Retries < 0 {
		return fmt.Errorf("Retries %d is negative: give 0 for no retries", o.Retries)
	}
	if o.RetryBackoff < 0 {
		return fmt.Errorf("RetryBackoff %s is negative", o.RetryBackoff)
	}
	if o.TailBytes < 0 {
		return fmt.Errorf("TailBytes %d is negative: give 0 for the default %d", o.TailBytes, DefaultTailBytes)
	}
	return nil
}

// checkCountOrPercent accepts a count (>= 1, or >= 0 when zeroOK) or a
// percentage from 1% (0% when zeroOK) to 100%.
func checkCountOrPercent(v intstr.IntOrString, zeroOK bool) error {
	lo := 1
	if zeroOK {
		lo = 0
	}
	if v.Type == intstr.Int {
		if int(v.IntVal) < lo {
			return fmt.Errorf("want a number >= %d or a percentage such as 20%%", lo)
		}
		return nil
	}
	p, err := intstr.GetScaledValueFromIntOrPercent(&v, 100, false)
	if err != nil {
		return fmt.Errorf("want a number or a percentage such as 20%%: %w", err)
	}
	if p < lo || p > 100 {
		return fmt.Errorf("want a percentage from %d%% to 100%%", lo)
	}
	return nil
}

// ParseCountOrPercent reads "5" or "20%" as command lines give them: a
// decimal count that fits an int32, or a decimal percentage followed by %.
// The error says which it is not (or that the count is too large); ranges
// (at least 1, at most 100%) are CheckCountOrPercent's.
func ParseCountOrPercent(s string) (intstr.IntOrString, error) {
	if p, ok := strings.CutSuffix(s, "%"); ok {
		if _, err := strconv.ParseInt(p, 10, 32); err != nil {
			return intstr.IntOrString{}, fmt.Errorf("%q is not a percentage such as 20%%", s)
		}
		return intstr.FromString(s), nil
	}
	n, err := strconv.ParseInt(s, 10, 32)
	if errors.Is(err, strconv.ErrRange) {
		return intstr.IntOrString{}, fmt.Errorf("%q is too large: give a count up to %d, or a percentage such as 20%%", s, math.MaxInt32)
	}
	if err != nil {
		return intstr.IntOrString{}, fmt.Errorf("%q is neither a number nor a percentage such as 20%%", s)
	}
	return intstr.FromInt32(int32(n)), nil
}

// CheckCountOrPercent accepts a count (>= 1, or >= 0 when zeroOK) or a
// percentage from 1% (0% when zeroOK) to 100%: the rule for
// RunnerOptions.Batches (zeroOK false) and MaxErrors (zeroOK true).
func CheckCountOrPercent(v intstr.IntOrString, zeroOK bool) error {
	return checkCountOrPercent(v, zeroOK)
}

// The Runner's rollout (RunnerOptions Canary, Batches, MaxErrors, Retries)
// and the watcher's (a NodeScript's spec.rollout, package watcher's
// Decide) share their arithmetic (internal/rollout: batch sizes, counts or
// percentages rounded up, at least 1, the last repeating; the error
// budget, rounded down) and their stage rule (a stage starts once the one
// before has finished). They differ, on purpose, where a one-shot run and
// a standing rollout need different things (TestRunnerEngineDifferences
// and the watcher's TestWatcherEngineDifferences pin each):
//   - canary: 0 by default here (a run someone watches), 1 in the watcher;
//   - error budget: none by default here (MaxErrors nil), 0 in the
//     watcher (the first failure halts);
//   - order: the targets' own here; in the watcher a hash of node,
//     NodeScript and spec, and its canaries skip nodes its checkScript
//     found fine;
//   - after the canaries: the rest starts at once here; the watcher waits
//     for soakTime, verifyScript and analysis, or a manual promotion;
//   - a failed canary: the rest is skipped (ErrSkipped) and the run ends
//     here; the watcher halts until the spec changes;
//   - concurrency: DefaultMaxConcurrency (20) here, 1 in the watcher;
//   - retries: 0 by default here, from DefaultRetryBackoff (1s) with up to
//     50% jitter; 3 in the watcher, from 10s with 10%; both double up to 5m.

// plan splits n target nodes (by index, in target order) into stages: the
// canary (if any), then batches; the last batch size repeats until every node
// is in a stage. Percentages are of n, rounded up, at least 1.
func plan(n, canary int, batches []intstr.IntOrString) [][]int {
	var stages [][]int
	next := 0
	take := func(k int) {
		k = max(1, min(k, n-next))
		stage := make([]int, k)
		for i := range stage {
			stage[i] = next + i
		}
		stages = append(stages, stage)
		next += k
	}
	if canary > 0 && n > 0 {
		take(canary)
	}
	if len(batches) == 0 {
		if next < n {
			take(n - next)
		}
		return stages
	}
	for i := 0; next < n; i++ {
		take(rollout.BatchSize(rollout.Nth(batches, i), n)) // validated
	}
	return stages
}

// errorBudget is how many failures a run of n nodes tolerates (-1: unlimited).
func errorBudget(maxErrors *intstr.IntOrString, n int) int {
	if maxErrors == nil {
		return -1
	}
	return rollout.Tolerated(*maxErrors, n) // validated
}

// MaxRetryBackoff caps the pause between two retries of a node
// (RunnerOptions.RetryBackoff doubled per retry), before jitter.
const MaxRetryBackoff = 5 * time.Minute

// backoff is the pause before retry number attempt (1-based): base doubled
// per retry up to MaxRetryBackoff (never overflowing), plus up to 50% jitter.
func backoff(base time.Duration, attempt int) time.Duration {
	d := min(base, MaxRetryBackoff)
	for i := 1; i < attempt && d < MaxRetryBackoff; i++ {
		d *= 2
	}
	d = min(d, MaxRetryBackoff)
	if d <= 0 {
		return 0
	}
	return d + time.Duration(rand.Int64N(int64(d)/2+1))
}
