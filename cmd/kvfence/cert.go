package main

import (
	"context"
	"flag"
	"fmt"
	"github.com/kvfence/kvfence/internal/api"
	"net"
	"os"
	"time"

	"github.com/kvfence/kvfence/internal/pki"
	"github.com/kvfence/kvfence/server"
)

// CertCommand makes the certificates for trying kvfence serve: a test CA,
// a server certificate and SPIFFE-ID client certificates. It is built in,
// rather than documented as an openssl recipe, because a client
// certificate here needs exactly one URI SAN and the client-auth usage,
// which openssl expresses only through an extensions file per certificate:
// a recipe a new user gets wrong in ways that show up only as a 401.
type CertCommand struct{ m *Main }

// certJSON is the --json shape of cert.
type certJSON struct {
	Cert     string   `json:"cert"`
	Key      string   `json:"key"`
	Subject  string   `json:"subject"`
	URIs     []string `json:"uris"`
	DNS      []string `json:"dns"`
	IPs      []string `json:"ips"`
	NotAfter *string  `json:"not_after"`
}

// Run runs the command.
func (c *CertCommand) Run(ctx context.Context, args []string) error {
	if len(args) == 0 || isHelpFlag(args[0]) {
		c.Usage()
		if len(args) == 0 {
			return &usageError{msg: "kvfence cert: missing kind (ca, server or client)", hint: "kvfence cert -h"}
		}
		return flag.ErrHelp
	}
	kind := args[0]
	if kind != "ca" && kind != "server" && kind != "client" {
		return &usageError{msg: fmt.Sprintf("kvfence cert %s: unknown kind", kind), hint: "kvfence cert -h"}
	}
	fs := newFlagSet("cert " + kind)
	out := fs.String("out", "", "")
	caPrefix := fs.String("ca", "", "")
	validity := fs.Duration("validity", 30*24*time.Hour, "")
	name := fs.String("name", "", "")
	id := fs.String("spiffe-id", "", "")
	var dns, ips stringList
	fs.Var(&dns, "dns", "")
	fs.Var(&ips, "ip", "")
	asJSON := fs.Bool("json", false, "")
	if err := parseFlags(fs, c.Usage, args[1:], 0); err != nil {
		return err
	}
	if err := require("cert "+kind, [2]string{"out", *out}); err != nil {
		return err
	}
	if err := refuseOutStdout("cert "+kind, *out, "two files (PREFIX.crt and PREFIX.key)"); err != nil {
		return err
	}
	if *validity <= 0 {
		return &usageError{msg: "kvfence cert: --validity must be positive", hint: "kvfence cert -h"}
	}
	var pair pki.Pair
	var err error
	switch kind {
	case "ca":
		if *name == "" {
			*name = "kvfence test CA"
		}
		pair, err = pki.NewCA(*name, *validity)
	case "server", "client":
		if err := require("cert "+kind, [2]string{"ca", *caPrefix}); err != nil {
			return err
		}
		opts := pki.Options{Name: *name, Validity: *validity}
		if kind == "server" {
			if len(dns) == 0 && len(ips) == 0 {
				return &usageError{msg: "kvfence cert server: give --dns NAME or --ip ADDR", hint: "kvfence cert -h"}
			}
			opts.Server, opts.DNS = true, dns
			for _, s := range ips {
				ip := net.ParseIP(s)
				if ip == nil {
					return &usageError{msg: fmt.Sprintf("kvfence cert server: --ip %q is not an IP address", s)}
				}
				opts.IPs = append(opts.IPs, ip)
			}
			// A subject to read in the output and in TLS errors: the
			// first name the certificate is valid for.
			if opts.Name == "" && len(dns) > 0 {
				opts.Name = dns[0]
			} else if opts.Name == "" {
				opts.Name = opts.IPs[0].String()
			}
		} else {
			if err := require("cert client", [2]string{"spiffe-id", *id}); err != nil {
				return err
			}
			u, err := parseSPIFFE(*id)
			if err != nil {
				return &usageError{msg: fmt.Sprintf("kvfence cert client: --spiffe-id: %v", err), hint: "--spiffe-id spiffe://example.org/agent/worker-a"}
			}
			opts.Client, opts.URIs = true, []string{u}
			if opts.Name == "" {
				opts.Name = u
			}
		}
		ca, err := loadCA(*caPrefix)
		if err != nil {
			return err
		}
		pair, err = pki.Issue(ca, opts)
		if err != nil {
			return err
		}
	}
	if err != nil {
		return err
	}
	keyPEM, err := pair.KeyPEM()
	if err != nil {
		return err
	}
	certPath, keyPath := *out+".crt", *out+".key"
	if err := writeNew(keyPath, keyPEM, 0o600); err != nil {
		return err
	}
	if err := writeNew(certPath, pair.CertPEM(), 0o644); err != nil {
		os.Remove(keyPath)
		return err
	}
	res := certJSON{Cert: certPath, Key: keyPath, Subject: pair.Cert.Subject.CommonName, URIs: []string{},
		DNS: append([]string{}, pair.Cert.DNSNames...), IPs: []string{}, NotAfter: api.Time(pair.Cert.NotAfter)}
	for _, u := range pair.Cert.URIs {
		res.URIs = append(res.URIs, u.String())
	}
	for _, ip := range pair.Cert.IPAddresses {
		res.IPs = append(res.IPs, ip.String())
	}
	if *asJSON {
		return writeJSON(c.m.Stdout, res)
	}
	tw := newTable(c.m.Stdout)
	fmt.Fprintf(tw, "cert\t%s\n", res.Cert)
	fmt.Fprintf(tw, "key\t%s (0600)\n", res.Key)
	fmt.Fprintf(tw, "subject\t%s\n", res.Subject)
	for _, u := range res.URIs {
		fmt.Fprintf(tw, "spiffe id\t%s\n", u)
	}
	fmt.Fprintf(tw, "not after\t%s\n", humanTime(pair.Cert.NotAfter))
	return tw.Flush()
}

