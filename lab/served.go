package lab

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/internal/fixture"
	"github.com/kvfence/kvfence/internal/pki"
	"github.com/kvfence/kvfence/kvfence"
)

// The served demonstration's identities. Workers and the operator on TLS
// are named by the one SPIFFE ID in their certificates; the operator on the
// admin socket by its uid.
const (
	servedTrustDomain = "spiffe://lab.kvfence"
	servedWorkerA     = servedTrustDomain + "/worker-a"
	servedWorkerB     = servedTrustDomain + "/worker-b"
	servedOperator    = servedTrustDomain + "/operator"
)

// servedStopTimeout bounds the wait for kvfence serve to drain and exit
// after SIGTERM; serve itself gives calls in flight 30s.
const servedStopTimeout = 40 * time.Second

// maxSocketPath is the longest unix socket path every platform the lab runs
// on accepts (sun_path is 104 bytes on the BSDs, 108 on Linux, with the
// terminating NUL).
const maxSocketPath = 103

// servedDemonstration is demonstration 6's directory under the output.
const servedDemonstration = "06-served-receiver"

// socketPath returns the absolute path of the admin socket: in dir, or,
// when that path is too long to be a unix socket's address, in a new
// private directory under the system's temporary directory, which
// cleanup removes.
func socketPath(dir string) (sock string, cleanup func(), err error) {
	if sock, err = filepath.Abs(filepath.Join(dir, "admin.sock")); err != nil {
		return "", nil, fmt.Errorf("lab: %w", err)
	}
	if len(sock) <= maxSocketPath {
		return sock, func() {}, nil
	}
	tmp, err := os.MkdirTemp("", "kvfence-lab-")
	if err != nil {
		return "", nil, fmt.Errorf("lab: a directory for the admin socket: %w", err)
	}
	cleanup = func() { os.RemoveAll(tmp) }
	if sock = filepath.Join(tmp, "admin.sock"); len(sock) > maxSocketPath {
		cleanup()
		return "", nil, fmt.Errorf("lab: the admin socket path %s is %d bytes, longer than a unix socket allows (%d); "+
			"choose a shorter output directory or TMPDIR", sock, len(sock), maxSocketPath)
	}
	return sock, cleanup, nil
}

// servedReport is the served-receiver demonstration's report.json.
type servedReport struct {
	// Demonstration is the demonstration's directory name.
	Demonstration string `json:"demonstration"`
	// Steps are the demonstration's steps, in order.
	Steps []step `json:"steps"`
	// Listen is where serve said it listens for workers.
	Listen string `json:"listen"`
	// AdminSocket is where serve said its admin socket is.
	AdminSocket string `json:"admin_socket"`
	// Identities names each party by the identity the receiver gives it.
	Identities map[string]string `json:"identities"`
	// WorkerHold is worker A's certificate calling POST /v1/hold.
	WorkerHold workerResult `json:"worker_hold"`
	// EpochAfterWorkerHold is the scope's epoch right after that call.
	EpochAfterWorkerHold uint64 `json:"epoch_after_worker_hold"`
	// HoldRequestedAt is when the operator asked for the hold.
	HoldRequestedAt time.Time `json:"hold_requested_at"`
	// HoldCommittedAt is when the receiver committed it.
	HoldCommittedAt time.Time `json:"hold_committed_at"`
	// StaleWhileHeld is A's own envelope sent after the hold, before B's
	// activation.
	StaleWhileHeld workerResult `json:"stale_worker_while_held"`
	// ActivatedAt is when worker B's grant was activated.
	ActivatedAt time.Time `json:"successor_activated_at"`
	// WrongIdentity is A's certificate presenting B's current envelope.
	WrongIdentity workerResult `json:"wrong_identity"`
	// StaleAfterSuccessor is A's own envelope again, after B's activation.
	StaleAfterSuccessor workerResult `json:"stale_worker_after_successor_activated"`
	// WrongIdentityCaller is the caller the receiver recorded for the
	// wrong-identity denial: the identity taken from A's certificate.
	WrongIdentityCaller string `json:"wrong_identity_recorded_caller"`
	// TargetBeforeCurrentWorker is the target just before B submitted.
	TargetBeforeCurrentWorker targetView `json:"target_before_current_worker"`
	// MutationsBeforeCurrentWorker counts the target's changes before B wrote.
	MutationsBeforeCurrentWorker uint64 `json:"mutations_before_current_worker"`
	// Current is worker B's envelope, with B's certificate.
	Current workerResult `json:"current_worker"`
	// FinalTarget is the target at the end.
	FinalTarget targetView `json:"final_target"`
	// AdminActors are the actors the chain recorded on administrative
	// changes.
	AdminActors []string `json:"admin_actors"`
	// ServeExitCode is serve's exit status after SIGTERM.
	ServeExitCode int `json:"serve_exit_code"`
	// VerifyChain is verify-chain's problem code for the served
	// receiver's database at the end.
	VerifyChain string `json:"verify_chain"`
	// VerifyDetail is its evidence, when there is a problem.
	VerifyDetail string `json:"verify_detail,omitempty"`
}

