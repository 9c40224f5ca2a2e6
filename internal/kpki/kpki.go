// Package kpki writes the key material of a Kubernetes control plane: a
// CA, the certificates it issues (serving and client) and the service
// account key pair. Used by cnlab cluster up and by the tests' control
// plane (internal/k8stest).
package kpki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certValidity is how long the certificates are valid: a local test
// cluster lives for minutes to days.
const certValidity = 30 * 24 * time.Hour

// CA is a certificate authority writing into its directory.
type CA struct {
	cert *x509.Certificate
	key  crypto.Signer
	dir  string
}

// NewCA writes a fresh CA certificate (ca.crt, common name cn) and a
// service-account key pair (sa.key RSA PKCS#1, sa.pub PKIX) into dir.
func NewCA(dir, cn string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	now := time.Now().Add(-time.Hour)
	tmpl := &x509.Certificate{
		SerialNumber:          Serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now,
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c := &CA{cert: cert, key: key, dir: dir}
	if err := WritePEM(c.Path("ca.crt"), "CERTIFICATE", der); err != nil {
		return nil, err
	}
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("service account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := WritePEM(c.Path("sa.key"), "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(sa)); err != nil {
		return nil, err
	}
	if err := WritePEM(c.Path("sa.pub"), "PUBLIC KEY", pub); err != nil {
		return nil, err
	}
	return c, nil
}

// Path names a file in the CA's directory.
func (c *CA) Path(name string) string { return filepath.Join(c.dir, name) }

// Cert is one certificate the CA issues.
type Cert struct {
	File   string   // base name: FILE.crt and FILE.key
	CN     string   // common name (the user, for a client certificate)
	Orgs   []string // organizations (the user's groups)
	IPs    []net.IP // serving: IP SANs
	DNS    []string // serving: DNS SANs
	Server bool     // a serving certificate (client too, so kubelets can use theirs both ways)
}

// Issue writes FILE.crt and FILE.key (EC P-256) signed by the CA.
func (c *CA) Issue(s Cert) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now().Add(-time.Hour)
	tmpl := &x509.Certificate{
		SerialNumber: Serial(),
		Subject:      pkix.Name{CommonName: s.CN, Organization: s.Orgs},
		NotBefore:    now,
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if s.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.IPAddresses = s.IPs
		tmpl.DNSNames = s.DNS
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return fmt.Errorf("certificate %s: %w", s.File, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := WritePEM(c.Path(s.File+".crt"), "CERTIFICATE", der); err != nil {
		return err
	}
	return WritePEM(c.Path(s.File+".key"), "EC PRIVATE KEY", keyDER)
}

// Serial is a random certificate serial number.
func Serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

// WritePEM writes der as a PEM block of type typ, readable by root only.
func WritePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
