// Command drain links client-go and kubectl's drain helper (k8s.io/kubectl/pkg/drain,
// which the watcher uses to cordon and drain). It reports its memory
// (report.Print) and exits.
package main

import (
	_ "k8s.io/client-go/informers"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/kubectl/pkg/drain"

	"github.com/nodeexec/nodeexec/bench/rssfloor/internal/report"
)

func main() { report.Print("client-go + kubectl's drain helper") }
