package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// fanoutChannels is how many clientsets (each with its own transport) the
// watches are spread over, like the 4 channels of clusterd's bench. Each
// still opens more than one connection: kube-apiserver allows 100 streams per
// HTTP/2 connection by default, so 1,000 watches take 12 connections.
const fanoutChannels = 4

// watcher is one plain Watch of the namespace's ConfigMaps.
type watcher struct {
	tr        *tracker
	warmSeq   uint64
	readyOnce sync.Once
	ready     func()
	isReady   atomic.Bool
	openErr   error // the Watch call's error; written before ready
	mu        sync.Mutex
	closeErr  error // why the server ended the watch, when it did
}

func (wt *watcher) markReady() {
	wt.readyOnce.Do(func() {
		wt.isReady.Store(true)
		wt.ready()
	})
}

func (wt *watcher) closedBy() error {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	return wt.closeErr
}

// run opens the watch from rv and feeds its events to the tracker until ctx
// ends or the server ends the watch (noted, not re-opened: a re-watch would
// hide what the closed one missed).
func (wt *watcher) run(ctx context.Context, cs kubernetes.Interface, ns, rv string, nodeIdx map[string]int) {
	defer wt.tr.finish()
	defer wt.markReady()
	w, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		wt.openErr = err
		return
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				if ctx.Err() == nil {
					wt.mu.Lock()
					wt.closeErr = closeReason(ev, ok)
					wt.mu.Unlock()
				}
				return
			}
			wt.handle(ev, nodeIdx)
		}
	}
}

func closeReason(ev watch.Event, ok bool) error {
	if !ok {
		return errors.New("watch ended by the server (stream closed)")
	}
	return fmt.Errorf("watch ended by the server: %w", apierrors.FromObject(ev.Object))
}

func (wt *watcher) handle(ev watch.Event, nodeIdx map[string]int) {
	now := time.Now()
	cm, ok := ev.Object.(*corev1.ConfigMap)
	if !ok || ev.Type != watch.Modified {
		return
	}
	seq, sent, ok := stampOf(cm)
	if !ok {
		return
	}
	if seq == wt.warmSeq {
		wt.markReady()
		return
	}
	idx, ok := nodeIdx[cm.Name]
	if !ok {
		idx = -1
	}
	wt.tr.observe(idx, seq, sent, now)
}

type fanoutReport struct {
	Watchers        int     `json:"watchers"`
	Rate            float64 `json:"rate"`
	DurationS       float64 `json:"duration_s"`
	Scheduled       int64   `json:"scheduled"`
	Events          int64   `json:"events"`
	Expected        int64   `json:"expected"`
	Received        int64   `json:"received"`
	Missing         int64   `json:"missing"`
	Duplicates      int64   `json:"duplicates"`
	DeliveryP50MS   float64 `json:"delivery_p50_ms"`
	DeliveryP99MS   float64 `json:"delivery_p99_ms"`
	DeliveryMaxMS   float64 `json:"delivery_max_ms"`
	DeliveriesPerS  float64 `json:"deliveries_per_s"`
	WatchesClosed   int     `json:"watches_closed"`
	Connections     int     `json:"connections"` // HTTP/2 connections the watches use
	AckP50MS        float64 `json:"ack_p50_ms"`
	AckP99MS        float64 `json:"ack_p99_ms"`
	Errors          int64   `json:"errors"`
	SendBehindMaxMS float64 `json:"send_behind_max_ms"`
	SetupS          float64 `json:"setup_s"`
	LastDeliveryS   float64 `json:"last_delivery_s"` // first send to the last delivery
	DrainTimedOut   bool    `json:"drain_timed_out"`
	FirstCloseError string  `json:"first_close_error,omitempty"`
}

// fanout is the fan-out phase's state.
type fanout struct {
	o        *options
	ns       string
	nodeIdx  map[string]int
	all      *writers
	ws       []*watcher
	readyWG  sync.WaitGroup
	doneWG   sync.WaitGroup
	runWG    sync.WaitGroup
	target   *atomic.Int64
	setupDur time.Duration
	apiPort  int
	connsPre int // client connections to the API server before the watches
	conns    int // connections the watches added
}

// runFanout opens W watches over 4 clientsets, waits until each has seen a
// warm-up update, sends fanout-rate updates/s for fanout-duration and waits
// (up to 120 s) until every watcher has every update.
func runFanout(ctx context.Context, base *rest.Config, admin kubernetes.Interface, o *options,
	ns string, nodeIdx map[string]int, all *writers, apiPort int) (fanoutReport, error) {
	f := &fanout{o: o, ns: ns, nodeIdx: nodeIdx, all: all, target: newTarget(), apiPort: apiPort}
	wctx, stop := context.WithCancel(ctx)
	defer func() {
		stop()
		waitDone(&f.runWG, 10*time.Second, nil)
	}()
	setupStart := time.Now()
	warmSeq, err := f.open(wctx, base, admin)
	if err != nil {
		return fanoutReport{}, err
	}
	if err := f.warmUp(ctx, warmSeq); err != nil {
		return fanoutReport{}, err
	}
	f.setupDur = time.Since(setupStart)
	res, err := all.paced(ctx, o.fanoutRate, seconds(o.fanoutDuration))
	if err != nil {
		return fanoutReport{}, err
	}
	if res.acked == 0 {
		return fanoutReport{}, fmt.Errorf("fan-out: no update acknowledged (%d errors): %v", res.errors, res.firstErr)
	}
	timedOut := f.drain(ctx, res.acked)
	if ctx.Err() != nil {
		return fanoutReport{}, context.Cause(ctx)
	}
	stop()
	waitDone(&f.runWG, 10*time.Second, nil)
	return f.report(res, timedOut), nil
}

