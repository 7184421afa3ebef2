package kubeproc

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvfence/kvfence/internal/pki"
)

// ReadyTimeout bounds how long the server may take from its start to
// answering /readyz ok. It takes about 4 s on an idle 2-core machine; a
// loaded one takes several times that.
const ReadyTimeout = 90 * time.Second

// startTries bounds the starts that lost their port to another process
// between its choice and the server's listen.
const startTries = 3

// The identities in every server's token file. Tests act as them by name.
const (
	// Admin is in system:masters: RBAC allows it everything, though
	// admission policies still apply to it.
	Admin = "admin"
	// Receiver is the kvfence receiver: the service account name that
	// deploy/kubernetes's policy lets change scoped objects.
	Receiver = "receiver"
	// Worker is an AI worker, in the group that deploy/kubernetes's RBAC
	// manifests give read-only access.
	Worker = "worker"
	// Editor is an identity that a test may give write access through
	// RBAC, to show what the admission policy refuses on its own.
	Editor = "editor"
)

// ReceiverUser is the user name the Receiver identity authenticates as:
// the service account kvfence-receiver in namespace kvfence.
const ReceiverUser = "system:serviceaccount:kvfence:kvfence-receiver"

// WorkersGroup and EditorsGroup are the groups of Worker and Editor.
const (
	WorkersGroup = "kvfence:workers"
	EditorsGroup = "kvfence:test-editors"
)

// Identity is one line of the server's static token file.
type Identity struct {
	// Name is what tests call the identity (Admin, Worker, …).
	Name string
	// User is the user name the server sees.
	User string
	// Groups are the groups the server sees, besides system:authenticated.
	Groups []string
}

// DefaultIdentities are the identities of every server: Admin, Receiver,
// Worker and Editor.
var DefaultIdentities = []Identity{
	{Name: Admin, User: "kvfence-test-admin", Groups: []string{"system:masters"}},
	{Name: Receiver, User: ReceiverUser, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kvfence"}},
	{Name: Worker, User: "kvfence-test-worker", Groups: []string{WorkersGroup}},
	{Name: Editor, User: "kvfence-test-editor", Groups: []string{EditorsGroup}},
}

// Config describes a server to start.
type Config struct {
	// Identities are added to DefaultIdentities in the token file; a
	// name may not repeat.
	Identities []Identity
	// EtcdEndpoints are the client URLs of the etcd cluster to store in;
	// none starts a member of the server's own (internal/etcdbin's etcd,
	// in the server's directory), which stops with it.
	EtcdEndpoints []string
	// Args are further kube-apiserver flags.
	Args []string
}

// Server is a running kube-apiserver.
type Server struct {
	// URL is the server's address, https://127.0.0.1:PORT.
	URL string
	// CAPEM is the CA that signed the server's certificate, in PEM.
	CAPEM []byte
	// Tokens maps each identity's name to its bearer token.
	Tokens map[string]string
	// Users maps each identity's name to the user name the server sees.
	Users map[string]string
	// Ready is how long the server took from its process start to /readyz
	// ok.
	Ready time.Duration
	// EtcdEndpoints are the client URLs of the etcd the server stores in.
	EtcdEndpoints []string

	// t is the test that started the server, nil for Launch.
	t       TB
	http    *http.Client
	logPath string
	proc    *exec.Cmd
	done    chan struct{}
	waitErr error
	// etcd is the server's own etcd member, nil when Config named one.
	etcd *etcdMember
}

// TB is the part of testing.TB that Start uses. It is an interface of
// this package so that the package links nothing of package testing: the
// lab, part of the kvfence binary, launches servers through Launch.
type TB interface {
	// Helper marks the caller as a test helper.
	Helper()
	// Cleanup registers a function to run when the test ends.
	Cleanup(func())
	// TempDir returns a directory removed when the test ends.
	TempDir() string
	// Logf logs a line.
	Logf(format string, args ...any)
	// Errorf reports a failure and goes on.
	Errorf(format string, args ...any)
	// Fatal reports a failure and ends the test.
	Fatal(args ...any)
	// Fatalf reports a failure and ends the test.
	Fatalf(format string, args ...any)
	// Failed reports whether the test has failed.
	Failed() bool
	// Skip ends the test as skipped.
	Skip(args ...any)
}

// Start starts a kube-apiserver on loopback, waits for /readyz ok and
// stops it when the test ends; it fails t if it cannot.
func Start(t TB, cfg Config) *Server {
	t.Helper()
	var lastErr error
	for range startTries {
		s, err := launch(t.TempDir(), cfg, t)
		if err == nil {
			t.Cleanup(s.Stop)
			t.Logf("kubeproc: kube-apiserver ready in %v at %s", s.Ready.Round(time.Millisecond), s.URL)
			return s
		}
		if lastErr = err; !errors.Is(err, errExited) {
			break
		}
	}
	t.Fatalf("kubeproc: starting kube-apiserver: %v", lastErr)
	return nil
}

// Launch starts a kube-apiserver on loopback with its files (and its own
// etcd's data, unless cfg names a cluster) in dir, an existing directory,
// and waits for /readyz ok. It is for callers without a test, such as
// the lab, which must call Close. On Linux the processes die with the
// process that launched them even if it never calls Close.
func Launch(dir string, cfg Config) (*Server, error) {
	var lastErr error
	for i := range startTries {
		d := filepath.Join(dir, fmt.Sprintf("try-%d", i))
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, fmt.Errorf("kubeproc: %w", err)
		}
		s, err := launch(d, cfg, nil)
		if err == nil {
			return s, nil
		}
		if lastErr = err; !errors.Is(err, errExited) {
			break
		}
	}
	return nil, fmt.Errorf("kubeproc: starting kube-apiserver: %w", lastErr)
}