// served is a running kvfence serve and the files of its demonstration.
type served struct {
	// dir holds serve's log; pki holds the certificates, dir unless
	// several receivers share one test CA.
	dir, pki string
	rc       *receiverFiles
	cmd      *exec.Cmd
	log      *os.File
	// ready is what serve printed once it listened.
	ready  serveReady
	exited chan error
	// cleanup removes the admin socket's directory when it is not dir.
	cleanup func()
}

// serveReady is the part of serve's --json output the lab uses.
type serveReady struct {
	// Listen is the address serve listens on for workers.
	Listen string `json:"listen"`
	// AdminSocket is the path of serve's admin socket.
	AdminSocket string `json:"admin_socket"`
	// Receiver is the served receiver's id.
	Receiver string `json:"receiver"`
}

// certFiles returns the certificate and key paths of a party.
func (sv *served) certFiles(name string) (cert, key string) {
	return filepath.Join(sv.pki, name+".crt"), filepath.Join(sv.pki, name+".key")
}

// caFile is the test CA's certificate: clients trust it for the server,
// and serve trusts it for clients.
func (sv *served) caFile() string { return filepath.Join(sv.pki, "ca.crt") }

// clientFor returns an mTLS client of the served receiver holding the
// named party's certificate.
func (sv *served) clientFor(name string) (*client.Client, error) {
	cert, key := sv.certFiles(name)
	cfg, err := clientTLS(cert, key, sv.caFile())
	if err != nil {
		return nil, err
	}
	return client.New("https://"+sv.ready.Listen, cfg)
}

// admin returns a client of the admin socket, where this process is
// admitted by its uid.
func (sv *served) admin() (*client.Client, error) {
	return client.New("unix://"+sv.ready.AdminSocket, nil)
}

func clientTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("lab: %s: %w", certFile, err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("lab: %s: no PEM certificate in it", caFile)
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, Certificates: []tls.Certificate{cert}}, nil
}

// writeCertificates makes the demonstration's test CA, the server's
// certificate for 127.0.0.1 and one client certificate per SPIFFE ID, with
// the code kvfence cert uses, and writes them as NAME.crt and NAME.key.
func writeCertificates(dir string, clients map[string]string) error {
	ca, err := pki.NewCA("kvfence lab CA", time.Hour)
	if err != nil {
		return fmt.Errorf("lab: test CA: %w", err)
	}
	if err := writePair(dir, "ca", ca); err != nil {
		return err
	}
	srv, err := pki.Issue(ca, pki.Options{Name: "kvfence lab receiver", IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
		Server: true, Validity: time.Hour})
	if err != nil {
		return fmt.Errorf("lab: server certificate: %w", err)
	}
	if err := writePair(dir, "server", srv); err != nil {
		return err
	}
	for name, id := range clients {
		p, err := pki.Issue(ca, pki.Options{Name: id, URIs: []string{id}, Client: true, Validity: time.Hour})
		if err != nil {
			return fmt.Errorf("lab: certificate for %s: %w", id, err)
		}
		if err := writePair(dir, name, p); err != nil {
			return err
		}
	}
	return nil
}

