package server_test

import (
	"errors"
	"testing"

	"github.com/kvfence/kvfence/server"
)

// Ensure that the default cap leaves DescriptorReserve descriptors below
// the limit, at most MaxConnectionsCeiling, and that a chosen cap that
// would eat into the reserve is refused.
func TestConnectionLimits(t *testing.T) {
	for _, tc := range []struct {
		limit uint64
		want  int // 0: an error
	}{
		{4096, 4096 - server.DescriptorReserve},
		{1024, 1024 - server.DescriptorReserve},
		{1 << 20, server.MaxConnectionsCeiling},
		{^uint64(0), server.MaxConnectionsCeiling},
		{server.DescriptorReserve + 16, 16},
		{server.DescriptorReserve + 15, 0},
		{64, 0},
	} {
		got, err := server.DefaultMaxConnections(tc.limit)
		if got != tc.want || (tc.want == 0) != errors.Is(err, server.ErrConnectionLimit) {
			t.Errorf("DefaultMaxConnections(%d) = %d, %v; want %d", tc.limit, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		n     int
		limit uint64
		ok    bool
	}{
		{1, 4096, true},
		{4096 - server.DescriptorReserve, 4096, true},
		{4096 - server.DescriptorReserve + 1, 4096, false},
		{10000, 4096, false},
		{0, 4096, false},
		{-1, 4096, false},
		{1, 100, false},
	} {
		err := server.CheckMaxConnections(tc.n, tc.limit)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, server.ErrConnectionLimit)) {
			t.Errorf("CheckMaxConnections(%d, %d) = %v, want ok %v", tc.n, tc.limit, err, tc.ok)
		}
	}
}