// launch is one try of Start or Launch: a failed try leaves nothing
// running, and an error that wraps errExited is worth another (a port
// taken between its choice and the listen).
func launch(dir string, cfg Config, t TB) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	ids, err := identities(cfg.Identities)
	if err != nil {
		return nil, err
	}
	s := &Server{t: t, EtcdEndpoints: cfg.EtcdEndpoints}
	if len(s.EtcdEndpoints) == 0 {
		if s.etcd, err = startEtcd(filepath.Join(dir, "etcd")); err != nil {
			return nil, err
		}
		s.EtcdEndpoints = []string{s.etcd.clientURL}
	}
	if err := s.start(bin, dir, ids, cfg); err != nil {
		msg := tail(s.logPath, 20)
		s.stop()
		return nil, fmt.Errorf("%w\nlast lines of %s:\n%s", err, s.logPath, msg)
	}
	return s, nil
}

// errExited means the server's process ended while it was expected to run.
var errExited = errors.New("kube-apiserver exited")

// identities returns DefaultIdentities and extra, refusing a repeated name
// or a value that the token file's CSV cannot hold.
func identities(extra []Identity) ([]Identity, error) {
	all := append(append([]Identity(nil), DefaultIdentities...), extra...)
	seen := map[string]bool{}
	for _, id := range all {
		if id.Name == "" || seen[id.Name] {
			return nil, fmt.Errorf("kubeproc: identity name %q is empty or repeated", id.Name)
		}
		seen[id.Name] = true
		for _, s := range append([]string{id.User}, id.Groups...) {
			if s == "" || strings.ContainsAny(s, ",\"\n\r") {
				return nil, fmt.Errorf("kubeproc: identity %s: %q cannot stand in a token file", id.Name, s)
			}
		}
	}
	return all, nil
}

func (s *Server) start(bin, dir string, ids []Identity, cfg Config) error {
	ca, err := pki.NewCA("kubeproc test CA", 24*time.Hour)
	if err != nil {
		return err
	}
	serving, err := pki.Issue(ca, pki.Options{
		Name:   "kube-apiserver",
		DNS:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPs:    []net.IP{net.IPv4(127, 0, 0, 1)},
		Server: true,
	})
	if err != nil {
		return err
	}
	servingKey, err := serving.KeyPEM()
	if err != nil {
		return err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	saPriv, err := x509.MarshalPKCS8PrivateKey(saKey)
	if err != nil {
		return err
	}
	saPub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return err
	}
	s.Tokens, s.Users = map[string]string{}, map[string]string{}
	var tokens bytes.Buffer
	for i, id := range ids {
		tok, err := randomToken()
		if err != nil {
			return err
		}
		s.Tokens[id.Name], s.Users[id.Name] = tok, id.User
		// token,user,uid,"group1,group2"
		fmt.Fprintf(&tokens, "%s,%s,uid-%d,\"%s\"\n", tok, id.User, i, strings.Join(id.Groups, ","))
	}
	files := map[string][]byte{
		"ca.crt":      ca.CertPEM(),
		"serving.crt": serving.CertPEM(),
		"serving.key": servingKey,
		"sa.key":      pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: saPriv}),
		"sa.pub":      pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub}),
		"tokens.csv":  tokens.Bytes(),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return err
		}
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	s.CAPEM = ca.CertPEM()
	s.URL = "https://127.0.0.1:" + strconv.Itoa(port)
	s.http = &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}},
	}
	args := append([]string{
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--tls-cert-file=" + filepath.Join(dir, "serving.crt"),
		"--tls-private-key-file=" + filepath.Join(dir, "serving.key"),
		"--etcd-servers=" + strings.Join(s.EtcdEndpoints, ","),
		// A prefix of its own: two servers on one etcd do not share
		// objects.
		"--etcd-prefix=/kubeproc-" + filepath.Base(dir),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(dir, "sa.key"),
		"--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--anonymous-auth=false",
		// No node or service traffic ever leaves the machine: the range
		// is only a setting that the server requires.
		"--service-cluster-ip-range=10.96.0.0/24",
		// A loopback advertise address is not a valid endpoint of the
		// kubernetes service; nothing here needs that service.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
		// Watches are served by etcd, not the server's watch cache: a CI
		// run saw a watch of one ConfigMap, opened just after the server
		// started, deliver no event in 30 s while the object moved through
		// 231 versions, with the cache still filling. The tests read
		// histories from watches, and a test server holds a few objects.
		"--watch-cache=false",
		"--v=1",
	}, cfg.Args...)
	s.logPath = filepath.Join(dir, "kube-apiserver.log")
	log, err := os.OpenFile(s.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := Cmd(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	began := time.Now()
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("kubeproc: starting %s: %w", bin, err)
	}
	s.proc, s.done = cmd, make(chan struct{})
	go func() {
		s.waitErr = cmd.Wait()
		log.Close()
		close(s.done)
	}()
	if err := s.waitReady(began.Add(ReadyTimeout)); err != nil {
		return err
	}
	s.Ready = time.Since(began)
	return nil
}