func writePair(dir, name string, p pki.Pair) error {
	key, err := p.KeyPEM()
	if err != nil {
		return fmt.Errorf("lab: %s key: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".key"), key, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".crt"), p.CertPEM(), 0o644)
}

// startServe starts kvfence serve on the demonstration's receiver: TLS on
// a port the system picks, the admin socket in the demonstration's
// directory for this process's uid, and the operator's SPIFFE ID as the
// one TLS administrator. It returns once serve printed where it listens.
func (l *lab) startServe(ctx context.Context, dir string, rc *receiverFiles) (*served, error) {
	sock, cleanup, err := socketPath(dir)
	if err != nil {
		return nil, err
	}
	return l.startServeWith(ctx, serveConfig{dir: dir, pki: dir, rc: rc, sock: sock, listen: "127.0.0.1:0",
		log: "serve.log", cleanup: cleanup})
}

// serveConfig is where one kvfence serve process keeps its files and
// listens.
type serveConfig struct {
	// dir receives the log; pki holds ca.crt, server.crt and server.key.
	dir, pki string
	rc       *receiverFiles
	// sock is the admin socket's path, listen the TLS address.
	sock, listen string
	// log is the log file's name in dir; it must not exist.
	log string
	// cleanup runs once serve stopped, or failed to start; nil for none.
	cleanup func()
	// extra are further serve flags.
	extra []string
}

// startServeWith starts kvfence serve as cfg says and returns once serve
// printed where it listens.
func (l *lab) startServeWith(ctx context.Context, cfg serveConfig) (*served, error) {
	cleanup, sock, rc := cfg.cleanup, cfg.sock, cfg.rc
	if cleanup == nil {
		cleanup = func() {}
	}
	sv := &served{dir: cfg.dir, pki: cfg.pki, rc: rc, exited: make(chan error, 1), cleanup: cleanup}
	var err error
	if sv.log, err = os.OpenFile(filepath.Join(cfg.dir, cfg.log), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
		cleanup()
		return nil, fmt.Errorf("lab: %w", err)
	}
	cert, key := sv.certFiles("server")
	args := []string{"serve", "--db", rc.db, "--anchor", rc.anchor, "--key", rc.key, "--lock-timeout", "10s",
		"--listen", cfg.listen, "--tls-cert", cert, "--tls-key", key, "--client-ca", sv.caFile(),
		"--admin", servedOperator, "--admin-socket", sock, "--admin-uid", strconv.Itoa(os.Getuid()), "--json"}
	args = append(args, cfg.extra...)
	sv.cmd = exec.CommandContext(ctx, l.opts.Executable, args...)
	sv.cmd.Env = append(os.Environ(), l.opts.Env...)
	sv.cmd.Stderr = sv.log
	out, err := sv.cmd.StdoutPipe()
	if err != nil {
		sv.log.Close()
		cleanup()
		return nil, fmt.Errorf("lab: %w", err)
	}
	if err := sv.cmd.Start(); err != nil {
		sv.log.Close()
		cleanup()
		return nil, fmt.Errorf("lab: starting kvfence serve: %w", err)
	}
	// serve prints its --json object once it listens, and nothing after.
	type decodedReady struct {
		r   serveReady
		err error
	}
	decoded := make(chan decodedReady, 1)
	go func() {
		var d decodedReady
		d.err = json.NewDecoder(out).Decode(&d.r)
		decoded <- d
	}()
	select {
	case d := <-decoded:
		sv.ready, err = d.r, d.err
	case <-time.After(30 * time.Second):
		err = errors.New("no answer within 30s")
	}
	if err != nil || sv.ready.Listen == "" || sv.ready.AdminSocket != sock {
		// Killing serve closes the pipe the decoder may still be reading.
		sv.cmd.Process.Kill()
		sv.cmd.Wait()
		sv.log.Close()
		cleanup()
		if err == nil {
			err = fmt.Errorf("it printed %+v", sv.ready)
		}
		return nil, fmt.Errorf("lab: kvfence serve did not get ready: %w: %s", err, sv.logText())
	}
	go func() { sv.exited <- sv.cmd.Wait() }()
	return sv, nil
}

// stop sends SIGTERM, as an init system would, and returns serve's exit
// code once it drained and closed the receiver.
func (sv *served) stop() (int, error) {
	if err := sv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		sv.kill()
		return -1, fmt.Errorf("lab: signalling kvfence serve: %w", err)
	}
	select {
	case err := <-sv.exited:
		sv.log.Close()
		sv.cleanup()
		sv.exited = nil
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			return ee.ExitCode(), nil
		}
		if err != nil {
			return -1, fmt.Errorf("lab: kvfence serve: %w", err)
		}
		return 0, nil
	case <-time.After(servedStopTimeout):
		sv.kill()
		return -1, fmt.Errorf("lab: kvfence serve did not stop within %s of SIGTERM: %s", servedStopTimeout, sv.logText())
	}
}

