package kvfence

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"testing"

	"github.com/kvfence/kvfence/audit"
)

// Ensure that IsRefusal recognises each refusal of the receiver's rules,
// also wrapped, and nothing operational or integrity-related.
func TestIsRefusal(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{ErrNotHeld, true},
		{ErrEpochMismatch, true},
		{ErrEpochExhausted, true},
		{ErrScopeExists, true},
		{ErrUnknownScope, true},
		{ErrTargetExists, true},
		{ErrUnknownTarget, true},
		{ErrNotFound, true},
		{ErrRecoveryKeyIsReceiverKey, true},
		{ErrAnchorPresent, true},
		{ErrTTLTooLong, true},
		{fmt.Errorf("%w: %w", ErrInvalidArgument, ErrRecoveryKeyIsReceiverKey), true},
		{nil, false},
		{ErrStorageBusy, false},
		{ErrStorageReserve, false},
		{ErrNotAcknowledged, false},
		{ErrInvalidArgument, false},
		{ErrMalformedRequest, false},
		{ErrKeyMismatch, false},
		{ErrClosed, false},
		{audit.ErrRollbackDetected, false},
		{audit.ErrAnchorMissing, false},
		{errors.New("kvfence: unknown scope"), false}, // the same text is not the sentinel
	}
	for _, tt := range tests {
		if got := IsRefusal(tt.err); got != tt.want {
			t.Errorf("IsRefusal(%v) = %v, want %v", tt.err, got, tt.want)
		}
		if got := IsRefusal(fmt.Errorf("context: %w", tt.err)); tt.err != nil && got != tt.want {
			t.Errorf("IsRefusal(wrapped %v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// Ensure that Init refuses a recovery key equal to the receiver key as
// that refusal, and still as an invalid argument.
func TestInit_RecoveryKeyIsReceiverKey(t *testing.T) {
	dir := t.TempDir()
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	err = Init(dir+"/r.db", &InitOptions{ReceiverID: "r", Key: priv, Anchor: audit.FileAnchor{Path: dir + "/r.anchor"},
		RecoveryKey: priv.Public().(ed25519.PublicKey)})
	if !errors.Is(err, ErrRecoveryKeyIsReceiverKey) || !errors.Is(err, ErrInvalidArgument) || !IsRefusal(err) {
		t.Fatalf("Init with the receiver key as recovery key: %v", err)
	}
}
