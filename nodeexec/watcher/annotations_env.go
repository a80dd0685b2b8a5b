package watcher

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/internal/nodescript"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodeexec/nodeexec/nodeexec/watcher/api/v1alpha1"
)

// rolloutPlace is a node's place in a rollout (RunPodSpec.Place).
type rolloutPlace struct {
	// Ordinal is the node's index in Decision.Order, -1 when not in it.
	Ordinal int
	// Canary is set on a node of Decision.Canaries.
	Canary bool
}

// placeEnv adds s's place to env (RunPod): nothing when s.Place is nil.
func placeEnv(env map[string]string, s runPodSpec) {
	if s.Place == nil {
		return
	}
	env[v1alpha1.EnvOrdinal] = strconv.Itoa(s.Place.Ordinal)
	env[v1alpha1.EnvCanary] = strconv.FormatBool(s.Place.Canary)
	env[v1alpha1.EnvAttempt] = strconv.Itoa(s.Attempt)
	env[v1alpha1.EnvBootID] = s.BootID
}

// placeMemo keeps, per NodeScript, the order and canaries of its last
// decision (put by each reconcile, before it starts pods), and the index
// of that order built on the first lookup: a pod's place is a map lookup,
// the order sorted once per reconcile by Decide. Safe for concurrent use.
// It is a cache of what Decide computes from the API's state: a restarted
// watcher computes it again (place).
type placeMemo struct {
	mu sync.Mutex
	m  map[string]*places
}

type places struct {
	hash     string
	order    []string
	canaries []string
	index    map[string]int // built on first use
	canary   map[string]bool
}

// put records d's order and canaries for NodeScript name (when Decide set
// an order: a decision that holds or halts keeps its order too).
func (m *placeMemo) put(name string, d decision) {
	if d.Order == nil && d.Hash == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[string]*places{}
	}
	m.m[name] = &places{hash: d.Hash, order: d.Order, canaries: d.Canaries}
}

// get is node's place for NodeScript name at hash, and whether the memo
// holds that hash's order.
func (m *placeMemo) get(name, hash, node string) (rolloutPlace, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.m[name]
	if p == nil || p.hash != hash {
		return rolloutPlace{}, false
	}
	if p.index == nil {
		p.index = make(map[string]int, len(p.order))
		for i, n := range p.order {
			p.index[n] = i
		}
		p.canary = make(map[string]bool, len(p.canaries))
		for _, n := range p.canaries {
			p.canary[n] = true
		}
	}
	i, ok := p.index[node]
	if !ok {
		i = -1
	}
	return rolloutPlace{Ordinal: i, Canary: p.canary[node]}, true
}

func (m *placeMemo) forget(name string) {
	m.mu.Lock()
	delete(m.m, name)
	m.mu.Unlock()
}

// place is node's place in ns's rollout at hash: from the memo of the last
// decision, or, when it holds none for hash (a restarted watcher resuming a
// node before its first decision, a spec just changed), computed by
// Decide over the cached nodes and their states, and memoized.
func (c *controller) place(ctx context.Context, ns *v1alpha1.NodeScript, hash, node string, now time.Time) *rolloutPlace {
	if p, ok := c.w.places.get(ns.Name, hash, node); ok {
		return &p
	}
	all, err := c.nodes.List(labels.Everything())
	if err != nil {
		return &rolloutPlace{Ordinal: -1}
	}
	nodes := make([]rolloutNode, 0, len(all))
	for _, n := range all {
		s, ok := c.w.state(ctx, ns.Name, n)
		if !ok {
			continue
		}
		ready, _ := nodeReady(n)
		nodes = append(nodes, rolloutNode{Name: n.Name, UID: string(n.UID), Labels: n.Labels, Ready: ready, Ignored: nodescript.Ignored(n, ns.Name), State: s})
	}
	d, err := decideRollout(ns, nodes, now)
	if err != nil || d.Hash != hash {
		return &rolloutPlace{Ordinal: -1}
	}
	c.w.places.put(ns.Name, d)
	p, _ := c.w.places.get(ns.Name, hash, node)
	return &p
}