// open starts the watchers from the namespace's current resourceVersion and
// returns the seq reserved for the warm-up update; what follows it is the
// phase's.
func (f *fanout) open(ctx context.Context, base *rest.Config, admin kubernetes.Interface) (uint64, error) {
	list, err := admin.CoreV1().ConfigMaps(f.ns).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return 0, fmt.Errorf("list ConfigMaps: %w", err)
	}
	f.connsPre = connsTo(f.apiPort)
	var css []kubernetes.Interface
	for range fanoutChannels {
		cs, err := newClientset(base)
		if err != nil {
			return 0, err
		}
		css = append(css, cs)
	}
	warmSeq := f.all.seq.Add(1)
	for i := range f.o.watchers {
		wt := &watcher{warmSeq: warmSeq, ready: f.readyWG.Done,
			tr: newTracker(warmSeq+1, len(f.nodeIdx), f.target, f.doneWG.Done)}
		f.readyWG.Add(1)
		f.doneWG.Add(1)
		f.runWG.Add(1)
		f.ws = append(f.ws, wt)
		go func() {
			defer f.runWG.Done()
			wt.run(ctx, css[i%fanoutChannels], f.ns, list.ResourceVersion, f.nodeIdx)
		}()
	}
	return warmSeq, nil
}

// warmUp sends the warm-up update and waits until every watcher has it, so
// that every watch is established and delivering before the measured sends.
func (f *fanout) warmUp(ctx context.Context, warmSeq uint64) error {
	if err := f.all.warmUp(ctx, warmSeq); err != nil {
		return fmt.Errorf("fan-out warm-up update: %w", err)
	}
	const limit = 120 * time.Second
	if !waitDone(&f.readyWG, limit, ctx.Done()) {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return fmt.Errorf("fan-out: %d of %d watchers did not receive the warm-up update within %v",
			f.notReady(), len(f.ws), limit)
	}
	for i, wt := range f.ws {
		if wt.openErr != nil {
			return fmt.Errorf("fan-out: watcher %d: open watch: %w", i, wt.openErr)
		}
	}
	f.conns = connsTo(f.apiPort) - f.connsPre
	return nil
}

func (f *fanout) notReady() int {
	n := 0
	for _, wt := range f.ws {
		if !wt.isReady.Load() {
			n++
		}
	}
	return n
}

// drain sets the target to the acknowledged updates and waits until every
// watcher has them all or its watch ended; it reports a timeout.
func (f *fanout) drain(ctx context.Context, acked int64) bool {
	f.target.Store(acked)
	for _, wt := range f.ws {
		wt.tr.check()
	}
	return !waitDone(&f.doneWG, 120*time.Second, ctx.Done())
}

func (f *fanout) report(res pacedResult, timedOut bool) fanoutReport {
	r := fanoutReport{Watchers: len(f.ws), Rate: f.o.fanoutRate, DurationS: f.o.fanoutDuration,
		Scheduled: res.scheduled, Events: res.acked, Expected: res.acked * int64(len(f.ws)),
		AckP50MS: res.ack.quantileMS(0.50), AckP99MS: res.ack.quantileMS(0.99), Errors: res.errors,
		SendBehindMaxMS: ms(res.behindMax), SetupS: round(f.setupDur.Seconds(), 3), DrainTimedOut: timedOut,
		Connections: f.conns}
	var lat hist
	var lastAt int64
	for _, wt := range f.ws {
		lat.merge(&wt.tr.lat)
		r.Received += wt.tr.got.Load()
		r.Duplicates += wt.tr.dups.Load()
		lastAt = max(lastAt, wt.tr.lastAt.Load())
		if err := wt.closedBy(); err != nil {
			r.WatchesClosed++
			if r.FirstCloseError == "" {
				r.FirstCloseError = err.Error()
			}
		}
	}
	r.Missing = max(0, r.Expected-r.Received)
	r.DeliveryP50MS, r.DeliveryP99MS, r.DeliveryMaxMS = lat.quantileMS(0.50), lat.quantileMS(0.99), lat.maxMS()
	if span := time.Unix(0, lastAt).Sub(res.start); lastAt > 0 && span > 0 {
		r.LastDeliveryS = round(span.Seconds(), 3)
		r.DeliveriesPerS = round(float64(r.Received)/span.Seconds(), 1)
	}
	return r
}
