package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"github.com/kvfence/kvfence/internal/testbin"
	"github.com/kvfence/kvfence/kvfence"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Ensure that every hostile or damaged file the CLI may be pointed at
// (database, anchor, private key, public key) is refused with a message
// that says what is wrong and the exit code of the CLI contract, that a
// writer refused this way changes nothing, and that the two harmless
// cases (a world-readable anchor, an anchor behind the database) work.
func TestHostileFiles(t *testing.T) {
	type testCase struct {
		name string
		// damage changes the receiver's files; it runs after c.receiver().
		damage func(t *testing.T, c *cli)
		args   []string
		code   int
		stderr []string
	}
	submit := []string{"submit", "--as", "worker-a", "--envelope", "a.cbor"}
	status := []string{"status"}
	var tests []testCase
	// The database.
	for _, cmd := range [][]string{status, submit, {"verify-chain", "--pub", "receiver.key.pub"}} {
		tests = append(tests,
			testCase{"database cut short/" + cmd[0], func(t *testing.T, c *cli) { truncate(t, c.path("receiver.db"), 3*4096) },
				cmd, ExitError, []string{"not a kvfence receiver database", "Try: check that --db"}},
			testCase{"database emptied/" + cmd[0], func(t *testing.T, c *cli) { truncate(t, c.path("receiver.db"), 0) },
				cmd, ExitError, []string{"is empty"}},
			testCase{"database of another format/" + cmd[0], func(t *testing.T, c *cli) {
				writeFile(t, c.path("receiver.db"), append([]byte("SQLite format 3\x00"), make([]byte, 16384)...), 0o600)
			}, cmd, ExitError, []string{"not a kvfence receiver database"}},
			testCase{"database with damaged pages/" + cmd[0], func(t *testing.T, c *cli) { damageLeafPages(t, c.path("receiver.db")) },
				cmd, ExitError, []string{"damaged bbolt page structure", "Try: check that --db"}},
			testCase{"database is a directory/" + cmd[0], func(t *testing.T, c *cli) {
				if err := os.Remove(c.path("receiver.db")); err != nil {
					t.Fatal(err)
				}
				if err := os.Mkdir(c.path("receiver.db"), 0o700); err != nil {
					t.Fatal(err)
				}
			}, cmd, ExitError, []string{"is not a regular file"}},
		)
	}
	// The anchor, for a reader and for a writer.
	for _, cmd := range [][]string{status, submit} {
		tests = append(tests,
			testCase{"anchor of garbage/" + cmd[0], func(t *testing.T, c *cli) {
				writeFile(t, c.path("receiver.anchor"), []byte("not an anchor\n"), 0o600)
			}, cmd, ExitIntegrity, []string{"bad anchor file", "the file is damaged", "Try: the anchor file is damaged"}},
			testCase{"anchor cut short/" + cmd[0], func(t *testing.T, c *cli) {
				data := readFile(t, c.path("receiver.anchor"))
				writeFile(t, c.path("receiver.anchor"), data[:len(data)/2], 0o600)
			}, cmd, ExitIntegrity, []string{"bad anchor file"}},
			testCase{"anchor emptied/" + cmd[0], func(t *testing.T, c *cli) { truncate(t, c.path("receiver.anchor"), 0) },
				cmd, ExitIntegrity, []string{"bad anchor file"}},
			// A change in one slot only falls back to the other, older one,
			// as after a torn write (TestAnchorDamaged); both slots changed
			// leave nothing to trust.
			testCase{"anchor with a changed byte in each slot/" + cmd[0], func(t *testing.T, c *cli) {
				data := readFile(t, c.path("receiver.anchor"))
				for off := 0; ; {
					i := bytes.Index(data[off:], []byte("\nsig "))
					if i < 0 {
						break
					}
					data[off+i+10] ^= 0x01
					off += i + 10
				}
				writeFile(t, c.path("receiver.anchor"), data, 0o600)
			}, cmd, ExitIntegrity, []string{"anchor"}},
			testCase{"anchor writable by others/" + cmd[0], func(t *testing.T, c *cli) { chmod(t, c.path("receiver.anchor"), 0o666) },
				cmd, ExitIntegrity, []string{"writable by group or others", "Try: the anchor file may be written by group or others"}},
			testCase{"anchor is a symbolic link/" + cmd[0], func(t *testing.T, c *cli) {
				if err := os.Rename(c.path("receiver.anchor"), c.path("real.anchor")); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(c.path("real.anchor"), c.path("receiver.anchor")); err != nil {
					t.Fatal(err)
				}
			}, cmd, ExitIntegrity, []string{"is a symbolic link", "Try: --anchor must name a regular file"}},
			testCase{"anchor is a directory/" + cmd[0], func(t *testing.T, c *cli) {
				if err := os.Remove(c.path("receiver.anchor")); err != nil {
					t.Fatal(err)
				}
				if err := os.Mkdir(c.path("receiver.anchor"), 0o700); err != nil {
					t.Fatal(err)
				}
			}, cmd, ExitIntegrity, []string{"is a directory"}},
			testCase{"anchor of another receiver/" + cmd[0], func(t *testing.T, c *cli) {
				c.must(0, "init", "--id", "other-receiver", "--db", c.path("other.db"), "--anchor", c.path("other.anchor"),
					"--recovery-pub", c.path("recovery.key.pub"))
				writeFile(t, c.path("receiver.anchor"), readFile(t, c.path("other.anchor")), 0o600)
			}, cmd, ExitIntegrity, []string{"receiver mismatch"}},
			// Harmless: the anchor holds nothing secret, and a database
			// ahead of its anchor is the window a crash leaves.
			testCase{"anchor readable by others/" + cmd[0], func(t *testing.T, c *cli) { chmod(t, c.path("receiver.anchor"), 0o644) },
				cmd, map[string]int{"status": ExitOK, "submit": ExitOK}[cmd[0]], nil},
			testCase{"anchor behind the database/" + cmd[0], func(t *testing.T, c *cli) {
				old := readFile(t, c.path("receiver.anchor"))
				c.must(0, "scope", "create", "--scope", "moves-the-anchor")
				writeFile(t, c.path("receiver.anchor"), old, 0o600)
			}, cmd, ExitOK, nil},
		)
	}
	// The receiver's private key, for a writer.
	for _, k := range []struct {
		name   string
		damage func(t *testing.T, path string)
		stderr string
	}{
		{"garbage", func(t *testing.T, p string) { writeFile(t, p, []byte("not a key\n"), 0o600) }, "malformed key"},
		{"cut short", func(t *testing.T, p string) { d := readFile(t, p); writeFile(t, p, d[:len(d)/2], 0o600) }, "malformed key"},
		{"empty", func(t *testing.T, p string) { truncate(t, p, 0) }, "malformed key"},
		{"readable by others", func(t *testing.T, p string) { chmod(t, p, 0o644) }, "accessible by group or others"},
		{"a symbolic link", func(t *testing.T, p string) {
			if err := os.Rename(p, p+".real"); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(p+".real", p); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
		{"a directory", func(t *testing.T, p string) {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(p, 0o700); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		{"the public key", func(t *testing.T, p string) { writeFile(t, p, readFile(t, p+".pub"), 0o600) }, "malformed key"},
	} {
		tests = append(tests, testCase{"private key " + k.name,
			func(t *testing.T, c *cli) { k.damage(t, c.path("receiver.key")) },
			[]string{"hold", "--scope", fixtureScope, "--reason", "r"}, ExitError, []string{k.stderr}})
	}
	// A public key given with --pub.
	for _, k := range []struct {
		name   string
		data   string
		stderr string
	}{
		{"garbage", "not a key\n", "unsupported key type"},
		{"cut short", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI\n", "malformed key"},
		{"a private key", "-----BEGIN OPENSSH PRIVATE KEY-----\n", "malformed key"},
	} {
		tests = append(tests, testCase{"public key " + k.name,
			func(t *testing.T, c *cli) { writeFile(t, c.path("receiver.key.pub"), []byte(k.data), 0o644) },
			[]string{"verify-chain", "--pub", "receiver.key.pub"}, ExitError, []string{k.stderr}})
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCLI(t)
			c.receiver()
			c.activate("worker-a", "claim-a", "a.cbor")
			before := c.json(0, "observe", "events")
			for _, name := range []string{"receiver.anchor", "receiver.key"} {
				writeFile(t, c.path(name+".orig"), readFile(t, c.path(name)), 0o600)
			}
			tt.damage(t, c)
			args := make([]string, len(tt.args))
			for i, a := range tt.args {
				if strings.HasSuffix(a, ".cbor") || strings.HasSuffix(a, ".pub") {
					a = c.path(a)
				}
				args[i] = a
			}
			r := c.run(args...)
			if r.code != tt.code {
				t.Fatalf("kvfence %s: got %s\nwant exit %d", strings.Join(tt.args, " "), r, tt.code)
			}
			for _, s := range tt.stderr {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, r.stderr)
				}
			}
			if tt.code != ExitOK && r.stdout != "" && tt.args[0] != "submit" && tt.args[0] != "verify-chain" {
				t.Errorf("a refused command wrote to stdout: %q", r.stdout)
			}
			if tt.code == ExitOK || strings.HasPrefix(tt.name, "database") || tt.args[0] != "submit" && tt.args[0] != "hold" {
				return
			}
			// A refused writer changed nothing: with the files put right,
			// the chain is as it was.
			restoreReceiver(t, c)
			if after := c.json(0, "observe", "events"); !sameEvents(before, after) {
				t.Fatalf("a refused submit changed the chain:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// restoreReceiver puts back the anchor and key files that a damage
// function replaced, from the copies the test kept.
func restoreReceiver(t *testing.T, c *cli) {
	t.Helper()
	for _, name := range []string{"receiver.anchor", "receiver.key"} {
		p := c.path(name)
		if fi, err := os.Lstat(p); err == nil && (fi.IsDir() || fi.Mode()&os.ModeSymlink != 0) {
			os.Remove(p)
		}
		writeFile(t, p, readFile(t, c.path(name+".orig")), 0o600)
	}
}

func sameEvents(a, b map[string]any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func truncate(t *testing.T, path string, n int64) {
	t.Helper()
	if err := os.Truncate(path, n); err != nil {
		t.Fatal(err)
	}
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// damageLeafPages changes the page id in the header of every leaf page of
// a bbolt file, so that each names another page than its own.
func damageLeafPages(t *testing.T, path string) {
	t.Helper()
	data := readFile(t, path)
	const pageSize = 4096
	n := 0
	for off := 2 * pageSize; off+pageSize <= len(data); off += pageSize {
		if binary.NativeEndian.Uint16(data[off+8:]) == 0x02 {
			data[off] ^= 0x40
			n++
		}
	}
	if n == 0 {
		t.Fatal("no leaf page to damage")
	}
	writeFile(t, path, data, 0o600)
}

// TestHelperCLIUnderFileLimit is not a test: run as a child by
// TestFullFileSystem, it runs the CLI with RLIMIT_FSIZE at the limit its
// parent names, so that every write past it fails as on a full file
// system, and exits with the CLI's exit code.
func TestHelperCLIUnderFileLimit(t *testing.T) {
	spec := os.Getenv("KVFENCE_CLI_FSIZE")
	if spec == "" {
		return
	}
	var args []string
	if err := json.Unmarshal([]byte(os.Getenv("KVFENCE_CLI_ARGS")), &args); err != nil {
		os.Exit(99)
	}
	signal.Ignore(syscall.SIGXFSZ)
	limit, _ := strconv.ParseUint(spec, 10, 64)
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_FSIZE, &rl) != nil {
		os.Exit(98)
	}
	rl.Cur = limit
	if syscall.Setrlimit(syscall.RLIMIT_FSIZE, &rl) != nil {
		os.Exit(97)
	}
	os.Exit(Main{Stdin: strings.NewReader(""), Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}.Run(context.Background(), args))
}

// Ensure that a writer on a full file system (RLIMIT_FSIZE 0 in a child
// process: every write fails with EFBIG) exits 1 with the system's error,
// and leaves the database and the anchor as they were.
func TestFullFileSystem(t *testing.T) {
	for _, args := range [][]string{
		{"submit", "--as", "worker-a", "--envelope", "a.cbor"},
		{"hold", "--scope", fixtureScope, "--reason", "full"},
		{"scope", "create", "--scope", "new-scope"},
	} {
		t.Run(args[0], func(t *testing.T) {
			c := newCLI(t)
			c.receiver()
			c.activate("worker-a", "claim-a", "a.cbor")
			if args[0] == "submit" {
				args[4] = c.path("a.cbor")
			}
			before := c.json(0, "observe", "events")
			anchor := readFile(t, c.path("receiver.anchor"))
			enc, _ := json.Marshal(args)
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperCLIUnderFileLimit$")
			cmd.Env = testbin.ChildEnv("KVFENCE_CLI_FSIZE=0", "KVFENCE_CLI_ARGS="+string(enc),
				envDB+"="+c.env[envDB], envAnchor+"="+c.env[envAnchor], envKey+"="+c.env[envKey])
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != ExitError {
				t.Fatalf("kvfence %s on a full file system: %v\nstdout %s\nstderr %s", strings.Join(args, " "), err, stdout.String(), stderr.String())
			}
			// A worker's submit is refused before it writes, by the
			// reserve kept for administrators; an administrator's write
			// meets the file system's own refusal.
			want := syscall.EFBIG.Error()
			if args[0] == "submit" {
				want = kvfence.ErrStorageReserve.Error()
			}
			if !strings.Contains(stderr.String(), want) || !strings.HasPrefix(stderr.String(), "Error: ") {
				t.Errorf("stderr does not say %q:\n%s", want, stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("a failed command wrote to stdout: %q", stdout.String())
			}
			if after := c.json(0, "observe", "events"); !sameEvents(before, after) {
				t.Fatalf("a write on a full file system changed the chain:\nbefore %v\nafter  %v", before, after)
			}
			if !bytes.Equal(readFile(t, c.path("receiver.anchor")), anchor) {
				t.Fatal("a write on a full file system moved the anchor")
			}
			c.must(0, args...)
		})
	}
}
