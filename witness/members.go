package witness

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"time"

	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/keyfile"
)

// ErrBadMemberSpec means a MemberSpec is refused: a name without both a
// URL and a public key file, a name that is not a note key name, a URL
// that is not http or https, an http URL beside a CA file, two names with
// one key or one URL, or a CA file that is empty, too large or holds anything but
// certificates. The error names the witness or file at fault.
var ErrBadMemberSpec = errors.New("invalid witness list")

// DefaultMemberTimeout bounds one HTTP request to a witness made by the
// clients of LoadMembers when MemberSpec.Timeout is zero. The quorum's own
// deadline (the receiver's WitnessTimeout) usually ends a round first;
// this bounds a request made without one.
const DefaultMemberTimeout = 15 * time.Second

// MaxCAFileSize bounds the CA bundle LoadMembers reads.
const MaxCAFileSize = 1 << 20

// MemberSpec names the witnesses of a quorum as a command line gives them.
type MemberSpec struct {
	// URLs maps each witness's name to its base URL. The name is the
	// witness's id (its note key name, as given to kvfence witness init):
	// its cosignatures are checked under that name.
	URLs map[string]string
	// PubFiles maps each witness's name to the file holding its public
	// key, the ssh-ed25519 line kvfence witness init writes to K.pub.
	PubFiles map[string]string
	// CAFile, when set, is a PEM bundle of the CA certificates the
	// witnesses' https certificates must chain to, instead of the
	// system's. Every URL must then be https: a CA given for a plain-text
	// URL would protect nothing, and nothing falls back to plain text.
	CAFile string
	// Timeout bounds each HTTP request to a witness: zero means
	// DefaultMemberTimeout; a negative value is refused.
	Timeout time.Duration
}

