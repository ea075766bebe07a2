package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// runPhases runs throughput, paced and fan-out in turn, booking resources
// per phase and logging each phase's headline figures.
func (r *report) runPhases(ctx context.Context, m *meter, base *rest.Config, admin kubernetes.Interface,
	o *options, nodeIdx map[string]int, all *writers, apiPort int) error {
	var err error
	m.begin("throughput")
	if r.Throughput, err = runThroughput(ctx, all, o); err != nil {
		return err
	}
	t := r.Throughput
	logf("throughput: %.0f updates/s, ack p50 %.2f ms p99 %.2f ms, %d errors",
		t.UpdatesPerS, t.AckP50MS, t.AckP99MS, t.Errors)

	m.begin("paced_setup")
	if r.Paced, err = runPaced(ctx, base, o, namespace, nodeIdx, all, m); err != nil {
		return err
	}
	p := r.Paced
	logf("paced: %.0f/s offered, %.0f/s achieved, ack p99 %.2f ms, informer p50 %.2f ms p99 %.2f ms, %d missing",
		p.OfferedRate, p.AchievedPerS, p.AckP99MS, p.ConsumerP50MS, p.ConsumerP99MS, p.Missing)

	m.begin("fanout")
	logf("fan-out: opening %d watches", o.watchers)
	if r.Fanout, err = runFanout(ctx, base, admin, o, namespace, nodeIdx, all, apiPort); err != nil {
		return err
	}
	f := r.Fanout
	logf("fan-out: %d events x %d watchers (%d connections), %d missing, delivery p50 %.1f ms p99 %.1f ms, %.0f deliveries/s, %d watches closed",
		f.Events, f.Watchers, f.Connections, f.Missing, f.DeliveryP50MS, f.DeliveryP99MS, f.DeliveriesPerS, f.WatchesClosed)
	return nil
}

func makeNodes(n int) ([]*node, map[string]int) {
	nodes := make([]*node, n)
	idx := make(map[string]int, n)
	for i := range n {
		nodes[i] = newNode(i)
		idx[cmName(nodes[i].name)] = i
	}
	return nodes, idx
}

// writeReport writes the JSON and then removes etcd's data directory (the
// only large thing under workdir; the logs and certificates stay).
func writeReport(o *options, r *report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(o.jsonOut, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return os.RemoveAll(filepath.Join(o.workdir, "etcd-data"))
}

// printFailure prints the one line that says what failed and, when a server
// is to blame, the end of its log.
func printFailure(err error) {
	fmt.Fprintf(os.Stderr, "clusterd-kube-peer: %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
	var se *serverError
	if !errors.As(err, &se) {
		return
	}
	fmt.Fprintf(os.Stderr, "clusterd-kube-peer: last lines of %s:\n", se.p.logPath)
	for _, line := range tail(se.p.logPath, 15) {
		if len(line) > 400 {
			line = line[:400] + "..."
		}
		fmt.Fprintf(os.Stderr, "  %s\n", line)
	}
}

func clientGoVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "k8s.io/client-go" {
				return d.Version
			}
		}
	}
	return "unknown"
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kube-peer: "+format+"\n", args...)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func ms(d time.Duration) float64 { return round(d.Seconds()*1000, 3) }
