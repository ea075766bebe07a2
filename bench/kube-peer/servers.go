package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cluster is the running etcd and kube-apiserver.
type cluster struct {
	etcd, apiserver *proc
	etcdURL         string
	apiURL          string
	apiPort         int
	pki             *pki
	etcdVersion     string
}

// startCluster starts etcd and kube-apiserver on free loopback ports under
// workdir and returns once both answer their health checks.
func startCluster(ctx context.Context, sup *supervisor, o *options) (*cluster, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	c := &cluster{etcdURL: "http://127.0.0.1:" + strconv.Itoa(ports[0]),
		apiURL: "https://127.0.0.1:" + strconv.Itoa(ports[2]), apiPort: ports[2]}
	if err := c.startEtcd(ctx, sup, o, ports[1]); err != nil {
		return nil, err
	}
	if c.pki, err = makePKI(filepath.Join(o.workdir, "pki")); err != nil {
		return nil, fmt.Errorf("generate certificates: %w", err)
	}
	return c, c.startAPIServer(ctx, sup, o, ports[2])
}

func (c *cluster) startEtcd(ctx context.Context, sup *supervisor, o *options, peerPort int) error {
	dataDir := filepath.Join(o.workdir, "etcd-data")
	// A data dir left by an earlier run names other peer URLs; start afresh.
	if err := os.RemoveAll(dataDir); err != nil {
		return err
	}
	peer := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	// fsync stays on (no --unsafe-no-fsync): durability like clusterd's
	// fsync'ed group commits is the point of the comparison.
	var err error
	c.etcd, err = sup.start("etcd", filepath.Join(o.workdir, "etcd.log"), o.etcd,
		"--name", "kube-peer", "--data-dir", dataDir,
		"--listen-client-urls", c.etcdURL, "--advertise-client-urls", c.etcdURL,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "kube-peer="+peer, "--initial-cluster-state", "new")
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: 2 * time.Second}
	err = waitHealthy(ctx, c.etcd, 30*time.Second, func() error {
		var h struct{ Health string }
		if err := getJSON(client, c.etcdURL+"/health", "", &h); err != nil {
			return err
		}
		if h.Health != "true" {
			return fmt.Errorf("/health says health=%q", h.Health)
		}
		return nil
	})
	if err != nil {
		return err
	}
	var v struct{ Etcdserver string }
	if err := getJSON(client, c.etcdURL+"/version", "", &v); err != nil {
		return &serverError{c.etcd, err}
	}
	c.etcdVersion = v.Etcdserver
	return nil
}

func (c *cluster) startAPIServer(ctx context.Context, sup *supervisor, o *options, port int) error {
	p := c.pki
	var err error
	c.apiserver, err = sup.start("kube-apiserver", filepath.Join(o.workdir, "kube-apiserver.log"), o.apiserver,
		"--etcd-servers", c.etcdURL, "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(port), "--cert-dir", filepath.Dir(p.caFile),
		"--tls-cert-file", p.certFile, "--tls-private-key-file", p.keyFile,
		"--client-ca-file", p.caFile, "--token-auth-file", p.tokensFile,
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", p.saKeyFile, "--service-account-signing-key-file", p.saKeyFile,
		"--service-cluster-ip-range", "10.0.0.0/24", "--endpoint-reconciler-type", "none",
		"--authorization-mode", "Node,RBAC", "--enable-priority-and-fairness=false",
		"--disable-admission-plugins", "ServiceAccount",
		// Without APF these two limits are what refuses load with 429s; raise
		// them so that the measurement finds the server's capacity instead.
		"--max-requests-inflight", "2000", "--max-mutating-requests-inflight", "1000")
	if err != nil {
		return err
	}
	client, err := c.httpsClient()
	if err != nil {
		return err
	}
	return waitHealthy(ctx, c.apiserver, 90*time.Second, func() error {
		return getJSON(client, c.apiURL+"/readyz", p.token, nil)
	})
}

func (c *cluster) httpsClient() (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.pki.caPEM) {
		return nil, errors.New("CA certificate does not parse")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	return &http.Client{Timeout: 2 * time.Second, Transport: tr}, nil
}

// waitHealthy polls check every 100 ms until it passes, p exits, ctx ends or
// limit passes.
func waitHealthy(ctx context.Context, p *proc, limit time.Duration, check func() error) error {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-p.done:
			return &serverError{p, fmt.Errorf("exited before it was healthy (%v)", p.waitErr)}
		case <-deadline.C:
			return &serverError{p, fmt.Errorf("not healthy after %v: %v", limit, err)}
		case <-tick.C:
		}
	}
}

// getJSON GETs url (with a bearer token when given), fails on a non-200 and
// decodes the body into out unless out is nil.
func getJSON(client *http.Client, url, token string, out any) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %.200q", url, resp.Status, body)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(body, out)
}

var metricsClient = &http.Client{Timeout: 5 * time.Second}

// walFsyncs reads etcd's WAL fsync count and total seconds from /metrics.
func (c *cluster) walFsyncs() (count, secs float64, err error) {
	resp, err := metricsClient.Get(c.etcdURL + "/metrics")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return 0, 0, err
	}
	found := 0
	for line := range strings.SplitSeq(string(body), "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		switch name {
		case "etcd_disk_wal_fsync_duration_seconds_count":
			count, err = strconv.ParseFloat(value, 64)
		case "etcd_disk_wal_fsync_duration_seconds_sum":
			secs, err = strconv.ParseFloat(value, 64)
		default:
			continue
		}
		if err != nil {
			return 0, 0, err
		}
		found++
	}
	if found != 2 {
		return 0, 0, errors.New("etcd /metrics: no etcd_disk_wal_fsync_duration_seconds")
	}
	return count, secs, nil
}
