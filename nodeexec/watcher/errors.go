package watcher

import "github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

// ErrCRDNotInstalled is returned (wrapped) by Start when the API server
// does not serve nodescripts.nodeexec.io: install deploy/crd first
// (kubectl apply -f deploy/crd/, or kubectl apply -k deploy/). It is the
// same error value as nodescripts.ErrCRDNotInstalled.
var ErrCRDNotInstalled = nodescript.ErrCRDNotInstalled
