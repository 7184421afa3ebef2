// Package server serves a running kvfence receiver over HTTP (docs/design.md §12):
// an http.Handler over a *kvfence.Receiver that workers submit envelopes to
// and operators administer while it serves, so that a scope can be held
// during an incident without stopping the service that embeds the receiver.
//
// # Guarantee
//
// The caller's identity comes from the channel, never from the request: an
// Authenticator computes it once per request, at the edge, from the TLS
// connection's verified client certificate (SPIFFECertificate: its one
// SPIFFE ID) or from a unix socket's peer credentials (UnixPeer:
// "unix:uid:N", admitted only from an allow-list), and the handler passes
// it to kvfence.Receiver.Submit as the caller, where the fence compares it
// with the envelope's and the grant's executor. Administrative endpoints
// admit only the identities in Options.Admins, and every change they make
// records that identity as the audit entry's actor.
//
// A request that is refused before the receiver sees it (401, 403 for the
// endpoint, 413, 415, 400) is neither decided nor recorded. A fault, a
// panic or a shutdown is answered with an error status (500, 503) and
// logged, and never turns into a decision: only the receiver decides, and
// a denial is a result (403 with the decision), not an error.
//
// # Endpoints
//
//	POST /v1/submit    envelope bytes (application/cbor); 200 applied or
//	                   already_applied, 403 denied, the decision in both
//	POST /v1/submit/batch  a CBOR array of envelopes; 200 with each one's
//	                   {"status","result"} or {"status","error"}, in order
//	POST /v1/scopes    {"scope"[,"max_grant_ttl"]}                  admin
//	POST /v1/targets   {"scope","target","value_b64"}               admin
//	POST /v1/activate  {"scope","executor","claim","request_b64",
//	                    "ttl","decision","epoch"}                   admin
//	POST /v1/hold      {"scopes":[...],"reason"[,"hold_id"]         admin
//	                    [,"expect_epoch"]}; the answer carries the signed
//	                   "checkpoint", each scope's signed "ack" and
//	                   "repeated" (a repeat of hold_id wrote nothing);
//	                   hold_id_conflict and epoch_mismatch are 409
//	                   or {"all":true,"reason"}: every open scope, in one
//	                   transaction; the answer adds "already_held"
//	GET  /v1/status[?scope=S]                                       admin
//	GET  /v1/target?target=K                                        admin
//	GET  /v1/receipt?scope=S&action=A[&proof=1]                     admin
//	GET  /v1/receipts?scope=S&claim=C   {"receipts":[...]}          admin
//	GET  /v1/grant?id=G                                             admin
//	GET  /v1/target-list[?scope=S]      {"targets":[...]}           admin
//	GET  /v1/events?since=N[&limit=M]   {"events":[...]}            admin
//	GET  /healthz      200 while the receiver is open, to any caller
//	                   the Authenticator admits
//
// Bodies and answers are JSON in the CLI's --json shapes. Every answer that
// is not a result is {"error":{"code","message"}} with a stable code: the
// receiver's sentinels keep theirs (storage_busy is 503, unknown_scope 404,
// scope_exists 409, ...), and a fault is 500 "internal" with its detail
// only in the server's log.
//
// # Caveats
//
// The handler sets no timeouts and no TLS configuration: the http.Server
// that runs it must (ReadHeaderTimeout, ReadTimeout, WriteTimeout,
// MaxHeaderBytes, and tls.RequireAndVerifyClientCert against the workers'
// CA for SPIFFECertificate). Whoever holds a certificate of that CA with
// an ID in Options.Admins, or runs as an admitted uid, is an administrator.
//
// Each connection holds a file descriptor. A server whose peers may be
// hostile serves through a Listener, which caps the connections open at
// once (DefaultMaxConnections leaves DescriptorReserve descriptors for the
// receiver's anchor writes and its admin socket), completes each TLS
// handshake within a deadline, and backs off when accepting fails.
// Credentials reload the certificate and client CA; with them as
// SPIFFECertificate.Roots and ConnContext as the server's ConnContext, a
// request on a connection whose client certificate no longer verifies is
// refused and the connection closed. ListenUnixSocket makes an admin
// socket in a directory that only the service can change.
//
// Unix peer credentials are read on Linux only; elsewhere UnixPeer admits
// no one. A submit whose client goes away after it was queued is still
// decided and recorded; its answer is lost, and retrying the same envelope
// answers already_applied.
package server
