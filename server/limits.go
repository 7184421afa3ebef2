package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"slices"
)

// Connection limits of a served receiver (docs/design.md §12). Every
// accepted connection holds a file descriptor; the receiver needs some of
// its own (the database, the anchor file for each anchor write, the
// listeners, an etcd client's connections, the admin socket's and the
// metrics listener's connections). DescriptorReserve is what the default
// cap on TLS connections leaves for those, so that no number of peers
// opening connections can make an anchor write or an administrator's call
// fail for want of a descriptor.
const (
	// MaxConnectionsCeiling bounds the default cap on TLS connections,
	// whatever the descriptor limit.
	MaxConnectionsCeiling = 4096
	// DescriptorReserve is how many descriptors the cap on TLS
	// connections leaves unused below the process's limit (RLIMIT_NOFILE).
	DescriptorReserve = 256
	// AdminSocketMaxConnections caps the admin socket's connections.
	AdminSocketMaxConnections = 32
	// MetricsMaxConnections caps the metrics listener's connections.
	MetricsMaxConnections = 32
	// minMaxConnections is the smallest default worth serving with.
	minMaxConnections = 16
	// AdminConnectionReserve is how many of the TLS listener's
	// connections AdminReserve keeps for administrators' certificates, at
	// most: enough for a few operators and their tools during an
	// incident, few next to a worker fleet's.
	AdminConnectionReserve = 16
)

// AdminReserve returns how many of maxConnections TLS connections to keep
// for administrators (ListenerOptions.Reserved): AdminConnectionReserve,
// and at most a quarter of them, so that a small cap still serves
// workers.
func AdminReserve(maxConnections int) int {
	return max(0, min(AdminConnectionReserve, maxConnections/4))
}

// AdminPeers returns a ListenerOptions.Privileged that admits a connection
// whose verified client certificate names one of admins, read as
// SPIFFECertificate with trustDomain reads it for a request.
func AdminPeers(admins []string, trustDomain string) func(*tls.ConnectionState) bool {
	admins = slices.Clone(admins)
	auth := SPIFFECertificate{TrustDomain: trustDomain}
	return func(cs *tls.ConnectionState) bool {
		id, err := auth.Authenticate(&http.Request{TLS: cs})
		return err == nil && slices.Contains(admins, id)
	}
}

// DefaultMaxConnections returns the cap on TLS connections for a process
// whose descriptor limit is limit: limit minus DescriptorReserve, at most
// MaxConnectionsCeiling. A limit that leaves fewer than 16 is an error.
func DefaultMaxConnections(limit uint64) (int, error) {
	if limit < DescriptorReserve+minMaxConnections {
		return 0, fmt.Errorf("%w: the descriptor limit (RLIMIT_NOFILE) is %d; serving needs at least %d",
			ErrConnectionLimit, limit, DescriptorReserve+minMaxConnections)
	}
	return int(min(limit-DescriptorReserve, MaxConnectionsCeiling)), nil
}

// CheckMaxConnections checks a cap on TLS connections chosen by an
// operator against the process's descriptor limit: it must be at least 1
// and leave DescriptorReserve descriptors below the limit.
func CheckMaxConnections(n int, limit uint64) error {
	switch {
	case n < 1:
		return fmt.Errorf("%w: the cap on connections must be at least 1, not %d", ErrConnectionLimit, n)
	case limit < DescriptorReserve || uint64(n) > limit-DescriptorReserve:
		return fmt.Errorf("%w: %d connections would leave fewer than %d of the %d descriptors (RLIMIT_NOFILE) to the receiver",
			ErrConnectionLimit, n, DescriptorReserve, limit)
	}
	return nil
}

// DescriptorLimit returns the process's current limit on open file
// descriptors (the soft RLIMIT_NOFILE, which the Go runtime raises to the
// hard limit at start).
func DescriptorLimit() (uint64, error) {
	n, err := descriptorLimit()
	if err != nil {
		return 0, fmt.Errorf("server: reading RLIMIT_NOFILE: %w", err)
	}
	return n, nil
}

var errNoRlimit = errors.New("no RLIMIT_NOFILE on this system")
