package nsenter_test

import (
	"errors"
	"fmt"

	"github.com/nodeexec/nodeexec/nsenter"
)

// ParseNamespaces reads the list `nodeexec run --namespaces` and the
// agent's --namespaces flag take: names in order, duplicates dropped, "all"
// for every namespace; an unknown name is an error naming it.
func ExampleParseNamespaces() {
	nss, err := nsenter.ParseNamespaces("mnt, net,mnt,pid")
	fmt.Println(nss, err)
	fmt.Println(nsenter.JoinNamespaces(nss))

	all, _ := nsenter.ParseNamespaces("all")
	fmt.Println(nsenter.JoinNamespaces(all))
	fmt.Println(nsenter.JoinNamespaces(nsenter.DefaultNamespaces()))

	_, err = nsenter.ParseNamespaces("mnt,time")
	fmt.Println(errors.Is(err, nsenter.ErrUnknownNamespace))
	// Output:
	// [mnt net pid] <nil>
	// mnt,net,pid
	// mnt,uts,ipc,net,pid,cgroup,user
	// mnt,uts,ipc,net,pid
	// true
}
