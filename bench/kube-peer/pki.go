package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the files kube-apiserver is started with and what the clients
// need to trust and authenticate to it.
type pki struct {
	caFile, certFile, keyFile, saKeyFile, tokensFile string
	caPEM                                            []byte
	token                                            string
}

// makePKI writes a CA, a serving certificate for 127.0.0.1 signed by it, a
// service-account RSA key and a static token file with one admin token
// (system:masters) into dir.
func makePKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{caFile: filepath.Join(dir, "ca.crt"), certFile: filepath.Join(dir, "apiserver.crt"),
		keyFile: filepath.Join(dir, "apiserver.key"), saKeyFile: filepath.Join(dir, "sa.key"),
		tokensFile: filepath.Join(dir, "tokens.csv")}
	caKey, caCert, err := p.writeCA()
	if err != nil {
		return nil, err
	}
	if err := p.writeServing(caKey, caCert); err != nil {
		return nil, err
	}
	if err := p.writeSAKey(); err != nil {
		return nil, err
	}
	return p, p.writeToken()
}

func (p *pki) writeCA() (*ecdsa.PrivateKey, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := certTemplate("kube-peer-ca")
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return key, cert, os.WriteFile(p.caFile, p.caPEM, 0o644)
}

func (p *pki) writeServing(caKey *ecdsa.PrivateKey, ca *x509.Certificate) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := certTemplate("kube-apiserver")
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	tmpl.DNSNames = []string{"localhost"}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return os.WriteFile(p.keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
}

// writeSAKey writes the RSA key kube-apiserver signs and verifies
// service-account tokens with (it insists on one even though nothing here
// uses a service account).
func (p *pki) writeSAKey() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	der := x509.MarshalPKCS1PrivateKey(key)
	return os.WriteFile(p.saKeyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: der}), 0o600)
}

func (p *pki) writeToken() error {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	p.token = hex.EncodeToString(b)
	line := fmt.Sprintf("%s,admin,admin-uid,\"system:masters\"\n", p.token)
	return os.WriteFile(p.tokensFile, []byte(line), 0o600)
}

func certTemplate(cn string) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	now := time.Now()
	return &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour)}
}
