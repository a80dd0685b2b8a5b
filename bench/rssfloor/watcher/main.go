// Command watcher links the NodeScript watcher library (nodeexec/watcher:
// client-go, kubectl's drain helper, the backends' pod builders with kubectl's
// debug profiles). It reports its memory (report.Print) and exits.
package main

import (
	_ "k8s.io/client-go/informers"
	_ "k8s.io/client-go/kubernetes"

	_ "github.com/nodeexec/nodeexec/nodeexec/watcher"

	"github.com/nodeexec/nodeexec/bench/rssfloor/internal/report"
)

func main() { report.Print("nodeexec/watcher (library)") }