// parseSPIFFE checks a SPIFFE ID as the server will.
func parseSPIFFE(s string) (string, error) { return server.ParseSPIFFEID(s) }

// loadCA reads PREFIX.crt and PREFIX.key, refusing a key that group or
// others may read.
func loadCA(prefix string) (pki.Pair, error) {
	fi, err := os.Stat(prefix + ".key")
	if err != nil {
		return pki.Pair{}, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return pki.Pair{}, fmt.Errorf("%s.key is readable by group or others (mode %v); chmod 600 it", prefix, fi.Mode().Perm())
	}
	certPEM, err := os.ReadFile(prefix + ".crt")
	if err != nil {
		return pki.Pair{}, err
	}
	keyPEM, err := os.ReadFile(prefix + ".key")
	if err != nil {
		return pki.Pair{}, err
	}
	p, err := pki.Load(certPEM, keyPEM)
	if err != nil {
		return pki.Pair{}, fmt.Errorf("--ca %s: %w", prefix, err)
	}
	if !p.Cert.IsCA {
		return pki.Pair{}, fmt.Errorf("--ca %s.crt is not a CA certificate", prefix)
	}
	return p, nil
}

// Usage prints the command's help.
func (c *CertCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage:

	kvfence cert ca --out PREFIX [--name N] [--validity 720h]
	kvfence cert server --ca PREFIX --out PREFIX (--dns NAME | --ip ADDR)...
	kvfence cert client --ca PREFIX --spiffe-id spiffe://DOMAIN/PATH --out PREFIX

Makes certificates for trying kvfence serve: a test CA, a server
certificate for DNS names and IP addresses, and client certificates whose
one URI SAN is a SPIFFE ID, the identity the receiver gives the caller.
Writes PREFIX.crt and PREFIX.key (mode 0600, PKCS #8, ECDSA P-256) and
never overwrites a file. For production, use your own PKI (a SPIFFE
implementation, or your CA) with the same shape: exactly one
spiffe:// URI SAN per client certificate.

Arguments:

	--out PREFIX
	    Where to write PREFIX.crt and PREFIX.key.
	--ca PREFIX
	    The CA made with "kvfence cert ca" (PREFIX.crt, PREFIX.key).
	--spiffe-id ID
	    The client's SPIFFE ID, e.g. spiffe://example.org/agent/worker-a.
	--dns NAME, --ip ADDR
	    A name or address the server certificate is valid for; repeat.
	--name N
	    The subject's common name, for people.
	--validity DURATION
	    The certificate's lifetime (default 720h).
`+usageJSON)
}