// kill ends serve if it is still running, on a failed demonstration.
func (sv *served) kill() {
	if sv.exited == nil || sv.cmd.Process == nil {
		return
	}
	sv.cmd.Process.Kill()
	select {
	case <-sv.exited:
	case <-time.After(5 * time.Second):
	}
	sv.exited = nil
	sv.log.Close()
	sv.cleanup()
}

func (sv *served) logText() string {
	b, _ := os.ReadFile(sv.log.Name())
	return string(b)
}

// servedReceiver runs demonstration 6: the receiver runs as kvfence serve
// and each worker is a process of its own holding only its own
// certificate. The operator, this process, sets up, holds and activates
// over the admin socket while serve serves; worker A, with A's certificate, tries B's envelope, the hold
// endpoint and its own superseded envelope; worker B, with B's, applies.
func (l *lab) servedReceiver(ctx context.Context, name string) (*servedReport, error) {
	dir := filepath.Join(l.opts.Output, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	l.logf("%s: start", name)
	uid := "unix:uid:" + strconv.Itoa(os.Getuid())
	rep := &servedReport{Demonstration: name, AdminActors: []string{}, Identities: map[string]string{
		"worker-a": servedWorkerA, "worker-b": servedWorkerB, "operator-tls": servedOperator, "operator-socket": uid}}
	record := func(actor, action, result string) {
		rep.Steps = append(rep.Steps, step{At: time.Now().UTC(), Actor: actor, Action: action, Result: result})
	}
	value, patch, err := fixture.Load()
	if err != nil {
		return nil, fmt.Errorf("lab: the backup-policy fixture: %w", err)
	}
	req, err := kvfence.EncodeRequest(&kvfence.Request{V: 1, Action: actionID, Target: fixture.Target, Patch: patch})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "request.cbor"), req, 0o600); err != nil {
		return nil, err
	}
	if err := writeCertificates(dir, map[string]string{"worker-a": servedWorkerA, "worker-b": servedWorkerB,
		"operator": servedOperator}); err != nil {
		return nil, err
	}
	record("operator", "makes a test CA, a server certificate and SPIFFE-ID client certificates", "")
	// A served receiver's database must exist before serve opens it, so
	// initialisation is the one step that is not a call to the service.
	rc, err := newReceiverFiles(dir, "lab-"+name)
	if err != nil {
		return nil, err
	}
	record("operator", "init", "")

	sv, err := l.startServe(ctx, dir, rc)
	if err != nil {
		return nil, err
	}
	defer sv.kill()
	rep.Listen, rep.AdminSocket = sv.ready.Listen, sv.ready.AdminSocket
	record("serve", "listening", "tls "+sv.ready.Listen+", admin socket "+sv.ready.AdminSocket)

	admin, err := sv.admin()
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	if _, err := admin.CreateScope(ctx, fixture.Scope); err != nil {
		return nil, fmt.Errorf("lab: scope create over the admin socket: %w", err)
	}
	if _, err := admin.CreateTarget(ctx, fixture.Scope, fixture.Target, value); err != nil {
		return nil, fmt.Errorf("lab: target create over the admin socket: %w", err)
	}
	actA, err := admin.Activate(ctx, kvfence.ActivateRequest{Scope: fixture.Scope, Executor: servedWorkerA,
		Claim: "claim-a", Request: req, Decision: "approval-1"})
	if err != nil {
		return nil, fmt.Errorf("lab: activate over the admin socket: %w", err)
	}
	record(uid, "scope create, target create, activate grant for worker-a (admin socket)", actA.ID)
	if err := writeAssignment(dir, "a", actA.Assignment()); err != nil {
		return nil, err
	}

	// The operator's certificate on TLS is a positive control: the 403
	// below is about the worker's identity, not an endpoint no one may use.
	op, err := sv.clientFor("operator")
	if err != nil {
		return nil, err
	}
	defer op.Close()
	st, err := op.Status(ctx, fixture.Scope)
	if err != nil {
		return nil, fmt.Errorf("lab: the operator's status over mTLS: %w", err)
	}
	record(servedOperator, "status (mTLS)", scopeLine(st))

	a, err := l.startServedWorker(ctx, sv, "worker-a", filepath.Join(dir, "envelope-a.cbor"))
	if err != nil {
		return nil, err
	}
	defer a.kill()
	record("worker-a", "holds its envelope and A's certificate, and pauses", "")

	if rep.WorkerHold, err = a.command("hold " + fixture.Scope); err != nil {
		return nil, err
	}
	record("worker-a", "POST /v1/hold with a worker certificate", rep.WorkerHold.Outcome+" "+strconv.Itoa(rep.WorkerHold.HTTPStatus))
	s, err := scopeStatus(ctx, admin)
	if err != nil {
		return nil, err
	}
	rep.EpochAfterWorkerHold = s.Epoch

	hold, err := admin.Hold(ctx, kvfence.HoldRequest{Scopes: []string{fixture.Scope}, Reason: "worker-a lease expired"})
	if err != nil {
		return nil, fmt.Errorf("lab: hold over the admin socket: %w", err)
	}
	rep.HoldRequestedAt, rep.HoldCommittedAt = hold.HoldRequestedAt, hold.HoldCommittedAt
	record(uid, "hold (admin socket, while serving)", fmt.Sprintf("epoch %d -> %d", hold.Scopes[0].PreviousEpoch, hold.Scopes[0].Epoch))

	if rep.StaleWhileHeld, err = a.command("submit"); err != nil {
		return nil, err
	}
	record("worker-a", "submit its own envelope (superseded grant), scope held", decision(rep.StaleWhileHeld))

	actB, err := admin.Activate(ctx, kvfence.ActivateRequest{Scope: fixture.Scope, Executor: servedWorkerB,
		Claim: "claim-b", Request: req, Decision: "approval-1-reassigned"})
	if err != nil {
		return nil, fmt.Errorf("lab: activate over the admin socket: %w", err)
	}
	record(uid, "activate grant for worker-b (admin socket)", actB.ID)
	if err := writeAssignment(dir, "b", actB.Assignment()); err != nil {
		return nil, err
	}
	if l.hooks.afterServedActivate != nil {
		if err := l.hooks.afterServedActivate(sv); err != nil {
			return nil, err
		}
	}
	// What A does next means something only if B's grant is the active one
	// and B has not written: B's envelope is then the current authority.
	if s, err = scopeStatus(ctx, admin); err != nil {
		return nil, err
	}
	// A served activation's answer has no creation time; the scope's
	// status has the activation's.
	rep.ActivatedAt = s.ActivatedAt
	if s.Mode != kvfence.ModeOpen || s.Epoch != actB.Epoch || s.ActiveGrant != actB.ID {
		return nil, fmt.Errorf("%w: %s: before worker-a's attempts the scope is %s, want open at epoch %d with grant %s",
			ErrPrecondition, name, scopeLine(client.Status{Scopes: []kvfence.ScopeStatus{s}}), actB.Epoch, actB.ID)
	}
	t, err := admin.Target(ctx, fixture.Target)
	if err != nil {
		return nil, err
	}
	if t.Revision != 1 || string(t.Value) != string(value) {
		return nil, fmt.Errorf("%w: %s: target was at revision %d (%s) before worker-a's attempts, want the original",
			ErrPrecondition, name, t.Revision, t.Value)
	}

	if rep.WrongIdentity, err = a.command("submit-file " + filepath.Join(dir, "envelope-b.cbor")); err != nil {
		return nil, err
	}
	record("worker-a", "submit worker-b's current envelope with A's certificate", decision(rep.WrongIdentity))
	if rep.StaleAfterSuccessor, err = a.command("submit"); err != nil {
		return nil, err
	}
	record("worker-a", "submit its own envelope (superseded grant), successor active, before its first write", decision(rep.StaleAfterSuccessor))
	if err := a.finish(); err != nil {
		return nil, err
	}

	if t, err = admin.Target(ctx, fixture.Target); err != nil {
		return nil, err
	}
	rep.TargetBeforeCurrentWorker = targetView{t.Revision, string(t.Value)}
	rep.MutationsBeforeCurrentWorker = t.Revision - 1

	b, err := l.startServedWorker(ctx, sv, "worker-b", filepath.Join(dir, "envelope-b.cbor"))
	if err != nil {
		return nil, err
	}
	defer b.kill()
	if rep.Current, err = b.command("submit"); err != nil {
		return nil, err
	}
	if err := b.finish(); err != nil {
		return nil, err
	}
	record("worker-b", "submit (current grant) with B's certificate", decision(rep.Current))
	for _, w := range []workerResult{rep.StaleWhileHeld, rep.WrongIdentity, rep.StaleAfterSuccessor} {
		if rep.Current.AuditSeq <= w.AuditSeq {
			return nil, fmt.Errorf("%w: %s: worker-b was decided (seq %d) before worker-a's attempt (seq %d)",
				ErrPrecondition, name, rep.Current.AuditSeq, w.AuditSeq)
		}
	}
	if t, err = admin.Target(ctx, fixture.Target); err != nil {
		return nil, err
	}
	rep.FinalTarget = targetView{t.Revision, string(t.Value)}

	code, err := sv.stop()
	if err != nil {
		return nil, err
	}
	rep.ServeExitCode = code
	record("operator", "SIGTERM to kvfence serve", "exit "+strconv.Itoa(code))
	if code != 0 {
		return nil, fmt.Errorf("lab: kvfence serve exited %d after SIGTERM: %s", code, sv.logText())
	}

	err = rc.with(func(r *kvfence.Receiver) error {
		err := r.Events(0, func(e kvfence.Event) bool {
			if e.Entry.Actor != "" && !slices.Contains(rep.AdminActors, e.Entry.Actor) {
				rep.AdminActors = append(rep.AdminActors, e.Entry.Actor)
			}
			if e.Entry.Seq == rep.WrongIdentity.AuditSeq {
				rep.WrongIdentityCaller = e.Entry.Executor
			}
			return true
		})
		if err != nil {
			return err
		}
		return exportState(dir, r)
	})
	if err != nil {
		return nil, err
	}
	v, err := rc.verifyChain()
	if err != nil {
		return nil, err
	}
	rep.VerifyChain, rep.VerifyDetail = string(v.Problem), v.Detail
	record("operator", "verify-chain", rep.VerifyChain)
	if err := writeJSON(filepath.Join(dir, "report.json"), rep); err != nil {
		return nil, err
	}
	l.logf("%s: worker hold %d; worker-a %s, %s, %s; worker-b %s; verify-chain %s", name, rep.WorkerHold.HTTPStatus,
		decision(rep.StaleWhileHeld), decision(rep.WrongIdentity), decision(rep.StaleAfterSuccessor), decision(rep.Current), rep.VerifyChain)
	return rep, nil
}

