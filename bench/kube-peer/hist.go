package main

import (
	"math"
	"math/bits"
	"time"
)

// hist is a log-bucketed latency histogram in microseconds: values below 128
// µs are exact, above that each power of two is split into 128 buckets, so a
// bucket is at most 0.8 % wide. It keeps no samples, which matters with 1,000
// watchers each recording every event.
type hist struct {
	counts [histBuckets]uint32
	n      uint64
	maxUS  uint64
}

const (
	histSubBits = 7
	histSub     = 1 << histSubBits
	histMaxUS   = 1<<36 - 1 // about 19 hours; longer latencies are clamped
	histBuckets = histSub*(36-histSubBits) + histSub
)

func histBucket(us uint64) int {
	if us < histSub {
		return int(us)
	}
	e := bits.Len64(us) - histSubBits - 1 // us>>e lies in [128, 256)
	return histSub*e + int(us>>e)
}

// bucketMid is the middle of bucket i's range, in microseconds.
func bucketMid(i int) float64 {
	if i < histSub {
		return float64(i)
	}
	e := i/histSub - 1
	low := uint64(i%histSub+histSub) << e
	return float64(low) + float64(uint64(1)<<e-1)/2
}

func (h *hist) record(d time.Duration) {
	us := uint64(0)
	if d > 0 {
		us = min(uint64(d/time.Microsecond), histMaxUS)
	}
	h.counts[histBucket(us)]++
	h.n++
	h.maxUS = max(h.maxUS, us)
}

func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.maxUS = max(h.maxUS, o.maxUS)
}

// quantileMS returns the q-quantile in milliseconds (0 when empty).
func (h *hist) quantileMS(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := max(uint64(math.Ceil(q*float64(h.n))), 1)
	var seen uint64
	for i, c := range h.counts {
		seen += uint64(c)
		if seen >= rank {
			return round(bucketMid(i)/1000, 3)
		}
	}
	return round(float64(h.maxUS)/1000, 3)
}

func (h *hist) maxMS() float64 { return round(float64(h.maxUS)/1000, 3) }

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}
