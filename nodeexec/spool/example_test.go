package spool_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/nodeexec/nodeexec/nodeexec/spool"
)

// A spool is named after its pod: CheckName accepts one path element of
// safe characters, and Path places it under DefaultParent.
func ExampleCheckName() {
	fmt.Println(spool.CheckName("nodeexec-node-a-x2x2x"))
	fmt.Println(spool.Path("nodeexec-node-a-x2x2x"))
	fmt.Println(spool.CheckName("../etc") != nil, spool.CheckName(".hidden") != nil, spool.CheckName("") != nil)
	// Output:
	// <nil>
	// /tmp/nodeexec/spool/nodeexec-node-a-x2x2x
	// true true true
}

// Create makes a spool in a new directory: a command's output goes to its
// files, so that a client can attach, detach and attach again; Finish
// records the exit status.
func ExampleCreate() {
	parent, err := os.MkdirTemp("", "spool-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(parent)
	s, err := spool.Create(filepath.Join(parent, "run1"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Fprintln(s.Stdout(), "hello")
	fmt.Println(s.Finish(3))
	fmt.Println(spool.Exists(s.Dir()))
	fmt.Println(spool.ReadExit(s.Dir()))
	// Output:
	// <nil>
	// true
	// 3 true
}
