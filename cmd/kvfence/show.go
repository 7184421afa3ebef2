package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/kvfence/kvfence/kvfence"
)

// bytesJSON shows bytes exactly: text is the bytes as a string when they
// are valid UTF-8 (else null), hex is always their lowercase hex.
type bytesJSON struct {
	Text  *string `json:"text"`
	Hex   string  `json:"hex"`
	Bytes int     `json:"bytes"`
}

func bytesOf(b []byte) *bytesJSON {
	out := &bytesJSON{Hex: hex.EncodeToString(b), Bytes: len(b)}
	if utf8.Valid(b) {
		s := string(b)
		out.Text = &s
	}
	return out
}

// requestShowJSON is a decoded request, as request show prints it and as
// envelope show prints the request an envelope carries. request_sha256 is
// the digest a grant binds (kvfence.RequestDigest); patch is the JSON
// Patch as JSON, and patch_bytes its exact bytes.
type requestShowJSON struct {
	Kind           string          `json:"kind"`
	Bytes          int             `json:"bytes"`
	RequestSHA256  string          `json:"request_sha256"`
	V              uint64          `json:"v"`
	Action         string          `json:"action"`
	Target         string          `json:"target"`
	ExpectRevision *uint64         `json:"expect_revision"`
	ExpectValue    *bytesJSON      `json:"expect_value"`
	Mutation       string          `json:"mutation"`
	Set            *bytesJSON      `json:"set"`
	Patch          json.RawMessage `json:"patch"`
	PatchBytes     *bytesJSON      `json:"patch_bytes"`
}

// envelopeShowJSON is a decoded envelope and the request it carries.
type envelopeShowJSON struct {
	Kind     string          `json:"kind"`
	Bytes    int             `json:"bytes"`
	V        uint64          `json:"v"`
	Scope    string          `json:"scope"`
	Epoch    uint64          `json:"epoch"`
	Grant    string          `json:"grant"`
	Executor string          `json:"executor"`
	Claim    string          `json:"claim"`
	Request  requestShowJSON `json:"request"`
}

// readArtefact reads FILE, or stdin for "-", refusing more than the
// largest request or envelope a receiver accepts by default before it
// holds it all in memory.
func (m *Main) readArtefact(path string) ([]byte, error) {
	var r io.Reader = m.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, kvfence.DefaultMaxEnvelopeSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return b, nil
}

// decodeRequest decodes request bytes for request show and envelope
// show. A file that is not a request is a usage error that names what it
// is, when it is an envelope.
func decodeRequest(cmd, path string, b []byte) (*kvfence.Request, error) {
	req, err := kvfence.DecodeRequest(b, 0)
	if err == nil {
		return req, nil
	}
	if _, eerr := kvfence.DecodeEnvelope(b, 0); eerr == nil {
		return nil, &usageError{msg: fmt.Sprintf("kvfence %s: %s is an envelope, not a request", cmd, path),
			hint: "kvfence envelope show " + path, err: err}
	}
	return nil, &usageError{msg: fmt.Sprintf("kvfence %s: %s: %v", cmd, path, err), hint: "kvfence request build -h", err: err}
}

// decodeEnvelope decodes envelope bytes for envelope show; a request
// given instead is named as one.
func decodeEnvelope(cmd, path string, b []byte) (*kvfence.Envelope, error) {
	env, err := kvfence.DecodeEnvelope(b, 0)
	if err == nil {
		return env, nil
	}
	if _, rerr := kvfence.DecodeRequest(b, 0); rerr == nil {
		return nil, &usageError{msg: fmt.Sprintf("kvfence %s: %s is a request, not an envelope", cmd, path),
			hint: "kvfence request show " + path, err: err}
	}
	return nil, &usageError{msg: fmt.Sprintf("kvfence %s: %s: %v", cmd, path, err), hint: "kvfence envelope build -h", err: err}
}

