package main

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/witness"
)

// WitnessInitCommand makes a witness: its Ed25519 key and its database.
type WitnessInitCommand struct{ m *Main }

// witnessInitJSON is the --json shape of witness init.
type witnessInitJSON struct {
	ID             string `json:"id"`
	DB             string `json:"db"`
	PrivateKeyFile string `json:"private_key_file"`
	PublicKeyFile  string `json:"public_key_file"`
	PublicKey      string `json:"public_key"`
	// VerifierKey is the witness's cosignature vkey (signature type 0x04).
	VerifierKey string `json:"verifier_key"`
}

// Run runs the command.
func (c *WitnessInitCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("witness init")
	asJSON := fs.Bool("json", false, "")
	id := fs.String("id", "", "")
	keyPath := fs.String("key", "", "")
	db := fs.String("db", "", "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	if err := require("witness init", [2]string{"id", *id}, [2]string{"key", *keyPath}, [2]string{"db", *db}); err != nil {
		return err
	}
	if err := checkpoint.CheckName(*id); err != nil {
		return &usageError{msg: fmt.Sprintf("kvfence witness init: --id: %v", err), hint: "a name such as witness.example.com/w1, without spaces or \"+\""}
	}
	for _, p := range []string{*db, *keyPath, *keyPath + ".pub"} {
		if _, err := os.Lstat(p); err == nil {
			return &usageError{msg: fmt.Sprintf("kvfence witness init: %s exists; nothing was written", p), hint: "choose new paths"}
		}
	}
	pub, priv, err := keyfile.Generate(nil)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := keyfile.Write(*keyPath, priv, *id); err != nil {
		return err
	}
	if err := witness.Create(*db, *id, pub); err != nil {
		// Nothing half-made: the key of a witness that does not exist goes too.
		os.Remove(*keyPath)
		os.Remove(*keyPath + ".pub")
		return err
	}
	vkey, err := checkpoint.CosignatureVerifierKey(*id, pub)
	if err != nil {
		return err
	}
	res := witnessInitJSON{ID: *id, DB: *db, PrivateKeyFile: *keyPath, PublicKeyFile: *keyPath + ".pub",
		PublicKey: publicLine(pub), VerifierKey: vkey}
	if *asJSON {
		return writeJSON(c.m.Stdout, res)
	}
	tw := newTable(c.m.Stdout)
	fmt.Fprintf(tw, "witness\t%s\n", res.ID)
	fmt.Fprintf(tw, "database\t%s\n", res.DB)
	fmt.Fprintf(tw, "private key\t%s (mode 0600)\n", res.PrivateKeyFile)
	fmt.Fprintf(tw, "public key\t%s\n", res.PublicKeyFile)
	fmt.Fprintf(tw, "verifier key\t%s\n", res.VerifierKey)
	return tw.Flush()
}

