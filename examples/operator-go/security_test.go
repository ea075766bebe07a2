package main

// The security flags, and real TLS, mutual TLS and bearer tokens against an
// in-process TLS server with the throw-away PKI of test/security/make_certs.sh.
// Run: ./generate.sh && go test ./...

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	clusterdv1 "clusterd.dev/examples/operator/gen/clusterd/v1"
)

func TestValidateNamesTheFlag(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	for _, c := range []struct {
		s    security
		want string // "" = valid
	}{
		{security{}, ""},
		{security{caFile: file}, ""},
		{security{caFile: file, certFile: file, keyFile: file, tokenFile: file, serverName: "n"}, ""},
		{security{token: "t"}, "-token: a bearer token is only sent over TLS"},
		{security{tokenFile: file}, "-token-file: a bearer token is only sent over TLS"},
		{security{caFile: file, certFile: file}, "-cert: needs -key"},
		{security{caFile: file, keyFile: file}, "-key: needs -cert"},
		{security{caFile: file, token: "t", tokenFile: file}, "-token and -token-file"},
		{security{serverName: "n"}, "-server-name: needs TLS"},
		{security{caFile: missing}, "-ca: cannot read " + missing},
		{security{caFile: file, tokenFile: missing}, "-token-file: cannot read " + missing},
	} {
		err := c.s.validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.s, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: got %v, want %q", c.s, err, c.want)
		}
	}
}

func TestEnvironmentIsTheFallback(t *testing.T) {
	env := map[string]string{
		"CLUSTERD_CA": "/env/ca", "CLUSTERD_CERT": "/env/cert", "CLUSTERD_KEY": "/env/key",
		"CLUSTERD_TOKEN": "env-token", "CLUSTERD_TOKEN_FILE": "/env/token", "CLUSTERD_SERVER_NAME": "env-name",
	}
	getenv := func(k string) string { return env[k] }

	s := security{caFile: "/flag/ca"}
	s.applyEnv(getenv)
	if s.caFile != "/flag/ca" || s.certFile != "/env/cert" || s.keyFile != "/env/key" || s.serverName != "env-name" {
		t.Errorf("flags over env: %+v", s)
	}
	// Both token variables: the validation refuses them, as in C++.
	if s.token != "env-token" || s.tokenFile != "/env/token" {
		t.Errorf("token from env: %+v", s)
	}
	// A token flag hides both token variables.
	s = security{tokenFile: "/flag/token"}
	s.applyEnv(getenv)
	if s.tokenFile != "/flag/token" || s.token != "" {
		t.Errorf("-token-file over CLUSTERD_TOKEN: %+v", s)
	}
}

// recorder is a ClusterService whose GetSummary records who called.
type recorder struct {
	clusterdv1.UnimplementedClusterServiceServer
	mu    sync.Mutex
	auth  []string
	names []string
}

func (r *recorder) GetSummary(ctx context.Context, _ *clusterdv1.GetSummaryRequest) (*clusterdv1.GetSummaryResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	cn := ""
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			cn = ti.State.PeerCertificates[0].Subject.CommonName
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.auth = append(r.auth, strings.Join(md.Get("authorization"), ","))
	r.names = append(r.names, cn)
	return &clusterdv1.GetSummaryResponse{Revision: 4242}, nil
}

func (r *recorder) last() (auth, cn string, calls int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.auth) == 0 {
		return "", "", 0
	}
	return r.auth[len(r.auth)-1], r.names[len(r.names)-1], len(r.auth)
}

// tlsServer starts a TLS ClusterService on 127.0.0.1 with the certificates
// in dir; client certificates are verified when sent.
func tlsServer(t *testing.T, dir string) (string, *recorder) {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven,
	})))
	rec := &recorder{}
	clusterdv1.RegisterClusterServiceServer(srv, rec)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), rec
}

func makeCerts(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("bash", "../../test/security/make_certs.sh", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("make_certs.sh: %v\n%s", err, out)
	}
	return dir
}

func summary(addr string, s security) error {
	opts, err := s.dialOptions()
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a failure bound only
	defer cancel()
	_, err = clusterdv1.NewClusterServiceClient(conn).GetSummary(ctx, &clusterdv1.GetSummaryRequest{})
	return err
}

func TestAgainstATLSServer(t *testing.T) {
	certs := makeCerts(t)
	c := func(name string) string { return filepath.Join(certs, name) }
	addr, rec := tlsServer(t, certs)

	if err := summary(addr, security{caFile: c("ca.crt"), token: "s3cret"}); err != nil {
		t.Fatalf("TLS + token: %v", err)
	}
	if auth, cn, _ := rec.last(); auth != "Bearer s3cret" || cn != "" {
		t.Errorf("TLS + token: server saw auth=%q cn=%q", auth, cn)
	}

	if err := summary(addr, security{caFile: c("ca.crt"), certFile: c("viewer.crt"), keyFile: c("viewer.key"),
		serverName: "clusterd"}); err != nil {
		t.Fatalf("mutual TLS: %v", err)
	}
	if auth, cn, _ := rec.last(); auth != "" || cn != "alice" {
		t.Errorf("mutual TLS: server saw auth=%q cn=%q", auth, cn)
	}

	// The token file is re-read when it changes.
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := security{caFile: c("ca.crt"), tokenFile: tokenFile}
	opts, err := s.dialOptions()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := clusterdv1.NewClusterServiceClient(conn)
	call := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := client.GetSummary(ctx, &clusterdv1.GetSummaryRequest{}); err != nil {
			t.Fatalf("token file: %v", err)
		}
	}
	call()
	if auth, _, _ := rec.last(); auth != "Bearer first" {
		t.Errorf("token file: server saw %q", auth)
	}
	if err := os.WriteFile(tokenFile, []byte("second"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A distinct modification time: a rewrite within the file system's
	// timestamp granularity (and of the same size) would look unchanged.
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(tokenFile, later, later); err != nil {
		t.Fatal(err)
	}
	call()
	if auth, _, _ := rec.last(); auth != "Bearer second" {
		t.Errorf("rotated token file: server saw %q", auth)
	}

	// Refused: another CA (the token never leaves), a wrong server name, plaintext.
	_, _, before := rec.last()
	for name, s := range map[string]security{
		"other CA":    {caFile: c("other-ca.crt"), token: "must-not-leak"},
		"server name": {caFile: c("ca.crt"), serverName: "not-clusterd.example"},
		"plaintext":   {},
	} {
		if err := summary(addr, s); err == nil {
			t.Errorf("%s: the call succeeded", name)
		}
	}
	if _, _, after := rec.last(); after != before {
		t.Errorf("refused connections reached the service: %d calls, want %d", after, before)
	}
}
