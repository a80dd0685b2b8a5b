package watcher

import (
	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"
)

// The calendar math (openings of spec.window and spec.windowRefs) lives in
// internal/nodescript, shared with the client verbs (package nodescripts).

// opening is one span of time a rollout may run in (nodescript.Opening).
type opening = nodescript.Opening
