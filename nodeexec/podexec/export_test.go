package podexec

// The executor, its shared watch and the run's Lease are what NewPodBackend
// puts together; the tests drive them directly under these names.
type (
	Options      = executorOptions
	Executor     = executor
	Tracker      = tracker
	RunLease     = runLease
	LeaseOptions = leaseOptions
)

var (
	New        = newExecutor
	NewTracker = newTracker
	NewLease   = newLease
)
