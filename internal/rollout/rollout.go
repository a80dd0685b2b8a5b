// Package rollout is the arithmetic the two rollout engines share: the
// Runner's (nodeexec.RunnerOptions Canary, Batches, MaxErrors) and the
// watcher's (a NodeScript's spec.rollout canary, batches, maxConcurrency,
// maxFailures). Where the engines mean the same thing they call these
// functions; where they differ (defaults, order, retries) each engine's
// doc comment says how, and tests pin it.
package rollout

import "k8s.io/apimachinery/pkg/util/intstr"

// BatchSize is the size of batch b of total nodes: a count, or a
// percentage of total rounded up; at least 1. b must be a valid count or
// percentage (both engines validate theirs first); an invalid one counts
// as 0, so 1.
func BatchSize(b intstr.IntOrString, total int) int {
	n, _ := intstr.GetScaledValueFromIntOrPercent(&b, total, true)
	return max(n, 1)
}

// Nth is the size of stage i (0-based) of batches: the last size repeats.
// batches must not be empty.
func Nth(batches []intstr.IntOrString, i int) intstr.IntOrString {
	return batches[min(i, len(batches)-1)]
}

// Tolerated is how many failures an error budget of maxErrors out of
// total nodes tolerates: a count, or a percentage of total rounded down.
// maxErrors must be valid (an invalid one tolerates 0).
func Tolerated(maxErrors intstr.IntOrString, total int) int {
	n, _ := intstr.GetScaledValueFromIntOrPercent(&maxErrors, total, false)
	return n
}
