// Command watcher embeds the NodeScript watcher in a program of its own, as
// an operator would: it applies a NodeScript from a file, then runs the
// watcher until interrupted. Watcher.Start has controller-runtime's Runnable
// signature, so in an operator built on a manager it is mgr.Add(w) instead.
//
//	go run ./examples/watcher examples/watcher/nodescript.yaml
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/nodescripts"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/dynamic"

	"github.com/nodeexec/nodeexec/nodeexec"
	"github.com/nodeexec/nodeexec/nodeexec/watcher"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: watcher NODESCRIPT.yaml")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	log := funcr.NewJSON(func(obj string) { fmt.Fprintln(os.Stderr, obj) }, funcr.Options{})
	if err := run(logr.NewContext(ctx, log), os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, file string) error {
	cfg, _, err := nodeexec.ClientOptions{}.RESTConfig()
	if err != nil {
		return err
	}
	client, err := nodeexec.Clientset(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	scripts, err := nodescripts.ParseNodeScripts(f) // every error names its field
	if err != nil {
		return err
	}
	if _, err := nodescripts.Apply(ctx, dyn, scripts); err != nil {
		return err
	}
	w, err := watcher.New(watcher.Options{Client: client, Dynamic: dyn})
	if err != nil {
		return err
	}
	return w.Start(ctx) // until Ctrl-C; safe to stop and start again at any moment
}