// writeAssignment writes what a worker is handed, as JSON, and the envelope
// built from it.
func writeAssignment(dir, worker string, a client.Assignment) error {
	if err := writeJSON(filepath.Join(dir, "assignment-"+worker+".json"), a); err != nil {
		return err
	}
	env, err := a.Envelope()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "envelope-"+worker+".cbor"), env, 0o600)
}

// scopeStatus reads the fixture scope's status over the admin socket.
func scopeStatus(ctx context.Context, admin *client.Client) (kvfence.ScopeStatus, error) {
	st, err := admin.Status(ctx, fixture.Scope)
	if err != nil {
		return kvfence.ScopeStatus{}, fmt.Errorf("lab: status over the admin socket: %w", err)
	}
	if len(st.Scopes) != 1 {
		return kvfence.ScopeStatus{}, fmt.Errorf("lab: status of %s listed %d scopes", fixture.Scope, len(st.Scopes))
	}
	return st.Scopes[0], nil
}

func scopeLine(st client.Status) string {
	if len(st.Scopes) != 1 {
		return fmt.Sprintf("%d scopes", len(st.Scopes))
	}
	s := st.Scopes[0]
	return fmt.Sprintf("epoch %d %s grant %q", s.Epoch, s.Mode, s.ActiveGrant)
}

