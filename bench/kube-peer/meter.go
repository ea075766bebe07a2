package main

import (
	"context"
	"sync"
	"time"
)

// meter records CPU seconds per phase and the peak RSS per phase of each
// watched process (kube-apiserver, etcd and this program, the client side,
// which shares the machine's cores with them).
type meter struct {
	mu      sync.Mutex
	etcd    func() (fsyncs, fsyncS float64, err error) // etcd's WAL fsync counters
	fsyncs  [2]float64                                 // the counters when the phase began
	fsync   map[string]float64                         // phase -> WAL fsyncs
	fsyncMS map[string]float64                         // phase -> mean fsync ms
	pids    map[string]int
	phase   string
	cpuAt   map[string]float64            // CPU seconds when the phase began
	cpu     map[string]map[string]float64 // process -> phase -> CPU seconds
	rss     map[string]map[string]float64 // process -> phase -> peak RSS MiB
	rssMax  map[string]float64
}

func newMeter(pids map[string]int, etcd func() (float64, float64, error)) *meter {
	m := &meter{pids: pids, etcd: etcd, cpuAt: map[string]float64{}, cpu: map[string]map[string]float64{},
		rss: map[string]map[string]float64{}, rssMax: map[string]float64{},
		fsync: map[string]float64{}, fsyncMS: map[string]float64{}}
	for name := range pids {
		m.cpu[name], m.rss[name] = map[string]float64{}, map[string]float64{}
	}
	return m
}

// begin ends the current phase and starts the next. The first call books
// what each process used before it under "startup".
func (m *meter) begin(phase string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	last := m.phase
	if last == "" {
		last = "startup"
	}
	m.bookFsyncs(last)
	for name, pid := range m.pids {
		cpu, rss, err := procStat(pid)
		if err != nil {
			continue
		}
		m.cpu[name][last] = round(cpu-m.cpuAt[name], 3)
		m.cpuAt[name] = cpu
		m.noteRSS(name, last, rss)
		if phase != "" {
			m.noteRSS(name, phase, rss)
		}
	}
	m.phase = phase
}

// bookFsyncs books etcd's WAL fsyncs since the last call under phase: how
// many (a group commit is one) and how long one took on average.
func (m *meter) bookFsyncs(phase string) {
	n, secs, err := m.etcd()
	if err != nil {
		return
	}
	dn, ds := n-m.fsyncs[0], secs-m.fsyncs[1]
	m.fsyncs = [2]float64{n, secs}
	m.fsync[phase] = dn
	if dn > 0 {
		m.fsyncMS[phase] = round(ds/dn*1000, 3)
	}
}

func (m *meter) noteRSS(name, phase string, rss float64) {
	m.rss[name][phase] = round(max(m.rss[name][phase], rss), 1)
	m.rssMax[name] = round(max(m.rssMax[name], rss), 1)
}

// sample runs until ctx ends, catching RSS peaks between phase boundaries.
func (m *meter) sample(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.mu.Lock()
		for name, pid := range m.pids {
			if _, rss, err := procStat(pid); err == nil && m.phase != "" {
				m.noteRSS(name, m.phase, rss)
			}
		}
		m.mu.Unlock()
	}
}

type resourcesReport struct {
	APIServerCPU    map[string]float64 `json:"apiserver_cpu_s"`
	APIServerRSSMax float64            `json:"apiserver_rss_mib_max"`
	EtcdCPU         map[string]float64 `json:"etcd_cpu_s"`
	EtcdRSSMax      float64            `json:"etcd_rss_mib_max"`
	APIServerRSS    map[string]float64 `json:"apiserver_rss_mib"`
	EtcdRSS         map[string]float64 `json:"etcd_rss_mib"`
	BenchCPU        map[string]float64 `json:"bench_cpu_s"`
	BenchRSSMax     float64            `json:"bench_rss_mib_max"`
	EtcdFsyncs      map[string]float64 `json:"etcd_wal_fsyncs"`
	EtcdFsyncMeanMS map[string]float64 `json:"etcd_wal_fsync_mean_ms"`
}

func (m *meter) report() resourcesReport {
	m.mu.Lock()
	defer m.mu.Unlock()
	return resourcesReport{
		APIServerCPU: m.cpu["apiserver"], APIServerRSSMax: m.rssMax["apiserver"],
		EtcdCPU: m.cpu["etcd"], EtcdRSSMax: m.rssMax["etcd"],
		APIServerRSS: m.rss["apiserver"], EtcdRSS: m.rss["etcd"],
		BenchCPU: m.cpu["bench"], BenchRSSMax: m.rssMax["bench"],
		EtcdFsyncs: m.fsync, EtcdFsyncMeanMS: m.fsyncMS,
	}
}