// LoadMembers checks spec, reads the witnesses' public keys and the CA
// bundle, and returns one Member per name, in name order, each with a
// client that verifies the witness's cosignatures, follows no redirect and
// bounds every request by spec.Timeout. A spec without names gives nil.
// Errors wrap ErrBadMemberSpec, or keyfile's for a public key file that
// cannot be read or parsed.
func LoadMembers(spec MemberSpec) ([]Member, error) {
	if spec.Timeout < 0 {
		return nil, fmt.Errorf("%w: negative timeout %v", ErrBadMemberSpec, spec.Timeout)
	}
	timeout := spec.Timeout
	if timeout == 0 {
		timeout = DefaultMemberTimeout
	}
	names, err := memberNames(spec)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		if spec.CAFile != "" {
			return nil, fmt.Errorf("%w: a CA file without witnesses", ErrBadMemberSpec)
		}
		return nil, nil
	}
	// Every URL is checked before any file is read. One URL under two
	// names would count one witness twice towards K.
	urlOwner := map[string]string{}
	for _, name := range names {
		u := spec.URLs[name]
		if err := checkMemberURL(name, u, spec.CAFile != ""); err != nil {
			return nil, err
		}
		if other, ok := urlOwner[u]; ok {
			return nil, fmt.Errorf("%w: witnesses %s and %s have the same URL", ErrBadMemberSpec, other, name)
		}
		urlOwner[u] = name
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if spec.CAFile != "" {
		pool, err := loadCAFile(spec.CAFile)
		if err != nil {
			return nil, err
		}
		tlsConfig.RootCAs = pool
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = tlsConfig
	httpClient := &http.Client{Transport: transport, Timeout: timeout,
		// A witness answers where it is asked; a redirect would send the
		// receiver's checkpoint somewhere the command line did not name.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	var members []Member
	keyOwner := map[string]string{}
	for _, name := range names {
		u := spec.URLs[name]
		pub, err := keyfile.LoadPublic(spec.PubFiles[name])
		if err != nil {
			return nil, fmt.Errorf("witness %s: %w", name, err)
		}
		if other, ok := keyOwner[string(pub)]; ok {
			return nil, fmt.Errorf("%w: witnesses %s and %s have the same public key", ErrBadMemberSpec, other, name)
		}
		keyOwner[string(pub)] = name
		cosv, err := checkpoint.NewCosignatureVerifier(name, pub, checkpoint.CosignatureVerifierOptions{})
		if err != nil {
			return nil, fmt.Errorf("%w: witness %s: %w", ErrBadMemberSpec, name, err)
		}
		c, err := NewClient(u, ClientOptions{HTTPClient: httpClient, Verifier: cosv})
		if err != nil {
			return nil, fmt.Errorf("%w: witness %s: %w", ErrBadMemberSpec, name, err)
		}
		members = append(members, Member{Name: name, Client: c, Verifier: cosv})
	}
	return members, nil
}

// memberNames returns the names of spec in order, refusing one that lacks
// its URL or its public key file, and one that is not a note key name.
func memberNames(spec MemberSpec) ([]string, error) {
	var names []string
	for name := range spec.URLs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if spec.URLs[name] == "" {
			return nil, fmt.Errorf("%w: witness %q has an empty URL", ErrBadMemberSpec, name)
		}
		if spec.PubFiles[name] == "" {
			return nil, fmt.Errorf("%w: witness %q has a URL but no public key file", ErrBadMemberSpec, name)
		}
		if err := checkpoint.CheckName(name); err != nil {
			return nil, fmt.Errorf("%w: witness name %q: %w", ErrBadMemberSpec, name, err)
		}
	}
	var orphans []string
	for name := range spec.PubFiles {
		if _, ok := spec.URLs[name]; !ok {
			orphans = append(orphans, name)
		}
	}
	if len(orphans) > 0 {
		slices.Sort(orphans)
		return nil, fmt.Errorf("%w: witness %q has a public key file but no URL", ErrBadMemberSpec, orphans[0])
	}
	return names, nil
}

// checkMemberURL refuses a URL with user information (a password on a
// command line is every local user's to read), and any http URL.
func checkMemberURL(name, raw string, withCA bool) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: witness %s: URL %q is not http:// or https://HOST[:PORT][/PATH]", ErrBadMemberSpec, name, raw)
	}
	if u.User != nil {
		return fmt.Errorf("%w: witness %s: URL %q carries user information", ErrBadMemberSpec, name, raw)
	}
	if u.Scheme != "https" {
		// Over plain http, whoever sits between the receiver and the
		// witness can play back its signed answers of a minute ago, or
		// say "none" in its name (that answer is unsigned): enough, with
		// N-K+1 answers, to open a restored database.
		return fmt.Errorf("%w: witness %s: URL %q is plain http: use https (a network attacker could replay the witness's answers or forge its \"none\")",
			ErrBadMemberSpec, name, raw)
	}
	return nil
}

// loadCAFile reads a PEM bundle of at most MaxCAFileSize bytes from a
// regular file and returns its certificates as a pool. Every PEM block
// must be a certificate that parses: a private key or a truncated bundle
// given by mistake is refused rather than skipped.
func loadCAFile(path string) (*x509.CertPool, error) {
	// Checked before it is opened, so that a FIFO or a device is never
	// opened (opening a FIFO blocks), and again once open, so that a file
	// swapped in between is caught.
	before, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: CA file: %w", ErrBadMemberSpec, err)
	}
	if !before.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: CA file %s is not a regular file", ErrBadMemberSpec, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: CA file: %w", ErrBadMemberSpec, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: CA file: %w", ErrBadMemberSpec, err)
	}
	if !os.SameFile(before, fi) {
		return nil, fmt.Errorf("%w: CA file %s was replaced while being opened", ErrBadMemberSpec, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxCAFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%w: CA file %s: %w", ErrBadMemberSpec, path, err)
	}
	if len(data) > MaxCAFileSize {
		return nil, fmt.Errorf("%w: CA file %s is larger than %d bytes", ErrBadMemberSpec, path, MaxCAFileSize)
	}
	pool := x509.NewCertPool()
	n := 0
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			if len(bytes.TrimSpace(rest)) != 0 {
				return nil, fmt.Errorf("%w: CA file %s has bytes that are not PEM after certificate %d", ErrBadMemberSpec, path, n)
			}
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%w: CA file %s holds a %q block; want only CERTIFICATE blocks", ErrBadMemberSpec, path, block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: CA file %s: certificate %d: %w", ErrBadMemberSpec, path, n+1, err)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", ErrBadMemberSpec, path)
	}
	return pool, nil
}