// startServedWorker starts a served worker process with the named party's
// certificate and its envelope, and waits until it holds both.
func (l *lab) startServedWorker(ctx context.Context, sv *served, name, envelope string, extra ...string) (*workerProc, error) {
	cert, key := sv.certFiles(name)
	args := []string{ServedWorkerCommand, "--server", "https://" + sv.ready.Listen, "--tls-cert", cert, "--tls-key", key,
		"--tls-ca", sv.caFile(), "--envelope", envelope}
	args = append(args, extra...)
	return l.startProc(ctx, name, args)
}

// command sends one command line to a served worker and returns its
// result line.
func (w *workerProc) command(line string) (workerResult, error) {
	var res workerResult
	if _, err := io.WriteString(w.stdin, line+"\n"); err != nil {
		return res, w.ended(fmt.Errorf("lab: worker: %w: %s", err, w.stderr))
	}
	out, err := w.stdout.ReadString('\n')
	if err != nil {
		return res, w.ended(fmt.Errorf("lab: worker gave no answer to %q: %w: %s", line, err, w.stderr))
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		return res, fmt.Errorf("lab: worker printed %q: %w", out, err)
	}
	return res, nil
}

// finish closes a served worker's commands and waits for it to exit.
func (w *workerProc) finish() error {
	w.stdin.Close()
	if err := w.wait(); err != nil {
		return w.ended(fmt.Errorf("lab: worker failed (%w): %s", err, w.stderr))
	}
	return nil
}

