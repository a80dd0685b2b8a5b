package cri_test

import (
	"errors"
	"fmt"

	"github.com/nodeexec/nodeexec/nodeexec/cri"
)

// ParseID takes a container ID as a pod's status gives it
// (containerStatuses[].containerID, "runtime://hex") or bare, and returns
// the hex ID a CRI runtime answers to.
func ExampleParseID() {
	id, err := cri.ParseID("containerd://0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	fmt.Println(id, err)
	id, err = cri.ParseID("0123456789ab")
	fmt.Println(id, err)
	_, err = cri.ParseID("docker://not-hex")
	fmt.Println(errors.Is(err, cri.ErrInvalidID))
	// Output:
	// 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef <nil>
	// 0123456789ab <nil>
	// true
}

// InfoPID reads the container's process ID from a verbose ContainerStatus
// response's info, as containerd and CRI-O return it.
func ExampleInfoPID() {
	pid, err := cri.InfoPID(map[string]string{"info": `{"pid": 4242, "sandboxID": "abc"}`})
	fmt.Println(pid, err)
	_, err = cri.InfoPID(map[string]string{"info": `{"pid": 0}`})
	fmt.Println(errors.Is(err, cri.ErrNotRunning))
	// Output:
	// 4242 <nil>
	// true
}
