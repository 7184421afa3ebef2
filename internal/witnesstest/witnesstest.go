// Package witnesstest runs witnesses in this process, each on its own
// loopback HTTPS server (a CA of the set's own), for tests and benchmarks
// of a receiver or ledger that a quorum of witnesses cosigns. A witness
// here is the real one (package witness: its store fsyncs before it
// answers); only its process is shared.
package witnesstest

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/kvfence/kvfence/internal/pki"

	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/witness"
)

// shared is the process's CA and the witnesses' server certificate (for
// 127.0.0.1), made once.
var shared struct {
	once      sync.Once
	err       error
	ca        pki.Pair
	server    pki.Pair
	transport *http.Transport
}

func loadPKI() error {
	shared.once.Do(func() {
		if shared.ca, shared.err = pki.NewCA("witnesstest CA", 7*24*time.Hour); shared.err != nil {
			return
		}
		shared.server, shared.err = pki.Issue(shared.ca, pki.Options{Name: "witnesstest", IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
			Server: true, Validity: 7 * 24 * time.Hour})
		shared.transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: shared.ca.Pool(), MinVersion: tls.VersionTLS12},
			MaxIdleConnsPerHost: 64}
	})
	return shared.err
}

// Transport returns an HTTP transport that trusts the witnesses' CA, for
// a test's own client (one that delays or records requests) to wrap.
func Transport() http.RoundTripper {
	if loadPKI() != nil {
		return http.DefaultTransport
	}
	return shared.transport
}

// Witness is one witness of a Set.
type Witness struct {
	// Name is the witness's id, its note key name.
	Name string
	// Key is its cosigning key.
	Key ed25519.PrivateKey
	// URL is its base URL.
	URL string
	// Path is its database file.
	Path string

	mu    sync.Mutex
	store *witness.Store
	srv   *http.Server
	ln    net.Listener
	cert  tls.Certificate
	// client is the set's client, trusting its CA.
	client *http.Client
}

// Set is N witnesses, each served on 127.0.0.1.
type Set struct {
	// Witnesses are the set's witnesses, in order.
	Witnesses []*Witness
	// CAFile is the PEM file of the CA the witnesses' certificates chain
	// to (for --witness-ca).
	CAFile string
	client *http.Client
}

// Start creates n witnesses with databases in dir and serves each on a
// loopback port of its own. Close stops them.
func Start(dir string, n int) (*Set, error) {
	if err := loadPKI(); err != nil {
		return nil, err
	}
	s := &Set{CAFile: filepath.Join(dir, "witnesses-ca.crt"), client: &http.Client{Timeout: 30 * time.Second, Transport: Transport()}}
	if err := os.WriteFile(s.CAFile, shared.ca.CertPEM(), 0o644); err != nil {
		return nil, err
	}
	srvCert := shared.server
	for i := range n {
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		w := &Witness{Name: fmt.Sprintf("witness%d.test", i+1), Key: priv, Path: filepath.Join(dir, fmt.Sprintf("witness%d.db", i+1)),
			cert: srvCert.TLS(), client: s.client}
		if err := witness.Create(w.Path, w.Name, pub); err != nil {
			s.Close()
			return nil, err
		}
		if err := w.start(""); err != nil {
			s.Close()
			return nil, err
		}
		s.Witnesses = append(s.Witnesses, w)
	}
	return s, nil
}

// start opens the witness's store and serves it on addr (a new loopback
// port when empty).
func (w *Witness) start(addr string) error {
	st, err := witness.OpenStore(w.Path, witness.StoreOptions{})
	if err != nil {
		return err
	}
	wit, err := witness.New(st, w.Key, witness.Options{})
	if err != nil {
		st.Close()
		return err
	}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		st.Close()
		return err
	}
	srv := &http.Server{Handler: witness.NewServer(wit, nil), TLSConfig: &tls.Config{Certificates: []tls.Certificate{w.cert}}}
	go srv.ServeTLS(ln, "", "")
	w.mu.Lock()
	w.store, w.srv, w.ln, w.URL = st, srv, ln, "https://"+ln.Addr().String()
	w.mu.Unlock()
	return nil
}

