package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

type throughputReport struct {
	DurationS   float64 `json:"duration_s"`
	Updates     int64   `json:"updates"`
	UpdatesPerS float64 `json:"updates_per_s"`
	AckP50MS    float64 `json:"ack_p50_ms"`
	AckP99MS    float64 `json:"ack_p99_ms"`
	AckMaxMS    float64 `json:"ack_max_ms"`
	Errors      int64   `json:"errors"`
	FirstError  string  `json:"first_error,omitempty"`
}

// runThroughput has the P writers update back to back (closed loop).
func runThroughput(ctx context.Context, all *writers, o *options) (throughputReport, error) {
	st, elapsed, err := all.closedLoop(ctx, seconds(o.duration))
	if err != nil {
		return throughputReport{}, err
	}
	if st.acked == 0 {
		return throughputReport{}, fmt.Errorf("throughput: no update acknowledged (%d errors): %v", st.errors, st.firstErr)
	}
	return throughputReport{DurationS: round(elapsed.Seconds(), 3), Updates: st.acked,
		UpdatesPerS: round(float64(st.acked)/elapsed.Seconds(), 1),
		AckP50MS:    st.ack.quantileMS(0.50), AckP99MS: st.ack.quantileMS(0.99), AckMaxMS: st.ack.maxMS(),
		Errors: st.errors, FirstError: errString(st.firstErr)}, nil
}

type pacedReport struct {
	OfferedRate      float64 `json:"offered_rate"`
	AchievedPerS     float64 `json:"achieved_per_s"`
	AckP50MS         float64 `json:"ack_p50_ms"`
	AckP99MS         float64 `json:"ack_p99_ms"`
	ConsumerP50MS    float64 `json:"consumer_p50_ms"`
	ConsumerP99MS    float64 `json:"consumer_p99_ms"`
	Sent             int64   `json:"sent"`
	Received         int64   `json:"received"`
	Missing          int64   `json:"missing"`
	Errors           int64   `json:"errors"`
	DurationS        float64 `json:"duration_s"`
	Scheduled        int64   `json:"scheduled"`
	ElapsedS         float64 `json:"elapsed_s"`
	SendBehindMaxMS  float64 `json:"send_behind_max_ms"`
	AckMaxMS         float64 `json:"ack_max_ms"`
	ConsumerMaxMS    float64 `json:"consumer_max_ms"`
	Duplicates       int64   `json:"duplicates"`
	DecodeErrors     int64   `json:"decode_errors"`
	ConsumerTimedOut bool    `json:"consumer_timed_out"`
	FirstError       string  `json:"first_error,omitempty"`
}

// consumer is the controller side of MindCluster: a SharedInformer on the
// namespace's ConfigMaps that decodes each DeviceInfoCfg it is handed.
type consumer struct {
	factory    informers.SharedInformerFactory
	stopCh     chan struct{}
	tr         *tracker
	target     *atomic.Int64
	done       chan struct{}
	decodeErrs atomic.Int64
}

// startConsumer starts the informer and returns once it has synced; updates
// stamped from base on are the phase's.
func startConsumer(ctx context.Context, base *rest.Config, ns string, nodeIdx map[string]int, seqBase uint64) (*consumer, error) {
	cs, err := newClientset(base)
	if err != nil {
		return nil, err
	}
	c := &consumer{stopCh: make(chan struct{}), target: newTarget(), done: make(chan struct{})}
	c.tr = newTracker(seqBase, len(nodeIdx), c.target, func() { close(c.done) })
	c.factory = informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := c.factory.Core().V1().ConfigMaps().Informer()
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { c.handle(obj, nodeIdx) }})
	if err != nil {
		return nil, err
	}
	c.factory.Start(c.stopCh)
	const limit = 60 * time.Second
	syncCtx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced, reg.HasSynced) {
		c.stop()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, fmt.Errorf("paced: ConfigMap informer not synced within %v", limit)
	}
	return c, nil
}

func (c *consumer) handle(obj any, nodeIdx map[string]int) {
	now := time.Now()
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	info, err := decodeInfo(cm)
	if err != nil {
		c.decodeErrs.Add(1)
		return
	}
	idx, ok := nodeIdx[cm.Name]
	if !ok {
		idx = -1
	}
	c.tr.observe(idx, info.Seq, info.UpdateTime, now)
}

// stop ends the informer and waits for its goroutines, after which the
// tracker can be read without racing the handler.
func (c *consumer) stop() {
	close(c.stopCh)
	c.factory.Shutdown()
}

// wait waits until the consumer has acked updates, ctx ends or limit
// passes; it reports a timeout.
func (c *consumer) wait(ctx context.Context, acked int64, limit time.Duration) bool {
	c.target.Store(acked)
	c.tr.check()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-c.done:
		return false
	case <-ctx.Done():
	case <-t.C:
	}
	return true
}

// runPaced sends at the offered rate while the informer consumes, then
// waits (up to 60 s) for the consumer to have every acknowledged update.
func runPaced(ctx context.Context, base *rest.Config, o *options, ns string, nodeIdx map[string]int,
	all *writers, m *meter) (pacedReport, error) {
	c, err := startConsumer(ctx, base, ns, nodeIdx, all.seq.Load()+1)
	if err != nil {
		return pacedReport{}, err
	}
	m.begin("paced")
	res, err := all.paced(ctx, o.rate, seconds(o.duration))
	if err != nil {
		c.stop()
		return pacedReport{}, err
	}
	timedOut := c.wait(ctx, res.acked, 60*time.Second)
	c.stop()
	if ctx.Err() != nil {
		return pacedReport{}, context.Cause(ctx)
	}
	if res.acked == 0 {
		return pacedReport{}, fmt.Errorf("paced: no update acknowledged (%d errors): %v", res.errors, res.firstErr)
	}
	return pacedReportOf(o, res, c, timedOut), nil
}

func pacedReportOf(o *options, res pacedResult, c *consumer, timedOut bool) pacedReport {
	got := c.tr.got.Load()
	return pacedReport{OfferedRate: o.rate, DurationS: o.duration,
		AchievedPerS: round(float64(res.acked)/res.elapsed.Seconds(), 1),
		AckP50MS:     res.ack.quantileMS(0.50), AckP99MS: res.ack.quantileMS(0.99), AckMaxMS: res.ack.maxMS(),
		ConsumerP50MS: c.tr.lat.quantileMS(0.50), ConsumerP99MS: c.tr.lat.quantileMS(0.99),
		ConsumerMaxMS: c.tr.lat.maxMS(), Sent: res.acked, Received: got, Missing: max(0, res.acked-got),
		Errors: res.errors, Scheduled: res.scheduled, ElapsedS: round(res.elapsed.Seconds(), 3),
		SendBehindMaxMS: ms(res.behindMax), Duplicates: c.tr.dups.Load(), DecodeErrors: c.decodeErrs.Load(),
		ConsumerTimedOut: timedOut, FirstError: errString(res.firstErr)}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
