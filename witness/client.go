package witness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/checkpoint"
)

// ErrUnexpectedResponse means a witness answered with a status or body
// this protocol does not have.
var ErrUnexpectedResponse = errors.New("unexpected answer from witness")

// maxResponseSize bounds what the client reads from a witness.
const maxResponseSize = checkpoint.MaxNoteSize + 4096

// DefaultMaxAge is how old the cosignature of a Latest answer may be
// when ClientOptions.MaxAge is zero. The witness cosigns its answer when
// it reads it, so an honest answer is seconds old; an older one is a
// replay or a cache, which can show the witness behind where it is.
const DefaultMaxAge = time.Minute

// Client talks to one witness.
type Client struct {
	base   *url.URL
	http   *http.Client
	cosv   *checkpoint.CosignatureVerifier
	maxAge time.Duration
}

// ClientOptions configures NewClient.
type ClientOptions struct {
	// HTTPClient sends the requests; nil means http.DefaultClient.
	HTTPClient *http.Client
	// Verifier, when set, checks every cosignature the witness returns:
	// a line that does not verify is ErrUnexpectedResponse wrapping the
	// checkpoint package's error.
	Verifier *checkpoint.CosignatureVerifier
	// MaxAge bounds the age of the cosignature on a Latest answer, by the
	// Verifier's clock: zero means DefaultMaxAge; a negative value is
	// refused. It applies only with a Verifier.
	MaxAge time.Duration
}

// NewClient returns a client of the witness at baseURL (http or https,
// the prefix under which /add-checkpoint is served).
func NewClient(baseURL string, opts ClientOptions) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("witness URL %q is not an http or https URL without query", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	if opts.HTTPClient == nil {
		opts.HTTPClient = http.DefaultClient
	}
	if opts.MaxAge < 0 {
		return nil, fmt.Errorf("witness client: negative maximum age %v", opts.MaxAge)
	}
	if opts.MaxAge == 0 {
		opts.MaxAge = DefaultMaxAge
	}
	return &Client{base: u, http: opts.HTTPClient, cosv: opts.Verifier, maxAge: opts.MaxAge}, nil
}

func (c *Client) url(path string, query url.Values) string {
	u := *c.base
	u.Path += path
	u.RawQuery = query.Encode()
	return u.String()
}

// AddCheckpoint asks the witness to cosign signedNote, which extends the
// checkpoint of oldSize by proof, and returns the cosignature: with a
// Verifier, the one line by that key (other lines are ignored, a line by
// that key that does not verify is an error); without, every line the
// witness returned. Errors:
// a *ConflictError (ErrConflict) with the witness's size, ErrBadProof,
// ErrUnknownLog, ErrForbidden, ErrBadRequest, ErrUnexpectedResponse, or
// the transport's.
func (c *Client) AddCheckpoint(ctx context.Context, oldSize uint64, proof tlog.TreeProof, signedNote []byte) (string, error) {
	body := AddCheckpointRequest{OldSize: oldSize, Proof: proof, SignedNote: signedNote}.Marshal()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url(AddCheckpointPath, nil), bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	status, ctype, resp, err := c.do(req)
	if err != nil {
		return "", err
	}
	switch status {
	case http.StatusOK:
	case http.StatusConflict:
		size, perr := checkpoint.ParseSize(strings.TrimSuffix(string(resp), "\n"))
		if ctype != SizeContentType || !bytes.HasSuffix(resp, []byte("\n")) || perr != nil {
			return "", fmt.Errorf("%w: a 409 without a %s body", ErrUnexpectedResponse, SizeContentType)
		}
		return "", &ConflictError{Size: size}
	default:
		return "", statusError(status, resp)
	}
	return c.cosignatureLine(resp, signedNote)
}

// RecoverCheckpoint asks the witness to accept signedNote, the receiver's
// checkpoint of a chain re-admitted by the signed recovery admission
// admission, in place of the checkpoint it holds, and returns its
// cosignature line as AddCheckpoint does. proof is the consistency proof
// from the tree the admission admits (its admitted seq) to signedNote's.
// With a Verifier, the cosignature must also be at most MaxAge old, as on
// a Latest answer. A refusal is ErrForbidden together with
// ErrNoRecoveryKey, ErrRecoveryRefused or ErrRecoveryReplayed when the
// witness says which; else ErrBadRequest, ErrUnknownLog,
// ErrUnexpectedResponse or the transport's error.
func (c *Client) RecoverCheckpoint(ctx context.Context, admission []byte, proof tlog.TreeProof, signedNote []byte) (string, error) {
	body := RecoverCheckpointRequest{Admission: admission, Proof: proof, SignedNote: signedNote}.Marshal()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url(RecoverCheckpointPath, nil), bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	status, _, resp, err := c.do(req)
	if err != nil {
		return "", err
	}
	if status != http.StatusOK {
		err := statusError(status, resp)
		said := strings.TrimSpace(string(resp))
		for _, sentinel := range []error{ErrNoRecoveryKey, ErrRecoveryRefused, ErrRecoveryReplayed} {
			if status == http.StatusForbidden && strings.HasPrefix(said, sentinel.Error()+":") {
				return "", fmt.Errorf("%w: %w", sentinel, err)
			}
		}
		return "", err
	}
	line, err := c.cosignatureLine(resp, signedNote)
	if err != nil || c.cosv == nil {
		return line, err
	}
	// An acceptance forgives a witness its divergence, so, as a Latest
	// answer, it must be of now: the witness cosigned this very note
	// before, when it was the log's head, and a line it gave then, played
	// back, would otherwise stand for an acceptance it refuses now.
	noteText, _, _ := strings.Cut(string(signedNote), "\n\n")
	at, err := c.cosv.VerifyLine([]byte(noteText+"\n"), line)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrUnexpectedResponse, err)
	}
	if at.Before(c.cosv.Now().Add(-c.maxAge)) {
		return "", fmt.Errorf("%w: recovery cosignature made at %s, over %v ago", ErrUnexpectedResponse, at.Format(time.RFC3339), c.maxAge)
	}
	return line, nil
}

