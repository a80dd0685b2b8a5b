// Package podexec is the pod lifecycle shared by the backends that run a
// command in a pod they create: create the pod, wait for its container, run
// the command in it over the exec subresource, read the exit code, delete the
// pod.
//
// # Why exec into a holder container, not attach
//
// `kubectl debug node/NAME -- CMD` makes CMD the container's process and
// attaches to it once the kubelet reports the container running. A short
// command can finish before the attach connects, and its output is then lost
// from the stream; and its exit code is only known after the kubelet's next
// status report (the PLEG relist, about once a second). podexec instead starts
// the container with a holder process (sleep until the deadline) and runs the
// command with the exec subresource: the exec streams are connected before
// the command starts, so no output is lost; the exit code arrives on the
// stream's status channel as the command ends; and the first exec attempt is
// made on the kubelet's Started event for the container, which precedes its
// status report by up to a second. An attempt made before the container
// exists fails cleanly (nothing was consumed from stdin) and is retried with
// backoff.
//
// All pods of a tracker share one watch, so a fan-out over N nodes costs, per
// node, one create, one exec (plus early retries) and one delete.
package podexec
