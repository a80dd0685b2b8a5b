package agent_test

import (
	"fmt"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/agent"
)

// The agent pods' holder process: the agent waits until the run's deadline
// (or SIGTERM) instead of `sleep`.
func ExampleHoldArgv() {
	fmt.Println(agent.HoldArgv(630 * time.Second))
	// Output:
	// [/usr/local/bin/nodeexec agent hold --duration 630s]
}

// WithTimeout puts --timeout (whole seconds, rounded up) into an agent
// command line, so that the agent ends the command after that long and
// exits 124; other command lines come back unchanged with ok false.
func ExampleWithTimeout() {
	argv, ok := agent.WithTimeout([]string{agent.Path, "agent", "nsenter", "--target", "1", "--", "hostname"}, 90*time.Second+time.Millisecond)
	fmt.Println(argv, ok)
	argv, ok = agent.WithTimeout([]string{"hostname"}, time.Minute)
	fmt.Println(argv, ok)
	// Output:
	// [/usr/local/bin/nodeexec agent nsenter --timeout 91s --target 1 -- hostname] true
	// [hostname] false
}

// The variables a command runs with travel to the agent as one JSON value
// (ExecEnvVar), never on its command line.
func ExampleEncodeExecEnv() {
	s := agent.EncodeExecEnv(map[string]string{"B": "2", "A": "x y"})
	fmt.Println(s)
	env, err := agent.DecodeExecEnv(s)
	fmt.Println(env, err)
	// Output:
	// {"A":"x y","B":"2"}
	// map[A:x y B:2] <nil>
}
