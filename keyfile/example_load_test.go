package keyfile_test

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/kvfence/kvfence/keyfile"
)

// A private key file that group or others may read is refused before it is
// read, whatever it holds: a receiver key others can read signs nothing.
func ExampleLoadPrivate() {
	dir, err := os.MkdirTemp("", "keyfile-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	_, priv, err := keyfile.Generate(bytes.NewReader(make([]byte, ed25519.SeedSize)))
	if err != nil {
		log.Fatal(err)
	}
	path := filepath.Join(dir, "receiver.key")
	if err := keyfile.Write(path, priv, "receiver-1"); err != nil {
		log.Fatal(err)
	}

	key, err := keyfile.LoadPrivate(path)
	fmt.Println("0600 loads:", err == nil && key.Equal(priv))

	if err := os.Chmod(path, 0o640); err != nil {
		log.Fatal(err)
	}
	_, err = keyfile.LoadPrivate(path)
	fmt.Println("0640 refused:", errors.Is(err, keyfile.ErrKeyPermissions))
	// Output:
	// 0600 loads: true
	// 0640 refused: true
}

// ParsePublic reads one "ssh-ed25519 …" line, as ssh-keygen writes it.
func ExampleParsePublic() {
	_, priv, err := keyfile.Generate(bytes.NewReader(make([]byte, ed25519.SeedSize)))
	if err != nil {
		log.Fatal(err)
	}
	line, err := keyfile.MarshalPublic(priv.Public().(ed25519.PublicKey), "receiver-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(line))
	pub, err := keyfile.ParsePublic(line)
	fmt.Println("parses back:", err == nil && pub.Equal(priv.Public()))

	_, err = keyfile.ParsePublic([]byte("ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ== rsa-key\n"))
	fmt.Println("ssh-rsa refused:", errors.Is(err, keyfile.ErrUnsupportedKeyType))
	// Output:
	// ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop receiver-1
	// parses back: true
	// ssh-rsa refused: true
}
