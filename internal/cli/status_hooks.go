package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// printHooks prints one line per hook of spec.hooks: the rollout hooks'
// last Job from status.hooks (phase, spec hash, attempt, since, message),
// and, for the node hooks, how many nodes are at each step (NodeState.Hook).
func printHooks(w io.Writer, rep *nodescripts.Report, now time.Time) {
	ns := rep.NodeScript
	hooks := ns.Spec.Hooks
	if hooks == nil {
		return
	}
	var st v1alpha1.HooksStatus
	if ns.Status.Hooks != nil {
		st = *ns.Status.Hooks
	}
	rollout := map[string]*v1alpha1.HookStatus{v1alpha1.HookPreRollout: st.PreRollout, v1alpha1.HookPostRollout: st.PostRollout}
	for _, name := range v1alpha1.HookNames() {
		if hooks.HookByName(name) == nil {
			continue
		}
		switch name {
		case v1alpha1.HookPreRollout, v1alpha1.HookPostRollout:
			hs := rollout[name]
			if hs == nil || hs.Hash != ns.Status.SpecHash {
				fmt.Fprintf(w, "hook %s: not run for spec %s\n", name, orDash(ns.Status.SpecHash))
				continue
			}
			since := "-"
			if hs.Since != nil {
				since = now.Sub(hs.Since.Time).Round(time.Second).String()
			}
			line := fmt.Sprintf("hook %s: %s (Job %s, attempt %d, for %s)", name, hs.Phase, hs.Job, hs.Attempt, since)
			if hs.Message != "" {
				line += ": " + hs.Message
			}
			fmt.Fprintln(w, line)
		default:
			counts := map[string]int{}
			for _, n := range rep.Nodes {
				if p, ok := cutHook(n.State.Hook, name); ok {
					counts[p]++
				}
			}
			fmt.Fprintf(w, "hook %s: running on %d node(s), succeeded %d, failed %d\n", name,
				counts[v1alpha1.HookRunning], counts[v1alpha1.HookSucceeded], counts[v1alpha1.HookFailed])
		}
	}
}

// cutHook is the phase of NodeState.Hook h when it is hook's.
func cutHook(h, hook string) (string, bool) {
	if len(h) > len(hook) && h[:len(hook)] == hook && h[len(hook)] == ':' {
		return h[len(hook)+1:], true
	}
	return "", false
}
