package keyfile_test

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/kvfence/kvfence/keyfile"
)

// Generate a receiver key, store it, and load both halves back: the private
// key to sign checkpoints, the public key to verify them.
func Example() {
	dir, err := os.MkdirTemp("", "keyfile-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// Real callers pass nil (crypto/rand); a fixed seed keeps the output stable.
	seed := bytes.Repeat([]byte{1}, ed25519.SeedSize)
	_, priv, err := keyfile.Generate(bytes.NewReader(seed))
	if err != nil {
		log.Fatal(err)
	}

	path := filepath.Join(dir, "receiver.key")
	if err := keyfile.Write(path, priv, "receiver-1"); err != nil {
		log.Fatal(err)
	}

	signer, err := keyfile.LoadPrivate(path)
	if err != nil {
		log.Fatal(err)
	}
	verifier, err := keyfile.LoadPublic(path + ".pub")
	if err != nil {
		log.Fatal(err)
	}

	msg := []byte("checkpoint")
	fmt.Println("signature verifies:", ed25519.Verify(verifier, msg, ed25519.Sign(signer, msg)))

	line, err := os.ReadFile(path + ".pub")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(line))

	// A second Write to the same path is refused.
	err = keyfile.Write(path, priv, "receiver-1")
	fmt.Println("overwrite refused:", err != nil)
	// Output:
	// signature verifies: true
	// ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIqI4910CfGV/VLbLTy6XXLKZwm/HZQSG/N0iAG0D29c receiver-1
	// overwrite refused: true
}
