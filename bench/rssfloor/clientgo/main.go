// Command clientgo links what any informer-based controller links: client-go's
// clientset and informers. It reports its memory (report.Print) and exits.
package main

import (
	_ "k8s.io/client-go/informers"
	_ "k8s.io/client-go/kubernetes"

	"github.com/nodeexec/nodeexec/bench/rssfloor/internal/report"
)

func main() { report.Print("client-go clientset and informers") }
