package podexec_test

import (
	"fmt"

	"github.com/nodeexec/nodeexec/nodeexec/podexec"
)

// The kubelet expands $(VAR) in a container's command, args and
// environment; EscapeExpansion doubles every `$`, so a script reaches the
// node byte for byte.
func ExampleEscapeExpansion() {
	script := `echo "$(hostname) $HOME $$"`
	fmt.Println(podexec.EscapeExpansion(script))
	// Output:
	// echo "$$(hostname) $$HOME $$$$"
}
