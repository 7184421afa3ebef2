// Package edkey refuses Ed25519 public keys of small order.
//
// A public key A of order 1, 2, 4 or 8 lets anyone forge signatures: with
// A the identity, R = identity and S = 0 verify for every message, and the
// other small-order points do the same for a fraction of messages. No key
// made from a private key is of small order (the secret scalar is a
// multiple of the cofactor times the base point of prime order), so
// refusing them costs an honest signer nothing.
//
// The check needs no curve arithmetic: the small-order points of
// edwards25519 are exactly the points whose y coordinate is 0, 1, p-1 or
// one of the two order-8 values below, so an encoding (canonical or not,
// either sign bit) is refused when its y, reduced mod p, is one of those
// five values. This covers the eight canonical encodings and every
// non-canonical one that crypto/ed25519 decodes to the same points.
package edkey

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
)

// ErrSmallOrder means a public key is a point of small order (or the
// encoding of one), under which signatures can be forged without any
// private key.
var ErrSmallOrder = errors.New("ed25519 public key is of small order")

// fieldP is 2^255 - 19, the field order of edwards25519.
var fieldP = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 255), big.NewInt(19))

// order8Y is the y coordinate of two of the four points of order 8, as
// little-endian encodings with the sign bit clear; the other two share
// them with the other sign, and the pair sums to p.
var order8Y = [2]string{
	"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
	"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
}

// smallOrderY holds, reduced mod p, the y of every small-order point.
var smallOrderY = func() []*big.Int {
	ys := []*big.Int{big.NewInt(0), big.NewInt(1), new(big.Int).Sub(fieldP, big.NewInt(1))}
	for _, h := range order8Y {
		b, err := hex.DecodeString(h)
		if err != nil {
			panic(err)
		}
		ys = append(ys, yOf(b))
	}
	return ys
}()

// yOf returns the y coordinate an encoding names, reduced mod p: the
// little-endian integer of its low 255 bits.
func yOf(enc []byte) *big.Int {
	be := make([]byte, len(enc))
	for i, c := range enc {
		be[len(enc)-1-i] = c
	}
	be[0] &= 0x7f
	return new(big.Int).Mod(new(big.Int).SetBytes(be), fieldP)
}

// Check returns ErrSmallOrder when pub is a small-order point, and an
// error when it is not 32 bytes; it returns nil for any other key (it does
// not check that pub decodes to a point at all: ed25519.Verify refuses
// signatures under keys that do not).
func Check(pub ed25519.PublicKey) error {
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("ed25519 public key is %d bytes, want %d", len(pub), ed25519.PublicKeySize)
	}
	y := yOf(pub)
	for _, s := range smallOrderY {
		if y.Cmp(s) == 0 {
			return fmt.Errorf("%w: %x", ErrSmallOrder, []byte(pub))
		}
	}
	return nil
}
