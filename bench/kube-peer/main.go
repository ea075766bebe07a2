// Command clusterd-kube-peer measures the Kubernetes API server as a fault
// transport, the way Huawei MindCluster uses it: each node's device plugin
// rewrites its ConfigMap mindx-dl-deviceinfo-<node> (the node's fault list as
// JSON) with Update, and the controller follows the ConfigMaps through a
// client-go informer. It starts a real etcd (fsync on) and kube-apiserver on
// loopback and measures update throughput, fault -> informer latency at a
// paced rate, and fan-out to many plain watches, then writes one JSON report:
// the Kubernetes side of clusterd's benchmark.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const namespace = "mindx-dl"

type options struct {
	etcd, apiserver, workdir, jsonOut, contentType string
	nodes, writers, watchers                       int
	duration, rate, fanoutRate, fanoutDuration     float64
	short                                          bool
}

func parseFlags(args []string) (*options, error) {
	fs := flag.NewFlagSet("clusterd-kube-peer", flag.ContinueOnError)
	o := &options{}
	fs.StringVar(&o.etcd, "etcd", "", "etcd binary (required)")
	fs.StringVar(&o.apiserver, "kube-apiserver", "", "kube-apiserver binary (required)")
	fs.StringVar(&o.workdir, "workdir", "", "directory for etcd's data, certificates and server logs (required)")
	fs.StringVar(&o.jsonOut, "json", "", "where to write the JSON report (required)")
	fs.IntVar(&o.nodes, "nodes", 1000, "simulated nodes, one ConfigMap each")
	fs.IntVar(&o.writers, "writers", 16, "writer goroutines, each with its own connection")
	fs.Float64Var(&o.duration, "duration", 10, "seconds of the throughput and the paced phase")
	fs.Float64Var(&o.rate, "rate", 10000, "paced phase: updates per second offered")
	fs.IntVar(&o.watchers, "watchers", 1000, "fan-out phase: watches")
	fs.Float64Var(&o.fanoutRate, "fanout-rate", 1000, "fan-out phase: updates per second")
	fs.Float64Var(&o.fanoutDuration, "fanout-duration", 10, "fan-out phase: seconds of sending")
	fs.StringVar(&o.contentType, "content-type", "json", "client wire format: json (client-go's default, MindCluster's) or protobuf")
	fs.BoolVar(&o.short, "short", false, "smaller defaults for the flags not given: 100 nodes, 2 s, 2000/s, 20 watchers, 200/s for 1.5 s")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.short {
		o.applyShort(fs)
	}
	return o, o.validate()
}

// applyShort lowers the defaults of the flags not given on the command line.
func (o *options) applyShort(fs *flag.FlagSet) {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	short := map[string]func(){
		"nodes": func() { o.nodes = 100 }, "duration": func() { o.duration = 2 },
		"rate": func() { o.rate = 2000 }, "watchers": func() { o.watchers = 20 },
		"fanout-rate": func() { o.fanoutRate = 200 }, "fanout-duration": func() { o.fanoutDuration = 1.5 },
	}
	for name, set := range short {
		if !given[name] {
			set()
		}
	}
}

func (o *options) validate() error {
	for flagName, v := range map[string]string{"etcd": o.etcd, "kube-apiserver": o.apiserver, "workdir": o.workdir, "json": o.jsonOut} {
		if v == "" {
			return fmt.Errorf("--%s is required", flagName)
		}
	}
	switch {
	case o.nodes < 1 || o.writers < 1 || o.watchers < 1:
		return errors.New("--nodes, --writers and --watchers must be at least 1")
	case o.writers > o.nodes:
		return fmt.Errorf("--writers %d exceeds --nodes %d: each writer owns at least one node", o.writers, o.nodes)
	case o.duration <= 0 || o.rate <= 0 || o.fanoutRate <= 0 || o.fanoutDuration <= 0:
		return errors.New("--duration, --rate, --fanout-rate and --fanout-duration must be positive")
	case o.contentType != "json" && o.contentType != "protobuf":
		return fmt.Errorf("--content-type %q: want json or protobuf", o.contentType)
	}
	var err error
	o.workdir, err = filepath.Abs(o.workdir)
	return err
}

type report struct {
	KubeAPIServerVersion string           `json:"kube_apiserver_version"`
	EtcdVersion          string           `json:"etcd_version"`
	ClientGoVersion      string           `json:"client_go_version"`
	ContentType          string           `json:"content_type"`
	Nodes                int              `json:"nodes"`
	Writers              int              `json:"writers"`
	PayloadBytes         int              `json:"payload_bytes"`
	ObjectBytes          int              `json:"object_bytes"`
	Short                bool             `json:"short"`
	Throughput           throughputReport `json:"throughput"`
	Paced                pacedReport      `json:"paced"`
	Fanout               fanoutReport     `json:"fanout"`
	Resources            resourcesReport  `json:"resources"`
	WallS                float64          `json:"wall_s"`
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "clusterd-kube-peer: %v\n", err)
		os.Exit(1)
	}
	os.Exit(runMain(o))
}

