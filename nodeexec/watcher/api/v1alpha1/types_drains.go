package v1alpha1

// Values of spec.maintenance.drain.onTimeout: what happens to a drain that
// did not finish within spec.maintenance.drain.timeout.
const (
	// DrainOnTimeoutRetry (the default): the drain is an infrastructure
	// failure (reason DrainFailed), counted as an attempt and retried under
	// spec.retry.
	DrainOnTimeoutRetry = "Retry"
	// DrainOnTimeoutSkip: the node is uncordoned (when the watcher cordoned
	// it) and goes back to Pending, tried again after spec.retry.maxBackoff;
	// not a failure, not an attempt.
	DrainOnTimeoutSkip = "Skip"
	// DrainOnTimeoutForce: the pods left are deleted instead of evicted
	// (their PodDisruptionBudgets are not asked), then the run goes on.
	DrainOnTimeoutForce = "Force"
)

// DrainOnTimeouts are the values of spec.maintenance.drain.onTimeout.
func DrainOnTimeouts() []string {
	return []string{DrainOnTimeoutRetry, DrainOnTimeoutSkip, DrainOnTimeoutForce}
}

// OnTimeoutOrDefault is s's onTimeout, DrainOnTimeoutRetry when unset.
func (s *DrainSpec) OnTimeoutOrDefault() string {
	if s == nil || s.OnTimeout == "" {
		return DrainOnTimeoutRetry
	}
	return s.OnTimeout
}