// cosignatureLine checks a 200 answer to a cosigning request for
// signedNote: signature lines, and with a Verifier the one by its key.
func (c *Client) cosignatureLine(resp, signedNote []byte) (string, error) {
	// One or more signature lines (a witness may cosign with several keys).
	text := string(resp)
	if text == "" || !strings.HasSuffix(text, "\n") {
		return "", fmt.Errorf("%w: the answer is not signature lines", ErrUnexpectedResponse)
	}
	lines := strings.SplitAfter(text, "\n")
	lines = lines[:len(lines)-1]
	for _, l := range lines {
		if !strings.HasPrefix(l, "— ") {
			return "", fmt.Errorf("%w: the answer is not signature lines", ErrUnexpectedResponse)
		}
	}
	if c.cosv == nil {
		return text, nil
	}
	noteText, _, ok := strings.Cut(string(signedNote), "\n\n")
	if !ok {
		return "", fmt.Errorf("%w: the request's note has no body", ErrBadRequest)
	}
	for _, l := range lines {
		_, err := c.cosv.VerifyLine([]byte(noteText+"\n"), l)
		switch {
		case err == nil:
			return l, nil
		case errors.Is(err, checkpoint.ErrWrongKey):
			continue // another key of the witness, or another format
		default:
			return "", fmt.Errorf("%w: %w", ErrUnexpectedResponse, err)
		}
	}
	return "", fmt.Errorf("%w: no cosignature by %s+%08x", ErrUnexpectedResponse, c.cosv.Name(), c.cosv.KeyHash())
}

// Latest returns the latest checkpoint the witness cosigned for origin,
// with its cosignature, ErrNoCheckpoint when the witness says it has none,
// or ErrUnknownLog when it says it does not know the origin; a 404 that
// says neither, or a checkpoint of another origin, is
// ErrUnexpectedResponse.
// With a Verifier, the cosignature is checked (not the log's signature,
// which the caller checks with the log's key): every line by the
// verifier's key must verify and be at most MaxAge old.
func (c *Client) Latest(ctx context.Context, origin string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url(LatestPath, url.Values{"origin": {origin}}), nil)
	if err != nil {
		return nil, err
	}
	status, _, resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	switch status {
	case http.StatusOK:
	case http.StatusNotFound:
		// Only the witness's own words count as "none": a 404 from a
		// wrong URL or a proxy must not read as a witness that has seen
		// nothing, which a quorum counts as an answer.
		said := strings.TrimSpace(string(resp))
		switch {
		case strings.HasPrefix(said, ErrNoCheckpoint.Error()+":"):
			return nil, fmt.Errorf("%w (witness said %q)", ErrNoCheckpoint, said)
		case strings.HasPrefix(said, ErrUnknownLog.Error()+":"):
			return nil, fmt.Errorf("%w (witness said %q)", ErrUnknownLog, said)
		}
		return nil, fmt.Errorf("%w: a 404 that does not say the witness has no checkpoint: %q", ErrUnexpectedResponse, truncate(said))
	default:
		return nil, statusError(status, resp)
	}
	text, sigs, ok := strings.Cut(string(resp), "\n\n")
	if !ok {
		return nil, fmt.Errorf("%w: the answer is not a signed note", ErrUnexpectedResponse)
	}
	body := []byte(text + "\n")
	cp, err := checkpoint.Parse(body)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnexpectedResponse, err)
	}
	if cp.Origin != origin {
		return nil, fmt.Errorf("%w: asked for %q, got a checkpoint of %q", ErrUnexpectedResponse, origin, cp.Origin)
	}
	if c.cosv == nil {
		return resp, nil
	}
	if _, _, err := checkpoint.Open(resp, c.cosv); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnexpectedResponse, err)
	}
	oldest := c.cosv.Now().Add(-c.maxAge)
	for _, line := range strings.SplitAfter(sigs, "\n") {
		if line == "" {
			continue
		}
		at, err := c.cosv.VerifyLine(body, line)
		switch {
		case errors.Is(err, checkpoint.ErrWrongKey):
			continue
		case err != nil:
			return nil, fmt.Errorf("%w: %w", ErrUnexpectedResponse, err)
		case at.Before(oldest):
			return nil, fmt.Errorf("%w: cosignature made at %s, over %v ago", ErrUnexpectedResponse, at.Format(time.RFC3339), c.maxAge)
		}
	}
	return resp, nil
}

func (c *Client) do(req *http.Request) (int, string, []byte, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseSize+1))
	if err != nil {
		return 0, "", nil, err
	}
	if len(body) > maxResponseSize {
		return 0, "", nil, fmt.Errorf("%w: answer over %d bytes", ErrUnexpectedResponse, maxResponseSize)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), body, nil
}

// truncate bounds a witness's words quoted in an error.
func truncate(msg string) string {
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return msg
}

func statusError(status int, body []byte) error {
	msg := truncate(strings.TrimSpace(string(body)))
	var sentinel error
	switch status {
	case http.StatusBadRequest:
		sentinel = ErrBadRequest
	case http.StatusNotFound:
		sentinel = ErrUnknownLog
	case http.StatusForbidden:
		sentinel = ErrForbidden
	case http.StatusUnprocessableEntity:
		sentinel = ErrBadProof
	default:
		return fmt.Errorf("%w: status %d: %q", ErrUnexpectedResponse, status, msg)
	}
	return fmt.Errorf("%w (witness said %q)", sentinel, msg)
}