// runMain runs the benchmark, stops the servers whatever happened and
// writes the report; it returns the exit status.
func runMain(o *options) int {
	start := time.Now()
	ctx, fail := context.WithCancelCause(context.Background())
	defer fail(nil)
	sup := newSupervisor(fail)
	defer handleSignals(fail, sup)()
	r, err := run(ctx, sup, o)
	if cause := context.Cause(ctx); err != nil && cause != nil {
		err = cause // a server's exit or a signal is what made the run fail
	}
	logf("stopping kube-apiserver and etcd")
	sup.stopAll(10 * time.Second)
	if err == nil {
		r.WallS = round(time.Since(start).Seconds(), 1)
		err = writeReport(o, r)
	}
	if err != nil {
		printFailure(err)
		return 1
	}
	logf("wrote %s in %.1f s", o.jsonOut, time.Since(start).Seconds())
	return 0
}

// handleSignals turns SIGINT/SIGTERM into a failed run (which stops the
// servers on its way out); a second signal, or a run that has not unwound 20
// s later, stops them and exits at once. The returned func stops handling.
func handleSignals(fail context.CancelCauseFunc, sup *supervisor) func() {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	quit := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			fail(fmt.Errorf("interrupted by %v", sig))
		case <-quit:
			return
		}
		t := time.NewTimer(20 * time.Second)
		select {
		case <-ch:
		case <-t.C:
		case <-quit:
			return
		}
		sup.stopAll(2 * time.Second)
		fmt.Fprintln(os.Stderr, "clusterd-kube-peer: interrupted; servers stopped")
		os.Exit(1)
	}()
	return func() {
		signal.Stop(ch)
		close(quit)
	}
}

func run(ctx context.Context, sup *supervisor, o *options) (*report, error) {
	if err := os.MkdirAll(o.workdir, 0o755); err != nil {
		return nil, err
	}
	logf("starting etcd and kube-apiserver under %s", o.workdir)
	c, err := startCluster(ctx, sup, o)
	if err != nil {
		return nil, err
	}
	r, err := c.measure(ctx, o)
	if err != nil {
		var se *serverError
		if !errors.As(err, &se) {
			err = &serverError{c.apiserver, err} // its log is the place to look
		}
	}
	return r, err
}

// measure runs the three phases against the started cluster.
func (c *cluster) measure(ctx context.Context, o *options) (*report, error) {
	r := &report{EtcdVersion: c.etcdVersion, ClientGoVersion: clientGoVersion(), ContentType: o.contentType,
		Nodes: o.nodes, Writers: o.writers, Short: o.short}
	var err error
	if r.PayloadBytes, r.ObjectBytes, err = payloadSizes(namespace); err != nil {
		return nil, err
	}
	base := c.restConfig(o.contentType)
	admin, err := newClientset(base)
	if err != nil {
		return nil, err
	}
	ver, err := admin.Discovery().ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("server version: %w", err)
	}
	r.KubeAPIServerVersion = ver.GitVersion
	logf("kube-apiserver %s and etcd %s ready", r.KubeAPIServerVersion, r.EtcdVersion)

	m := newMeter(map[string]int{"apiserver": c.apiserver.cmd.Process.Pid,
		"etcd": c.etcd.cmd.Process.Pid, "bench": os.Getpid()}, c.walFsyncs)
	mctx, mstop := context.WithCancel(ctx)
	defer mstop()
	go m.sample(mctx, 200*time.Millisecond)
	m.begin("setup")

	all, nodeIdx, err := createNodes(ctx, base, admin, o)
	if err != nil {
		return nil, err
	}
	logf("created %d ConfigMaps (%d-byte DeviceInfoCfg)", o.nodes, r.PayloadBytes)

	if err := r.runPhases(ctx, m, base, admin, o, nodeIdx, all, c.apiPort); err != nil {
		return nil, err
	}
	m.begin("")
	r.Resources = m.report()
	return r, nil
}

// createNodes creates the namespace and one ConfigMap per node, and returns
// the writers that own the nodes and the node index of each ConfigMap name.
func createNodes(ctx context.Context, base *rest.Config, admin kubernetes.Interface, o *options) (*writers, map[string]int, error) {
	nodes, nodeIdx := makeNodes(o.nodes)
	if _, err := admin.CoreV1().Namespaces().Create(ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return nil, nil, fmt.Errorf("create namespace: %w", err)
	}
	all, err := newWriters(base, namespace, nodes, o.writers)
	if err != nil {
		return nil, nil, err
	}
	return all, nodeIdx, all.createAll(ctx)
}
