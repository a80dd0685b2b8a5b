package watcher

import "github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

// Redacted replaces a secret's value (nodescript.Redacted).
const Redacted = nodescript.Redacted

// Redact is nodescript.Redact.
func Redact(s string) string { return nodescript.Redact(s) }
