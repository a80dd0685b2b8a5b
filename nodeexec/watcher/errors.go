package watcher

import "github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

// ErrCRDNotInstalled is returned (wrapped) by Start when the API server
// does not serve nodescripts.nodeexec.io: install deploy/crd first
// (kubectl apply -f deploy/crd/, or kubectl apply -k deploy/). It is the
// same error value as nodescripts.ErrCRDNotInstalled.
var ErrCRDNotInstalled = nodescript.ErrCRDNotInstalled

// crdMissing reports whether err is the API server not serving the
// resource at all (a 404 without an object name), not a missing object.
func crdMissing(err error) bool { return nodescript.CRDMissing(err) }

// cmpOr is s, or def when s is empty.
func cmpOr(s, def string) string { return nodescript.CmpOr(s, def) }
