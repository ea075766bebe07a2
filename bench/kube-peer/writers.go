package main

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// restConfig is the admin client configuration. client-go's default rate
// limit (QPS 5, burst 10) would measure client-go, not the API server.
func (c *cluster) restConfig(contentType string) *rest.Config {
	cfg := &rest.Config{Host: c.apiURL, BearerToken: c.pki.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.pki.caPEM},
		QPS:             1e6, Burst: 1_000_000, UserAgent: "clusterd-kube-peer"}
	if contentType == "protobuf" {
		cfg.ContentType = "application/vnd.kubernetes.protobuf"
		cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	}
	return cfg
}

// newClientset returns a clientset with its own HTTP/2 connection: client-go
// shares one transport (one connection) among clientsets of equal TLS
// settings, unless each has its own Dial function.
func newClientset(base *rest.Config) (*kubernetes.Clientset, error) {
	cfg := rest.CopyConfig(base)
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	cfg.Dial = d.DialContext
	return kubernetes.NewForConfig(cfg)
}

// phaseStats is one writer's account of one phase.
type phaseStats struct {
	ack      hist
	acked    int64
	errors   int64
	lastAck  time.Time
	firstErr error
}

func (s *phaseStats) merge(o *phaseStats) {
	s.ack.merge(&o.ack)
	s.acked += o.acked
	s.errors += o.errors
	if o.lastAck.After(s.lastAck) {
		s.lastAck = o.lastAck
	}
	if s.firstErr == nil {
		s.firstErr = o.firstErr
	}
}

// writer plays the device plugins of the nodes it owns (node i belongs to
// writer i mod P), over its own connection; no two writers touch one
// ConfigMap, so updates never conflict.
type writer struct {
	cs    kubernetes.Interface
	ns    string
	nodes []*node
	next  int
	st    *phaseStats
}

// create writes the writer's nodes' initial ConfigMaps.
func (w *writer) create(ctx context.Context) error {
	for _, n := range w.nodes {
		cm, err := n.initialConfigMap(w.ns, time.Now().UnixNano())
		if err != nil {
			return err
		}
		if n.cm, err = w.cs.CoreV1().ConfigMaps(w.ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create ConfigMap %s: %w", cm.Name, err)
		}
	}
	return nil
}

// update raises or clears one fault on the writer's next node and sends the
// ConfigMap with Update, as the device plugin does with the object it holds;
// the returned object (its resourceVersion) is what the next update sends. A
// refused update is counted in w.st and the object re-read; the error
// returned is ctx's, when it ended.
func (w *writer) update(ctx context.Context, seq uint64) error {
	n := w.nodes[w.next]
	w.next = (w.next + 1) % len(w.nodes)
	n.toggle()
	sent := time.Now()
	if err := n.stamp(seq, sent.UnixNano()); err != nil {
		return err
	}
	out, err := w.cs.CoreV1().ConfigMaps(w.ns).Update(ctx, n.cm, metav1.UpdateOptions{})
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if err != nil {
		w.refused(ctx, n, err)
		return nil
	}
	now := time.Now()
	n.cm = out
	w.st.ack.record(now.Sub(sent))
	w.st.acked++
	w.st.lastAck = now
	return nil
}

func (w *writer) refused(ctx context.Context, n *node, err error) {
	w.st.errors++
	if w.st.firstErr == nil {
		w.st.firstErr = fmt.Errorf("update %s: %w", n.cm.Name, err)
	}
	if cm, gerr := w.cs.CoreV1().ConfigMaps(w.ns).Get(ctx, n.cm.Name, metav1.GetOptions{}); gerr == nil {
		n.cm = cm
	}
}

// writers is the set of P writers and the sequence numbers they stamp.
type writers struct {
	ws  []*writer
	seq atomic.Uint64
}

func newWriters(base *rest.Config, ns string, nodes []*node, p int) (*writers, error) {
	all := &writers{}
	for range p {
		cs, err := newClientset(base)
		if err != nil {
			return nil, err
		}
		all.ws = append(all.ws, &writer{cs: cs, ns: ns})
	}
	for i, n := range nodes {
		w := all.ws[i%p]
		w.nodes = append(w.nodes, n)
	}
	return all, nil
}

// each runs f for every writer in its own goroutine with fresh phase stats
// and returns the merged stats and the first error.
func (all *writers) each(f func(i int, w *writer) error) (phaseStats, error) {
	var wg sync.WaitGroup
	errs := make([]error, len(all.ws))
	for i, w := range all.ws {
		w.st = &phaseStats{}
		wg.Go(func() { errs[i] = f(i, w) })
	}
	wg.Wait()
	var total phaseStats
	for _, w := range all.ws {
		total.merge(w.st)
	}
	for _, err := range errs {
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// createAll creates every node's ConfigMap, the writers in parallel.
func (all *writers) createAll(ctx context.Context) error {
	_, err := all.each(func(_ int, w *writer) error { return w.create(ctx) })
	return err
}

// closedLoop has every writer update back to back until dur has passed.
func (all *writers) closedLoop(ctx context.Context, dur time.Duration) (phaseStats, time.Duration, error) {
	start := time.Now()
	deadline := start.Add(dur)
	st, err := all.each(func(_ int, w *writer) error {
		for time.Now().Before(deadline) {
			if err := w.update(ctx, all.seq.Add(1)); err != nil {
				return err
			}
		}
		return nil
	})
	return st, time.Since(start), err
}

// pacedResult is what a paced run sent, beyond the writers' stats.
type pacedResult struct {
	phaseStats
	scheduled int64
	start     time.Time
	elapsed   time.Duration // first scheduled send to last ack
	behindMax time.Duration // largest lateness of a send against its slot
}

// paced sends rate updates/s in total for dur: update j = k*P+i (writer i's
// k-th) is due at start + j/rate and goes at once when its writer is late.
// Latency is timed from the actual send; sends still due when dur has passed
// are dropped (scheduled - acked - errors says how many), which bounds the
// phase when the server cannot keep up.
func (all *writers) paced(ctx context.Context, rate float64, dur time.Duration) (pacedResult, error) {
	p := len(all.ws)
	res := pacedResult{start: time.Now().Add(10 * time.Millisecond)}
	res.scheduled = int64(rate * dur.Seconds())
	behind := make([]time.Duration, p)
	st, err := all.each(func(i int, w *writer) error {
		t := time.NewTimer(time.Hour)
		defer t.Stop()
		for j := int64(i); j < res.scheduled; j += int64(p) {
			due := res.start.Add(time.Duration(float64(j) / rate * float64(time.Second)))
			if wait := time.Until(due); wait > 0 {
				t.Reset(wait)
				select {
				case <-ctx.Done():
					return context.Cause(ctx)
				case <-t.C:
				}
			}
			now := time.Now()
			if now.Sub(res.start) >= dur {
				return nil
			}
			behind[i] = max(behind[i], now.Sub(due))
			if err := w.update(ctx, all.seq.Add(1)); err != nil {
				return err
			}
		}
		return nil
	})
	res.phaseStats = st
	for _, b := range behind {
		res.behindMax = max(res.behindMax, b)
	}
	res.elapsed = max(st.lastAck.Sub(res.start), dur)
	return res, err
}

// warmUp sends one update from writer 0 with the given seq.
func (all *writers) warmUp(ctx context.Context, seq uint64) error {
	w := all.ws[0]
	w.st = &phaseStats{}
	if err := w.update(ctx, seq); err != nil {
		return err
	}
	if w.st.errors > 0 {
		return w.st.firstErr
	}
	return nil
}