// Trust makes every witness of the set witness the receiver (or ledger)
// whose note origin and key these are.
func (s *Set) Trust(origin string, pub ed25519.PublicKey) error {
	vkey, err := checkpoint.VerifierKey(origin, pub)
	if err != nil {
		return err
	}
	for _, w := range s.Witnesses {
		w.mu.Lock()
		st := w.store
		w.mu.Unlock()
		if st == nil {
			return fmt.Errorf("witness %s is down", w.Name)
		}
		if err := st.Trust(origin, vkey); err != nil {
			return err
		}
	}
	return nil
}

// TrustReceiver is Trust for a receiver's id and key.
func (s *Set) TrustReceiver(id string, pub ed25519.PublicKey) error {
	origin, err := checkpoint.ReceiverOrigin(id, pub)
	if err != nil {
		return err
	}
	return s.Trust(origin, pub)
}

// Members returns the witnesses as quorum members, with clients that use
// httpClient (Client when nil).
func (s *Set) Members(httpClient *http.Client) ([]witness.Member, error) {
	var ms []witness.Member
	for _, w := range s.Witnesses {
		m, err := w.Member(httpClient)
		if err != nil {
			return nil, err
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// Client returns an HTTP client that trusts the set's CA.
func (s *Set) Client() *http.Client { return s.client }

// Member returns the witness as a quorum member, with a client that uses
// httpClient (one trusting the set's CA when nil; a client of its own
// must trust it too, see Set.Client and Set.CAFile).
func (w *Witness) Member(httpClient *http.Client) (witness.Member, error) {
	cosv, err := checkpoint.NewCosignatureVerifier(w.Name, w.Key.Public().(ed25519.PublicKey), checkpoint.CosignatureVerifierOptions{})
	if err != nil {
		return witness.Member{}, err
	}
	w.mu.Lock()
	url := w.URL
	w.mu.Unlock()
	if httpClient == nil {
		httpClient = w.client
	}
	c, err := witness.NewClient(url, witness.ClientOptions{HTTPClient: httpClient, Verifier: cosv})
	if err != nil {
		return witness.Member{}, err
	}
	return witness.Member{Name: w.Name, Client: c, Verifier: cosv}, nil
}

// Down stops the witness: its URL refuses connections until Up.
func (w *Witness) Down() error {
	w.mu.Lock()
	srv, st := w.srv, w.store
	w.srv, w.store = nil, nil
	w.mu.Unlock()
	if srv == nil {
		return nil
	}
	err := srv.Close()
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	return err
}

// Up serves the witness again, from its database, at its old address.
func (w *Witness) Up() error {
	w.mu.Lock()
	running, addr := w.srv != nil, w.ln.Addr().String()
	w.mu.Unlock()
	if running {
		return nil
	}
	return w.start(addr)
}

// Log returns the witness's stored state of origin (its latest cosigned
// checkpoint), reading its database; the witness must be down or this
// reads through its open store.
func (w *Witness) Log(origin string) (witness.LogState, error) {
	w.mu.Lock()
	st := w.store
	w.mu.Unlock()
	if st != nil {
		return st.Log(origin)
	}
	st, err := witness.OpenStore(w.Path, witness.StoreOptions{ReadOnly: true})
	if err != nil {
		return witness.LogState{}, err
	}
	defer st.Close()
	return st.Log(origin)
}

// Close stops every witness.
func (s *Set) Close() error {
	var first error
	for _, w := range s.Witnesses {
		if err := w.Down(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// TrustRecovery makes every witness of the set accept recoveries of the
// receiver with this id and key that the recovery key recoveryPub
// admits; the receiver must be trusted first (TrustReceiver).
func (s *Set) TrustRecovery(id string, pub, recoveryPub ed25519.PublicKey) error {
	origin, err := checkpoint.ReceiverOrigin(id, pub)
	if err != nil {
		return err
	}
	for _, w := range s.Witnesses {
		if err := w.TrustRecovery(origin, recoveryPub); err != nil {
			return err
		}
	}
	return nil
}

// TrustRecovery makes the witness accept recoveries of origin that the
// recovery key recoveryPub admits; the witness must be up.
func (w *Witness) TrustRecovery(origin string, recoveryPub ed25519.PublicKey) error {
	w.mu.Lock()
	st := w.store
	w.mu.Unlock()
	if st == nil {
		return fmt.Errorf("witness %s is down", w.Name)
	}
	return st.TrustRecovery(origin, recoveryPub)
}
