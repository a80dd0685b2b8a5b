package nodescript

import (
	"time"
	"unicode/utf8"
)

// HeldSilence is a silence the watcher created for a node and has not
// expired yet, recorded in the node's state (NodeState.Silences) so that a
// restarted watcher expires it.
type HeldSilence struct {
	// URL is the Alertmanager's base URL the silence was created on.
	URL string `json:"url"`
	// ID is the silence's ID (Alertmanager's silenceID).
	ID string `json:"id"`
	// EndsAt is the silence's endsAt: past it, the silence has ended by
	// itself and is forgotten without a call.
	EndsAt time.Time `json:"endsAt"`
}

// UninstallRecord is a node's progress of spec.uninstallScript, in its
// state annotation (NodeState.Uninstall).
type UninstallRecord struct {
	// Phase is Pending (waiting for the node to be Ready), Running (Pod
	// goes), Succeeded or Failed.
	Phase string `json:"phase"`
	// Pod is the uninstall pod (Running, and after).
	Pod string `json:"pod,omitempty"`
	// ExitCode of the uninstall script, when it ran to an exit.
	ExitCode *int `json:"exitCode,omitempty"`
	// Reason says why it failed when not by its exit code (Timeout,
	// NodeNotReady, PodDisappeared, PodCreateFailed, an infrastructure
	// reason), at most 256 bytes.
	Reason string `json:"reason,omitempty"`
	// Since is when Phase began.
	Since time.Time `json:"since"`
}

// Truncate redacts s (Redact) and cuts the result to at most n bytes by
// removing its middle, on rune boundaries, marking the cut with "…": both
// the start (what failed) and the end (often the fix) of a message
// survive. Redacting first means a cut never joins the end of a secret's
// key name (…WORD=) to its value.
func Truncate(s string, n int) string {
	s = Redact(s)
	if len(s) <= n {
		return s
	}
	keep := max(n-len("…"), 0)
	head, end := s[:keep/2], s[len(s)-(keep-keep/2):]
	for len(head) > 0 && !utf8.ValidString(head) {
		head = head[:len(head)-1]
	}
	for len(end) > 0 && !utf8.RuneStart(end[0]) {
		end = end[1:]
	}
	return head + "…" + end
}

// maxTime is the later of a and b.
func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