// ServedWorkerCommand is the hidden subcommand under which the lab
// re-executes its own binary as a worker of a served receiver: a client
// that holds one certificate and one envelope, as a deployed worker would.
const ServedWorkerCommand = "lab-served-worker"

// ServedWorkerMain is a served worker process. It loads its certificate
// and envelope, says "ready", then runs one command per stdin line until
// stdin closes, printing one JSON result line for each: "submit" (its own
// envelope), "submit-file PATH" (an envelope it got hold of) and
// "hold SCOPE" (the administrative hold, which a worker may not call), and,
// given --kube-server, "kube-write FILE": the request in FILE sent to the
// Kubernetes API server with the worker's own token, as a worker that goes
// around the receiver would. It
// returns an exit code. It has no mode a deployed client lacks: it can do
// nothing that kvfence submit --server with the same certificate cannot.
func ServedWorkerMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(ServedWorkerCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	srv := fs.String("server", "", "https://HOST:PORT of the served receiver")
	cert := fs.String("tls-cert", "", "the worker's client certificate")
	key := fs.String("tls-key", "", "its key")
	ca := fs.String("tls-ca", "", "the CA of the receiver's certificate")
	envPath := fs.String("envelope", "", "the worker's own envelope")
	kubeServer := fs.String("kube-server", "", "https://HOST:PORT of a Kubernetes API server, for kube-write")
	kubeCA := fs.String("kube-ca", "", "the API server's CA")
	kubeToken := fs.String("kube-token", "", "a file holding the worker's own bearer token")
	timeout := fs.Duration(timeoutFlag, DefaultWorkerTimeout, "the worker's whole life, after which it gives up")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, cancel := withBound(ctx, *timeout)
	defer cancel()
	kc, err := newKubeClient(*kubeServer, *kubeCA, *kubeToken)
	if err != nil {
		fmt.Fprintf(stderr, "lab served worker: %v\n", err)
		return 1
	}
	if err := runServedWorker(ctx, *srv, *cert, *key, *ca, *envPath, kc, stdin, stdout); err != nil {
		fmt.Fprintf(stderr, "lab served worker: %v\n", err)
		return 1
	}
	return 0
}