// Usage prints the command's help.
func (c *WitnessInitCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence witness init --id NAME --key FILE --db FILE [--json]

Makes a witness: a new Ed25519 key at FILE (mode 0600) and FILE.pub, and
its database. NAME is the key name of its cosignatures, such as
witness.example.com/w1 (no spaces, no "+"). Existing files are never
overwritten; if the database cannot be made, the key is removed again.

Arguments:

	--id NAME
	    The witness's name.
	--key FILE
	    Where to write the private key; the public key goes to FILE.pub.
	--db FILE
	    The witness database to create.
`+usageJSON)
}

// WitnessTrustCommand makes a witness accept a receiver's checkpoints.
type WitnessTrustCommand struct{ m *Main }

// witnessTrustJSON is the --json shape of witness trust.
type witnessTrustJSON struct {
	Receiver    string `json:"receiver"`
	Origin      string `json:"origin"`
	VerifierKey string `json:"verifier_key"`
	Fingerprint string `json:"fingerprint"`
	// RecoveryFingerprint is the fingerprint of the recovery key given
	// with --recovery-pub, or empty.
	RecoveryFingerprint string `json:"recovery_fingerprint,omitempty"`
}

// Run runs the command.
func (c *WitnessTrustCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("witness trust")
	asJSON := fs.Bool("json", false, "")
	db := fs.String("db", "", "")
	name := fs.String("name", "", "")
	pubPath := fs.String("receiver-pub", "", "")
	recoveryPath := fs.String("recovery-pub", "", "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	if err := require("witness trust", [2]string{"db", *db}, [2]string{"name", *name}, [2]string{"receiver-pub", *pubPath}); err != nil {
		return err
	}
	pub, err := keyfile.LoadPublic(*pubPath)
	if err != nil {
		return err
	}
	origin, err := checkpoint.ReceiverOrigin(*name, pub)
	if err != nil {
		return &usageError{msg: fmt.Sprintf("kvfence witness trust: --name: %v", err), hint: "the receiver id given to kvfence init"}
	}
	vkey, err := checkpoint.VerifierKey(origin, pub)
	if err != nil {
		return err
	}
	var recoveryPub ed25519.PublicKey
	if *recoveryPath != "" {
		if recoveryPub, err = keyfile.LoadPublic(*recoveryPath); err != nil {
			return err
		}
	}
	st, err := witness.OpenStore(*db, witness.StoreOptions{})
	if err != nil {
		return err
	}
	defer st.Close()
	if recoveryPub != nil {
		// Checked before anything is stored, so that a refused recovery
		// key leaves the witness as it was, not trusting the receiver
		// without it; TrustRecovery checks again in its transaction.
		if recoveryPub.Equal(pub) {
			return fmt.Errorf("kvfence witness trust: --recovery-pub is the receiver's own key; the recovery key must be held apart")
		}
		if err := checkpoint.CheckPublicKey(recoveryPub); err != nil {
			return fmt.Errorf("kvfence witness trust: --recovery-pub: %w", err)
		}
		if prev, err := st.Log(origin); err == nil && len(prev.RecoveryKey) != 0 && !prev.RecoveryKey.Equal(recoveryPub) {
			return fmt.Errorf("kvfence witness trust: %w: %s has another recovery key", witness.ErrAlreadyTrusted, origin)
		}
	}
	if err := st.Trust(origin, vkey); err != nil {
		return err
	}
	res := witnessTrustJSON{Receiver: *name, Origin: origin, VerifierKey: vkey, Fingerprint: audit.KeyFingerprint(pub).String()}
	if recoveryPub != nil {
		if err := st.TrustRecovery(origin, recoveryPub); err != nil {
			return err
		}
		res.RecoveryFingerprint = audit.KeyFingerprint(recoveryPub).String()
	}
	if *asJSON {
		return writeJSON(c.m.Stdout, res)
	}
	tw := newTable(c.m.Stdout)
	fmt.Fprintf(tw, "receiver\t%s\n", res.Receiver)
	fmt.Fprintf(tw, "origin\t%s\n", res.Origin)
	fmt.Fprintf(tw, "verifier key\t%s\n", res.VerifierKey)
	fmt.Fprintf(tw, "fingerprint\t%s\n", res.Fingerprint)
	if res.RecoveryFingerprint != "" {
		fmt.Fprintf(tw, "recovery key\t%s\n", res.RecoveryFingerprint)
	}
	return tw.Flush()
}

// Usage prints the command's help.
func (c *WitnessTrustCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence witness trust --db FILE --name RECEIVER --receiver-pub FILE [--recovery-pub FILE] [--json]

Makes the witness accept the checkpoints of the receiver RECEIVER (its id,
as given to kvfence init) signed by the key in FILE (an ssh-ed25519 line, as
kvfence keygen writes FILE.pub). The receiver's origin is

	kvfence/receiver/<RECEIVER percent-encoded>/<hex SHA-256 key fingerprint>

so a receiver with a new key is a new log. Trusting a receiver again with
the same key changes nothing; another key for the same origin cannot occur.
A key of small order (under which anyone can sign) is refused.

The database has one writer at a time: stop kvfence witness serve first,
trust, then start it again. While serve holds the database, trust waits a
second and exits 5, saying so.

Arguments:

	--db FILE
	    The witness database.
	--name RECEIVER
	    The receiver id.
	--receiver-pub FILE
	    The receiver's public key.
	--recovery-pub FILE
	    The receiver's recovery public key (kvfence init --recovery-key).
	    With it, the witness accepts the receiver's recovered chain over
	    the checkpoint it holds when the recovery key's admission names
	    that checkpoint (kvfence admission new --witnessed); without it,
	    never. Given once; another key later is refused.
`+usageJSON)
}