// requestShowOf describes a decoded request and its exact bytes b.
func requestShowOf(req *kvfence.Request, b []byte) requestShowJSON {
	sum := kvfence.RequestDigest(b)
	out := requestShowJSON{Kind: "request", Bytes: len(b), RequestSHA256: hex.EncodeToString(sum[:]), V: req.V,
		Action: req.Action, Target: req.Target, ExpectRevision: req.ExpectRevision}
	if req.ExpectValue != nil {
		out.ExpectValue = bytesOf(*req.ExpectValue)
	}
	if req.Set != nil {
		out.Mutation, out.Set = "set", bytesOf(*req.Set)
	} else {
		// DecodeRequest accepted the patch as strictly well-formed JSON,
		// so it embeds as it is; the encoder only re-indents it.
		out.Mutation, out.Patch, out.PatchBytes = "patch", json.RawMessage(req.Patch), bytesOf(req.Patch)
	}
	return out
}

// printRequest writes a request's text form: a table of its fields, then
// each value after the table, untouched by the tabwriter.
func printRequest(w io.Writer, indent string, r requestShowJSON) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "%sbytes\t%d\n", indent, r.Bytes)
	fmt.Fprintf(tw, "%srequest sha256\t%s\n", indent, r.RequestSHA256)
	fmt.Fprintf(tw, "%sversion\t%d\n", indent, r.V)
	fmt.Fprintf(tw, "%saction\t%s\n", indent, shownName(r.Action))
	fmt.Fprintf(tw, "%starget\t%s\n", indent, shownName(r.Target))
	if r.ExpectRevision != nil {
		fmt.Fprintf(tw, "%sexpect revision\t%d\n", indent, *r.ExpectRevision)
	} else {
		fmt.Fprintf(tw, "%sexpect revision\t-\n", indent)
	}
	if r.ExpectValue == nil {
		fmt.Fprintf(tw, "%sexpect value\t-\n", indent)
	}
	fmt.Fprintf(tw, "%smutation\t%s\n", indent, r.Mutation)
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.ExpectValue != nil {
		printValue(w, indent, "expect value", r.ExpectValue)
	}
	if r.Set != nil {
		printValue(w, indent, "set", r.Set)
	}
	if r.Patch != nil {
		var pretty bytes.Buffer
		if err := json.Indent(&pretty, r.Patch, indent, "  "); err != nil {
			return err
		}
		if !reviewable(pretty.Bytes()) {
			fmt.Fprintf(w, "%spatch (%d bytes, hex: it holds characters that would not print as themselves)\n%s%s\n",
				indent, r.PatchBytes.Bytes, indent, r.PatchBytes.Hex)
			return nil
		}
		fmt.Fprintf(w, "%spatch (%d bytes, pretty-printed)\n%s%s\n", indent, r.PatchBytes.Bytes, indent, pretty.String())
	}
	return nil
}

// reviewable reports whether b is UTF-8 text that prints as itself, for
// an approver to read: only graphic characters, spaces, tabs and
// newlines. Control characters (terminal escapes) and format characters
// (bidirectional overrides, zero-width characters) would let a value
// read as something it is not.
func reviewable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if r != '\n' && r != '\t' && !unicode.IsGraphic(r) {
			return false
		}
	}
	return true
}

// shownName is an identifier as the text form shows it: as it is when
// every character prints as itself, and otherwise Go-quoted. The wire
// refuses control characters in identifiers, but format characters (a
// zero-width space, a soft hyphen), line separators and unusual spaces
// pass, and "deploy" followed by a zero-width space is another action
// than "deploy" that reads the same.
func shownName(s string) string {
	for _, r := range s {
		if !strconv.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// printValue writes a value as text when it is safe to print, and in hex
// otherwise, with its size, so that nothing in it can pass unseen.
func printValue(w io.Writer, indent, name string, v *bytesJSON) {
	if v.Text != nil && reviewable([]byte(*v.Text)) {
		fmt.Fprintf(w, "%s%s (%d bytes, text)\n%s\n", indent, name, v.Bytes, *v.Text)
		return
	}
	fmt.Fprintf(w, "%s%s (%d bytes, hex)\n%s%s\n", indent, name, v.Bytes, indent, v.Hex)
}
