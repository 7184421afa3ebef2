package spiffetest

import (
	"context"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/pki"
	"github.com/spiffe/go-spiffe/v2/proto/spiffe/workload"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Ensure that the Workload API, like SPIRE's, refuses a call without the
// "workload.spiffe.io: true" header (InvalidArgument) and answers one with
// it: the tests that use it then show that the client sends it.
func TestWorkloadAPI_SecurityHeader(t *testing.T) {
	ca, err := pki.NewCA("CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	w := Start(t)
	w.Set(t, Issue(t, ca, "spiffe://example.org/w"), ca.Cert)
	conn, err := grpc.NewClient("unix://"+w.Path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := workload.NewSpiffeWorkloadAPIClient(conn)
	for _, tc := range []struct {
		name string
		md   metadata.MD
		want codes.Code
	}{
		{"none", nil, codes.InvalidArgument},
		{"false", metadata.Pairs("workload.spiffe.io", "false"), codes.InvalidArgument},
		{"true", metadata.Pairs("workload.spiffe.io", "true"), codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if tc.md != nil {
				ctx = metadata.NewOutgoingContext(ctx, tc.md)
			}
			stream, err := api.FetchX509SVID(ctx, &workload.X509SVIDRequest{})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := stream.Recv()
			if got := status.Code(err); got != tc.want {
				t.Fatalf("code %v (%v), want %v", got, err, tc.want)
			}
			if tc.want == codes.OK && (len(resp.Svids) != 1 || resp.Svids[0].SpiffeId != "spiffe://example.org/w") {
				t.Fatalf("answer %v", resp)
			}
		})
	}
}