// WitnessServeCommand serves a witness over TLS.
type WitnessServeCommand struct{ m *Main }

// witnessServeJSON is what witness serve prints once it listens.
type witnessServeJSON struct {
	ID     string `json:"id"`
	Listen string `json:"listen"`
	Logs   int    `json:"logs"`
}

// Run runs the command until its context is done (SIGTERM or SIGINT).
func (c *WitnessServeCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("witness serve")
	asJSON := fs.Bool("json", false, "")
	db := fs.String("db", "", "")
	keyPath := fs.String("key", "", "")
	listen := fs.String("listen", "", "")
	certPath := fs.String("tls-cert", "", "")
	tlsKeyPath := fs.String("tls-key", "", "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	if err := require("witness serve", [2]string{"db", *db}, [2]string{"key", *keyPath}, [2]string{"listen", *listen},
		[2]string{"tls-cert", *certPath}, [2]string{"tls-key", *tlsKeyPath}); err != nil {
		return err
	}
	priv, err := loadPrivate(*keyPath)
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(*certPath, *tlsKeyPath)
	if err != nil {
		return fmt.Errorf("witness serve: TLS certificate: %w", err)
	}
	st, err := witness.OpenStore(*db, witness.StoreOptions{})
	if err != nil {
		return err
	}
	defer st.Close()
	w, err := witness.New(st, priv, witness.Options{})
	if err != nil {
		return err
	}
	logs, err := st.Logs()
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(c.m.Stderr, nil))
	srv := &http.Server{Handler: witness.NewServer(w, log), ReadHeaderTimeout: serveReadHeaderTimeout,
		ReadTimeout: serveReadTimeout, WriteTimeout: serveWriteTimeout, IdleTimeout: serveIdleTimeout,
		MaxHeaderBytes: serveMaxHeaderBytes, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(l, "", "") }()
	res := witnessServeJSON{ID: st.ID(), Listen: l.Addr().String(), Logs: len(logs)}
	if *asJSON {
		writeJSON(c.m.Stdout, res)
	} else {
		fmt.Fprintf(c.m.Stdout, "serving witness %s on %s (%d trusted logs)\n", res.ID, res.Listen, res.Logs)
	}
	select {
	case err := <-errc:
		return fmt.Errorf("witness serve: %w", err)
	case <-ctx.Done():
	}
	// Drain: a request in flight either committed and gets its answer, or
	// gets none; nothing is signed for a state that was not committed.
	sctx, cancel := context.WithTimeout(context.Background(), serveDrainTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
		return fmt.Errorf("witness serve: not every request finished within %v", serveDrainTimeout)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Usage prints the command's help.
func (c *WitnessServeCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence witness serve --db FILE --key FILE --listen HOST:PORT
	--tls-cert FILE --tls-key FILE [--json]

Serves the witness over HTTPS until SIGTERM or SIGINT, which let requests
in flight finish (up to 30 s). It answers POST /add-checkpoint as
c2sp.org/tlog-witness says, GET /<hex SHA-256 of an origin>/checkpoint,
and kvfence's own GET /kvfence/v1/latest?origin=O (the latest checkpoint it
cosigned for O, with a fresh cosignature; 404 when none). Once listening it
prints its address (with --json: {"id","listen","logs"}).

Arguments:

	--db FILE
	    The witness database (kvfence witness init).
	--key FILE
	    The witness's private key; it must match the database's.
	--listen HOST:PORT
	    The address to listen on; port 0 picks one.
	--tls-cert FILE, --tls-key FILE
	    The server certificate and key (PEM), as kvfence cert server makes.
`+usageJSON)
}
