package batch

import (
	"container/list"
	"slices"
	"sync"

	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
)

// PromptCache keeps the caches of token sequences already processed, so
// that a request whose prompt starts with one of them (the same
// conversation's next turn, a shared system prompt) processes only the
// rest. It holds at most MaxBytes of cache arrays and evicts the least
// recently used entries first. Lookup and Insert run where the model runs
// (the engine's loop); Stats may be read from anywhere.
type PromptCache struct {
	maxBytes int64

	mu        sync.Mutex
	lru       *list.List // of *entry, most recently used first
	bytes     int64
	hits      int64
	misses    int64
	hitTokens int64
	evictions int64
}

type entry struct {
	tokens []int32    // what the caches hold, in order
	caches []kv.Cache // one per layer, owned
	nbytes int64
}

// PromptCacheStats are a prompt cache's counters.
type PromptCacheStats struct {
	Hits, Misses int64 // lookups that reused a prefix, and those that found none
	HitTokens    int64 // prompt tokens reused in all
	Evictions    int64 // entries dropped to stay within MaxBytes
	Entries      int
	Bytes        int64 // the entries' cache arrays
	MaxBytes     int64
}

// NewPromptCache makes an empty cache of at most maxBytes.
func NewPromptCache(maxBytes int64) *PromptCache {
	return &PromptCache{maxBytes: maxBytes, lru: list.New()}
}

// Stats are the counters so far.
func (p *PromptCache) Stats() PromptCacheStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PromptCacheStats{Hits: p.hits, Misses: p.misses, HitTokens: p.hitTokens, Evictions: p.evictions,
		Entries: p.lru.Len(), Bytes: p.bytes, MaxBytes: p.maxBytes}
}

// Lookup finds the entry sharing the longest prefix with tokens and returns
// copies of its caches holding that prefix (at most all tokens but the
// last, which the model must still see to give logits), and the prefix's
// length. It returns nil and 0 when no entry shares a prefix it can be cut
// to (a window cache that has dropped positions cannot be cut).
func (p *PromptCache) Lookup(g *mlx.Graph, tokens []int32) ([]kv.Cache, int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best *list.Element
	bestN := 0
	for el := p.lru.Front(); el != nil; el = el.Next() {
		e := el.Value.(*entry)
		n := min(commonPrefix(e.tokens, tokens), len(tokens)-1)
		if n <= bestN || (n < len(e.tokens) && !trimmable(e.caches)) {
			continue
		}
		best, bestN = el, n
	}
	if best == nil {
		p.misses++
		return nil, 0, nil
	}
	e := best.Value.(*entry)
	out := make([]kv.Cache, len(e.caches))
	for i, c := range e.caches {
		cp, err := kv.Clone(g, c)
		if err != nil {
			freeCaches(out)
			return nil, 0, err
		}
		out[i] = cp
		if cut := len(e.tokens) - bestN; cut > 0 && cp.Trim(cut) != cut {
			freeCaches(out)
			p.misses++
			return nil, 0, nil
		}
	}
	p.lru.MoveToFront(best)
	p.hits++
	p.hitTokens += int64(bestN)
	return out, bestN, nil
}

// Insert keeps caches (one per layer) as holding tokens, taking them over.
// An entry for the same tokens is replaced; caches larger than the whole
// budget are freed at once.
func (p *PromptCache) Insert(tokens []int32, caches []kv.Cache) {
	n := int64(0)
	for _, c := range caches {
		n += int64(c.Nbytes())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if n > p.maxBytes || len(tokens) == 0 {
		freeCaches(caches)
		return
	}
	for el := p.lru.Front(); el != nil; el = el.Next() {
		if slices.Equal(el.Value.(*entry).tokens, tokens) {
			p.remove(el)
			break
		}
	}
	p.lru.PushFront(&entry{tokens: slices.Clone(tokens), caches: caches, nbytes: n})
	p.bytes += n
	for p.bytes > p.maxBytes {
		p.remove(p.lru.Back())
		p.evictions++
	}
}

// Clear frees every entry.
func (p *PromptCache) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.lru.Len() > 0 {
		p.remove(p.lru.Back())
	}
}

func (p *PromptCache) remove(el *list.Element) {
	e := p.lru.Remove(el).(*entry)
	p.bytes -= e.nbytes
	freeCaches(e.caches)
}

func commonPrefix(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func trimmable(caches []kv.Cache) bool {
	for _, c := range caches {
		if !c.Trimmable() {
			return false
		}
	}
	return true
}

func freeCaches(caches []kv.Cache) {
	for _, c := range caches {
		if c != nil {
			c.Free()
		}
	}
}
