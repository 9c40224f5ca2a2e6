package k8stest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"

	"github.com/cnlab/cnlab/internal/kpki"
)

// pki is the key material of one control plane, written under Dir/pki.
type pki struct {
	CA          string // CA certificate (PEM) that signed both serving certificates
	ServerCert  string // kube-apiserver's serving certificate
	ServerKey   string
	KubeletCert string // kwok's (the fake kubelets') serving certificate
	KubeletKey  string
	SAKey       string // service account signing key (RSA, PKCS#1)
	SAPub       string // its public half (PKIX)
}

// newPKI writes a fresh CA, two serving certificates for 127.0.0.1 and
// localhost signed by it, and a service account key pair into dir.
func newPKI(dir string) (*pki, error) {
	ca, err := kpki.NewCA(dir, "cnlab-k8stest-ca")
	if err != nil {
		return nil, err
	}
	p := &pki{
		CA:          ca.Path("ca.crt"),
		ServerCert:  ca.Path("apiserver.crt"),
		ServerKey:   ca.Path("apiserver.key"),
		KubeletCert: ca.Path("kubelet.crt"),
		KubeletKey:  ca.Path("kubelet.key"),
		SAKey:       ca.Path("sa.key"),
		SAPub:       ca.Path("sa.pub"),
	}
	for _, s := range []struct{ cn, file string }{{"kube-apiserver", "apiserver"}, {"kwok-kubelet", "kubelet"}} {
		if err := ca.Issue(kpki.Cert{File: s.file, CN: s.cn, Server: true,
			IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
			DNS: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}}); err != nil {
			return nil, fmt.Errorf("%s certificate: %w", s.cn, err)
		}
	}
	return p, nil
}

// token returns a random bearer token.
func token() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
