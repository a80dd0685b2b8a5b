package nodeexec

import (
	"context"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// ZoneLabel is the node label RunnerOptions.MaxPerZone groups nodes by, the
// well-known topology.kubernetes.io/zone.
const ZoneLabel = corev1.LabelTopologyZone

// NoZone is the zone of a node without ZoneLabel (or with an empty value).
// With RunnerOptions.MaxPerZone such nodes form one group of their own, to
// which the limit applies as to any zone: on a cluster without zone labels,
// MaxPerZone N runs at most N nodes at once.
const NoZone = ""

// ZoneOf returns node's zone: the value of ZoneLabel, or NoZone.
func ZoneOf(node *corev1.Node) string {
	return node.Labels[ZoneLabel]
}

// CountZones returns how many of nodes are in each zone (NoZone for those
// without the label).
func CountZones(nodes []*corev1.Node) map[string]int {
	out := map[string]int{}
	for _, n := range nodes {
		out[ZoneOf(n)]++
	}
	return out
}

// slots hands out a run's concurrency: at most max nodes at once and, when
// perZone > 0, at most perZone nodes of one zone at once. take picks the
// first pending node (in target order) whose zone has room, so that a full
// zone never holds up the nodes of the others.
type slots struct {
	max, perZone int
	mu           sync.Mutex
	running      int
	zones        map[string]int
	wake         chan struct{} // a slot was released
}

func newSlots(maxConcurrency, perZone int) *slots {
	return &slots{max: maxConcurrency, perZone: perZone, zones: map[string]int{}, wake: make(chan struct{}, 1)}
}

// queue is a stage's nodes not yet started, by zone, each zone's in target
// order.
type queue struct {
	zones   []string         // in order of first appearance
	byZone  map[string][]int // indexes into the run's nodes
	pending int
}

func newQueue(stage []int, zoneOf []string) *queue {
	q := &queue{byZone: map[string][]int{}, pending: len(stage)}
	for _, i := range stage {
		z := zoneOf[i]
		if _, ok := q.byZone[z]; !ok {
			q.zones = append(q.zones, z)
		}
		q.byZone[z] = append(q.byZone[z], i)
	}
	return q
}

// drain removes and returns every node still pending, in target order.
func (q *queue) drain() []int {
	var out []int
	for _, z := range q.zones {
		out = append(out, q.byZone[z]...)
		q.byZone[z] = nil
	}
	slices.Sort(out)
	q.pending = 0
	return out
}

// take waits until a node of q may start: the first in target order of
// the zones with room. It marks the node's slot taken, removes it from q
// and returns its index; false when ctx ended first.
func (s *slots) take(ctx context.Context, q *queue) (int, bool) {
	for {
		s.mu.Lock()
		best, bestZone := -1, ""
		if s.running < s.max {
			for _, z := range q.zones {
				h := q.byZone[z]
				if len(h) == 0 || (s.perZone > 0 && s.zones[z] >= s.perZone) {
					continue
				}
				if best < 0 || h[0] < best {
					best, bestZone = h[0], z
				}
			}
		}
		if best >= 0 {
			q.byZone[bestZone] = q.byZone[bestZone][1:]
			q.pending--
			s.running++
			s.zones[bestZone]++
			s.mu.Unlock()
			return best, true
		}
		s.mu.Unlock()
		select {
		case <-s.wake:
		case <-ctx.Done():
			return 0, false
		}
	}
}

// release frees the slot of a node in zone.
func (s *slots) release(zone string) {
	s.mu.Lock()
	s.running--
	s.zones[zone]--
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// zonesOf returns the zone of each node when a zone limit applies, else a
// slice of NoZone.
func zonesOf(nodes []*corev1.Node, perZone int) []string {
	out := make([]string, len(nodes))
	if perZone > 0 {
		for i, n := range nodes {
			out[i] = ZoneOf(n)
		}
	}
	return out
}