func runServedWorker(ctx context.Context, srv, cert, key, ca, envPath string, kc *kubeClient, stdin io.Reader, stdout io.Writer) error {
	if srv == "" || cert == "" || key == "" || ca == "" || envPath == "" {
		return errors.New("--server, --tls-cert, --tls-key, --tls-ca and --envelope are required")
	}
	own, err := os.ReadFile(envPath)
	if err != nil {
		return err
	}
	cfg, err := clientTLS(cert, key, ca)
	if err != nil {
		return err
	}
	c, err := client.New(srv, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	ready := time.Now().UTC()
	if _, err := fmt.Fprintln(stdout, "ready"); err != nil {
		return err
	}
	in := bufio.NewReader(stdin)
	for {
		// Each command comes from the parent, or the worker's bound ends
		// the wait for it.
		text, err := readLine(ctx, in)
		if errors.Is(err, io.EOF) && text == "" {
			return nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("waiting for a command: %w", err)
		}
		text = strings.TrimSuffix(text, "\n")
		verb, arg, _ := strings.Cut(text, " ")
		res := workerResult{ReadyAt: ready, SubmittedAt: time.Now().UTC()}
		switch verb {
		case "submit", "submit-file":
			env := own
			if verb == "submit-file" {
				if env, err = os.ReadFile(arg); err != nil {
					return err
				}
			}
			out, err := c.Submit(ctx, env)
			res.DecidedAt = time.Now().UTC()
			if err != nil {
				callError(&res, err)
				break
			}
			res.Outcome, res.Reason, res.Detail = string(out.Outcome), string(out.Reason), out.Detail
			res.Revision, res.AuditSeq = out.Revision, out.AuditSeq
			res.Dispatch, res.Version = string(out.Dispatch), out.Version
		case "kube-write":
			err := kc.write(ctx, arg, &res)
			res.DecidedAt = time.Now().UTC()
			if err != nil {
				return err
			}
		case "hold":
			h, err := c.Hold(ctx, kvfence.HoldRequest{Scopes: []string{arg}, Reason: "a worker tries to hold"})
			res.DecidedAt = time.Now().UTC()
			if err != nil {
				callError(&res, err)
				break
			}
			res.Outcome, res.AuditSeq = "held", h.AuditSeq
		default:
			return fmt.Errorf("unknown command %q", text)
		}
		if err := printResult(stdout, res); err != nil {
			return err
		}
	}
}

// callError records an error answer as the worker's result: what the
// receiver refused is evidence, not the worker's failure.
func callError(res *workerResult, err error) {
	res.Outcome, res.Detail = OutcomeCallFailed, err.Error()
	if errors.Is(err, client.ErrForbidden) {
		res.Outcome = OutcomeForbidden
	}
	if ce := (*client.Error)(nil); errors.As(err, &ce) {
		res.HTTPStatus, res.ErrorCode = ce.Status, ce.Code
	}
}

// Outcomes of a served worker's call that the receiver refused before
// deciding anything.
const (
	// OutcomeForbidden: the receiver refused the caller's identity for the
	// call (HTTP 403).
	OutcomeForbidden = "forbidden"
	// OutcomeCallFailed: any other error answer, or no answer.
	OutcomeCallFailed = "call_failed"
)