// waitReady polls /readyz as Admin until it answers ok.
func (s *Server) waitReady(deadline time.Time) error {
	for {
		select {
		case <-s.done:
			return fmt.Errorf("%w: %v (log %s)", errExited, s.waitErr, s.logPath)
		default:
		}
		r, err := s.Do(Admin, http.MethodGet, "/readyz", nil)
		if err == nil && r.Status == http.StatusOK && string(r.Body) == "ok" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubeproc: /readyz not ok after %v: %v %v (log %s)", ReadyTimeout, r, err, s.logPath)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop kills the server (and its own etcd) and waits for the processes to
// end, reporting a failure to the test. It is safe to call more than once,
// and runs at the end of the test that started the server.
func (s *Server) Stop() {
	err := s.stop()
	if s.t == nil {
		return
	}
	if err != nil {
		s.t.Errorf("%v", err)
	}
	if s.t.Failed() && s.logPath != "" {
		s.t.Logf("kubeproc: last lines of %s:\n%s", s.logPath, tail(s.logPath, 20))
	}
}

// Close is Stop for a server from Launch: it returns what went wrong.
func (s *Server) Close() error { return s.stop() }

// LogPath returns the path of the server's log file.
func (s *Server) LogPath() string { return s.logPath }

func (s *Server) stop() error {
	var errs []error
	if s.proc != nil {
		if err := s.proc.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
			errs = append(errs, fmt.Errorf("kubeproc: killing kube-apiserver: %w", err))
		}
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			errs = append(errs, fmt.Errorf("kubeproc: kube-apiserver pid %d still running 10s after SIGKILL", s.proc.Process.Pid))
		}
		s.proc = nil
	}
	if s.etcd != nil {
		if err := s.etcd.stop(); err != nil {
			errs = append(errs, err)
		}
		s.etcd = nil
	}
	return errors.Join(errs...)
}

// Pid returns the server's process id, or 0 once it is stopped.
func (s *Server) Pid() int {
	if s.proc == nil {
		return 0
	}
	return s.proc.Process.Pid
}

func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// freePort returns a port that was free on 127.0.0.1 a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("kubeproc: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// maxBody bounds a response body that Do reads.
const maxBody = 16 << 20

// Response is the status and body of one request.
type Response struct {
	// Status is the HTTP status code.
	Status int
	// Body is the response body.
	Body []byte
}

// String returns the status and the start of the body, for test messages.
func (r *Response) String() string {
	if r == nil {
		return "<no response>"
	}
	b := r.Body
	if len(b) > 512 {
		b = b[:512]
	}
	return fmt.Sprintf("%d %s", r.Status, bytes.TrimSpace(b))
}

// ErrUnknownIdentity means Do was asked to act as an identity that the
// server's token file does not hold.
var ErrUnknownIdentity = errors.New("kubeproc: unknown identity")

// Do sends method path (an API path such as /api/v1/namespaces/x/configmaps,
// with any query) as the named identity, with body if not nil: JSON for
// POST and PUT, a JSON Patch for PATCH. The Content-Type follows from the
// method; DoWith names another.
func (s *Server) Do(identity, method, path string, body []byte) (*Response, error) {
	ct := "application/json"
	if method == http.MethodPatch {
		ct = "application/json-patch+json"
	}
	return s.DoWith(identity, method, path, ct, body)
}

// DoWith is Do with the request's Content-Type given.
func (s *Server) DoWith(identity, method, path, contentType string, body []byte) (*Response, error) {
	tok, ok := s.Tokens[identity]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownIdentity, identity)
	}
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("kubeproc: path %q does not start with /", path)
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxBody {
		return nil, fmt.Errorf("kubeproc: %s %s: response over %d bytes", method, path, maxBody)
	}
	return &Response{Status: resp.StatusCode, Body: b}, nil
}

// Must is Do that fails the test on a transport error or a status other
// than want, and returns the body.
func (s *Server) Must(identity, method, path string, body []byte, want int) []byte {
	if s.t == nil {
		panic("kubeproc: Must is for a server that Start started")
	}
	s.t.Helper()
	r, err := s.Do(identity, method, path, body)
	if err != nil {
		s.t.Fatalf("kubeproc: %s %s as %s: %v", method, path, identity, err)
	}
	if r.Status != want {
		s.t.Fatalf("kubeproc: %s %s as %s: %s; want %d", method, path, identity, r, want)
	}
	return r.Body
}
