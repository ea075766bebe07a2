package main

// Transport security, with the same flags and environment variables as every
// ClusterD client (docs/security.md): TLS when any of -ca, -cert, -key is set,
// otherwise plaintext (a ClusterD started with --insecure); a bearer token is
// only ever sent over TLS. The client certificate and the token file are
// re-read when they change (a rotated certificate, a projected
// service-account token), so a long-running operator keeps working.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

type security struct {
	caFile     string
	certFile   string
	keyFile    string
	token      string
	tokenFile  string
	serverName string
}

// registerFlags adds -ca, -cert, -key, -token, -token-file and -server-name.
// Their environment variables are read by applyEnv after parsing (not used as
// defaults, which -h would print: a token must not show up in a help text).
func (s *security) registerFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.caFile, "ca", "", "CA bundle of ClusterD's certificate; turns TLS on (env CLUSTERD_CA)")
	fs.StringVar(&s.certFile, "cert", "", "client certificate for mutual TLS (env CLUSTERD_CERT)")
	fs.StringVar(&s.keyFile, "key", "", "its private key (env CLUSTERD_KEY)")
	fs.StringVar(&s.token, "token", "", "bearer token, sent over TLS only (env CLUSTERD_TOKEN)")
	fs.StringVar(&s.tokenFile, "token-file", "",
		"bearer token read from a file, re-read when it changes (env CLUSTERD_TOKEN_FILE)")
	fs.StringVar(&s.serverName, "server-name", "",
		"name to verify ClusterD's certificate against (env CLUSTERD_SERVER_NAME)")
}

// applyEnv fills what the flags left empty from CLUSTERD_*, so a flag wins
// over the environment. The token and the token file are one setting: the
// environment's is used only when neither flag was given (else an exported
// CLUSTERD_TOKEN and -token-file would be two tokens).
func (s *security) applyEnv(getenv func(string) string) {
	env := func(name string, field *string) {
		if *field == "" {
			*field = getenv(name)
		}
	}
	env("CLUSTERD_CA", &s.caFile)
	env("CLUSTERD_CERT", &s.certFile)
	env("CLUSTERD_KEY", &s.keyFile)
	if s.token == "" && s.tokenFile == "" {
		env("CLUSTERD_TOKEN", &s.token)
		env("CLUSTERD_TOKEN_FILE", &s.tokenFile)
	}
	env("CLUSTERD_SERVER_NAME", &s.serverName)
}

func (s *security) tls() bool { return s.caFile != "" || s.certFile != "" || s.keyFile != "" }

// validate mirrors ValidateClientSecurity of the C++ clients; errors name the flag.
func (s *security) validate() error {
	switch {
	case s.certFile != "" && s.keyFile == "":
		return errors.New("-cert: needs -key")
	case s.keyFile != "" && s.certFile == "":
		return errors.New("-key: needs -cert")
	case s.token != "" && s.tokenFile != "":
		return errors.New("-token and -token-file: give one")
	case s.token != "" && !s.tls():
		return errors.New("-token: a bearer token is only sent over TLS (give -ca)")
	case s.tokenFile != "" && !s.tls():
		return errors.New("-token-file: a bearer token is only sent over TLS (give -ca)")
	case s.serverName != "" && !s.tls():
		return errors.New("-server-name: needs TLS (give -ca)")
	}
	for _, f := range []struct{ flag, path string }{
		{"ca", s.caFile}, {"cert", s.certFile}, {"key", s.keyFile}, {"token-file", s.tokenFile},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.ReadFile(f.path); err != nil {
			return fmt.Errorf("-%s: cannot read %s: %w", f.flag, f.path, errors.Unwrap(err))
		}
	}
	return nil
}

// dialOptions are the grpc.NewClient options for s (validated first).
func (s *security) dialOptions() ([]grpc.DialOption, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	if !s.tls() {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.serverName}
	if s.caFile != "" {
		pem, err := os.ReadFile(s.caFile)
		if err != nil {
			return nil, fmt.Errorf("-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-ca: no PEM certificate in %s", s.caFile)
		}
		cfg.RootCAs = pool
	} // else the system's roots
	if s.certFile != "" {
		kp := &keyPair{certFile: s.certFile, keyFile: s.keyFile}
		if _, err := kp.get(); err != nil {
			return nil, fmt.Errorf("-cert/-key: %w", err)
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return kp.get() }
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}
	if s.token != "" || s.tokenFile != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(&bearerToken{token: s.token, file: s.tokenFile}))
	}
	return opts, nil
}

// keyPair is the client certificate, reloaded when either file changes.
type keyPair struct {
	certFile, keyFile string
	mu                sync.Mutex
	stamp             string
	cert              *tls.Certificate
}

func (k *keyPair) get() (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	stamp := fileStamp(k.certFile) + "|" + fileStamp(k.keyFile)
	if k.cert != nil && stamp == k.stamp {
		return k.cert, nil
	}
	c, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		if k.cert != nil {
			return k.cert, nil // mid-rotation: keep the last good pair
		}
		return nil, err
	}
	k.cert, k.stamp = &c, stamp
	return k.cert, nil
}

// bearerToken sends "authorization: Bearer <token>" on every call, and only
// over TLS (RequireTransportSecurity). A token file is re-read when it changes.
type bearerToken struct {
	token, file string
	mu          sync.Mutex
	stamp       string
	cached      string
}

func (b *bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	t, err := b.current()
	if err != nil {
		return nil, err
	}
	return map[string]string{"authorization": "Bearer " + t}, nil
}

func (b *bearerToken) RequireTransportSecurity() bool { return true }

func (b *bearerToken) current() (string, error) {
	if b.file == "" {
		return b.token, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	stamp := fileStamp(b.file)
	if b.cached != "" && stamp == b.stamp {
		return b.cached, nil
	}
	data, err := os.ReadFile(b.file)
	if t := strings.TrimSpace(string(data)); err == nil && t != "" {
		b.cached, b.stamp = t, stamp
	}
	if b.cached == "" {
		return "", fmt.Errorf("no bearer token in %s", b.file)
	}
	return b.cached, nil // on a failed read, the last token while the file is being replaced
}

// fileStamp identifies a version of a file: modification time and size.
func fileStamp(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	return fi.ModTime().Format(time.RFC3339Nano) + "/" + fmt.Sprint(fi.Size())
}
