package main

import (
	"sync"
	"sync/atomic"
	"time"
)

// tracker is one consumer's account of a phase: the latency histogram, how
// many of the phase's updates arrived, and when the last one did. Updates
// stamped below base belong to earlier phases and are ignored; an update
// whose seq is not above the last one seen for its node is a duplicate or
// out of order and is counted apart, so got counts distinct updates.
type tracker struct {
	base   uint64
	last   []uint64 // per node: highest seq seen
	lat    hist
	got    atomic.Int64
	dups   atomic.Int64
	lastAt atomic.Int64 // unix ns of the last counted receipt
	target *atomic.Int64
	once   sync.Once
	done   func() // called once: all targeted updates arrived, or the stream ended
}

// newTarget returns a shared target that no consumer reaches until the
// phase's sends are over and it is set to the number acknowledged.
func newTarget() *atomic.Int64 {
	t := &atomic.Int64{}
	t.Store(1 << 62)
	return t
}

func newTracker(base uint64, nodes int, target *atomic.Int64, done func()) *tracker {
	return &tracker{base: base, last: make([]uint64, nodes), target: target, done: done}
}

// observe records one received update. It is called from one goroutine per
// tracker (the watcher's or the informer's handler).
func (t *tracker) observe(node int, seq uint64, sentNS int64, now time.Time) {
	if seq < t.base || node < 0 || node >= len(t.last) {
		return
	}
	if seq <= t.last[node] {
		t.dups.Add(1)
		return
	}
	t.last[node] = seq
	t.lat.record(now.Sub(time.Unix(0, sentNS)))
	t.lastAt.Store(now.UnixNano())
	if t.got.Add(1) >= t.target.Load() {
		t.finish()
	}
}

// check is called once the target is set: consumers that already have
// everything finish now.
func (t *tracker) check() {
	if t.got.Load() >= t.target.Load() {
		t.finish()
	}
}

func (t *tracker) finish() { t.once.Do(t.done) }

// waitDone waits for wg until limit passes; it reports whether wg finished.
func waitDone(wg *sync.WaitGroup, limit time.Duration, abort <-chan struct{}) bool {
	ch := make(chan struct{})
	go func() {
		wg.Wait()
		close(ch)
	}()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
	case <-abort:
	}
	return false
}
