package server

import (
	"net/http"
	"time"
)

// revokedCloseDelay is how long an HTTP/2 connection stays open after a
// request on it was refused as revoked. HTTP/2 gives a handler no way to
// close its connection once its answer is on the wire: the answer is
// flushed first, and the connection closed after this delay, during which
// every other request on it is refused as well.
const revokedCloseDelay = 200 * time.Millisecond

// closeConn closes the connection r came on, once its answer is out. For
// HTTP/1 the handler's "Connection: close" has net/http close it.
func closeConn(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor < 2 {
		return
	}
	ci := connInfoOf(r.Context())
	if ci == nil {
		return
	}
	http.NewResponseController(w).Flush()
	time.AfterFunc(revokedCloseDelay, func() { ci.conn.Close() })
}
