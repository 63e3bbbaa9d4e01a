package emulator

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// TLSConfig makes the emulator serve its AMQP port over TLS, as Service Bus
// serves port 5671: AMQP, the management API (ATOM over HTTPS) and AMQP over
// WebSockets, told apart after the handshake by their first bytes.
type TLSConfig struct {
	// CertFile and KeyFile name a PEM certificate (chain) and its key to
	// serve. Both empty: the emulator generates a self-signed certificate
	// for Hosts and writes it to GeneratedCertFile.
	CertFile, KeyFile string
	// Hosts are the DNS names and IP addresses a generated certificate is
	// valid for. Default: localhost, 127.0.0.1, ::1 and the host of AMQPAddr.
	Hosts []string
	// GeneratedCertFile is where a generated certificate is written (PEM),
	// for clients to trust. Default: a file in a new temporary directory,
	// removed by Close; Server.CertFile names it.
	GeneratedCertFile string
}

// DefaultTLSPort is the AMQPS port of Service Bus, which cmd/emulator listens on
// in TLS mode unless told otherwise.
const DefaultTLSPort = 5671

// generatedCertValidity is how long a generated certificate is valid.
const generatedCertValidity = 365 * 24 * time.Hour

func (c *TLSConfig) validate() error {
	if (c.CertFile == "") != (c.KeyFile == "") {
		return errors.New("emulator: TLS needs both CertFile and KeyFile, or neither (to generate a certificate)")
	}
	if c.CertFile != "" && (len(c.Hosts) > 0 || c.GeneratedCertFile != "") {
		return errors.New("emulator: TLS Hosts and GeneratedCertFile are for a generated certificate; they cannot go with CertFile")
	}
	return nil
}

// serverTLS holds what the server needs of its certificate.
type serverTLS struct {
	config   *tls.Config
	certFile string // the PEM file clients trust
	tmpDir   string // removed by Close; "" when none was made
	certPEM  []byte
}

// loadTLS loads or generates the certificate of c for a server listening on listenAddr.
func loadTLS(c *TLSConfig, listenAddr string) (*serverTLS, error) {
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("emulator: TLS certificate %s and key %s: %w", c.CertFile, c.KeyFile, err)
		}
		pemBytes, err := os.ReadFile(c.CertFile)
		if err != nil {
			return nil, fmt.Errorf("emulator: TLS certificate: %w", err)
		}
		return &serverTLS{config: serverTLSConfig(cert), certFile: c.CertFile, certPEM: pemBytes}, nil
	}
	hosts := c.Hosts
	if len(hosts) == 0 {
		hosts = []string{"localhost", "127.0.0.1", "::1"}
		if h, _, err := net.SplitHostPort(listenAddr); err == nil && h != "" && !slices.Contains(hosts, h) {
			if ip := net.ParseIP(h); ip == nil || !ip.IsUnspecified() {
				hosts = append(hosts, h)
			}
		}
	}
	certPEM, keyPEM, err := generateCert(hosts, time.Now())
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("emulator: generated TLS certificate: %w", err)
	}
	st := &serverTLS{config: serverTLSConfig(cert), certFile: c.GeneratedCertFile, certPEM: certPEM}
	if st.certFile == "" {
		if st.tmpDir, err = os.MkdirTemp("", "seqbus-emulator-tls-"); err != nil {
			return nil, fmt.Errorf("emulator: directory for the generated TLS certificate: %w", err)
		}
		st.certFile = filepath.Join(st.tmpDir, "cert.pem")
	}
	if err := os.WriteFile(st.certFile, certPEM, 0o644); err != nil {
		st.remove()
		return nil, fmt.Errorf("emulator: write the generated TLS certificate: %w", err)
	}
	return st, nil
}

func serverTLSConfig(cert tls.Certificate) *tls.Config {
	// HTTP/1.1 only: the port's HTTP server reads what the sniffer hands it
	// and does not speak HTTP/2.
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
}

func (st *serverTLS) remove() {
	if st != nil && st.tmpDir != "" {
		_ = os.RemoveAll(st.tmpDir)
	}
}

// generateCert makes a self-signed certificate (ECDSA P-256) for hosts, also a
// CA so that a client can trust it as its own root.
func generateCert(hosts []string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("emulator: generate TLS key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("emulator: generate TLS certificate serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"seqbus emulator"}, CommonName: hosts[0]},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(generatedCertValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("emulator: create TLS certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("emulator: encode TLS key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// WriteSelfSignedCert writes a self-signed certificate for hosts (DNS names
// and IP addresses) and its key to PEM files, for TLSConfig.CertFile and
// KeyFile: clients then trust one certificate across restarts of the
// emulator, where a generated one changes with every start.
func WriteSelfSignedCert(certFile, keyFile string, hosts []string) error {
	if len(hosts) == 0 {
		return errors.New("emulator: a certificate needs at least one host")
	}
	certPEM, keyPEM, err := generateCert(hosts, time.Now())
	if err != nil {
		return err
	}
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		return fmt.Errorf("emulator: write certificate: %w", err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return fmt.Errorf("emulator: write key: %w", err)
	}
	return nil
}

// CertFile returns the PEM file of the certificate clients must trust in TLS
// mode (Python: connection_verify=…; Node: NODE_EXTRA_CA_CERTS), or "" without TLS.
func (s *Server) CertFile() string {
	if s.tls == nil {
		return ""
	}
	return s.tls.certFile
}

// ClientTLSConfig returns a TLS configuration trusting the emulator's
// certificate, for Go clients (azservicebus.ClientOptions.TLSConfig, an
// http.Transport's TLSClientConfig), or nil without TLS. It names the host
// of ConnectionString as the server: the Go SDK would otherwise check the
// certificate against the endpoint with its port ("localhost:5671"), which
// no certificate names.
func (s *Server) ClientTLSConfig() *tls.Config {
	if s.tls == nil {
		return nil
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.tls.certPEM)
	host, _, _ := net.SplitHostPort(s.endpointAddr())
	return &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12}
}
