package edkey

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"math/big"
	"testing"
)

// Ensure that the two order-8 y values are negatives of each other mod p,
// which they are only if the table was copied right.
func TestOrder8Pair(t *testing.T) {
	sum := new(big.Int).Add(smallOrderY[3], smallOrderY[4])
	if sum.Cmp(fieldP) != 0 {
		t.Fatalf("order-8 y values do not sum to p")
	}
}

// Ensure that every canonical and non-canonical small-order encoding is
// refused, that the identity key really forges (so the check matters),
// and that real keys pass.
func TestCheck(t *testing.T) {
	identity := make(ed25519.PublicKey, 32)
	identity[0] = 1
	forged := make([]byte, 64)
	forged[0] = 1
	if !ed25519.Verify(identity, []byte("any"), forged) {
		t.Fatal("premise: R=identity, S=0 does not verify under the identity key")
	}
	bad := []string{
		"0100000000000000000000000000000000000000000000000000000000000000", // identity
		"ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // order 2 (y = -1)
		"0000000000000000000000000000000000000000000000000000000000000000", // order 4
		"0000000000000000000000000000000000000000000000000000000000000080", // order 4, other sign
		"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05", // order 8
		"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
		"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
		"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
		"edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // y = p (0), non-canonical
		"eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // y = p+1 (1), non-canonical
		"eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
	}
	for _, h := range bad {
		k, _ := hex.DecodeString(h)
		if err := Check(k); !errors.Is(err, ErrSmallOrder) {
			t.Errorf("%s: %v, want ErrSmallOrder", h, err)
		}
	}
	for i := range 50 {
		seed := make([]byte, 32)
		seed[0] = byte(i)
		pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
		if err := Check(pub); err != nil {
			t.Errorf("real key %x refused: %v", pub, err)
		}
	}
	if err := Check(make([]byte, 31)); err == nil || errors.Is(err, ErrSmallOrder) {
		t.Errorf("31-byte key: %v", err)
	}
}
