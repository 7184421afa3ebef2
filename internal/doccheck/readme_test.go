package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	// shellFence opens a shell block of a Markdown file.
	shellFence = regexp.MustCompile("^```(sh|bash|shell|console)\\s*$")
	// byName is a command that finds processes by their command line,
	// which may match another user's or another run's processes.
	byName = regexp.MustCompile(`\b(pgrep|pkill|killall)\b`)
	// openLoop is a loop with no bound of its own.
	openLoop = regexp.MustCompile(`(^|[;&|(]\s*|\b(do|then|else)\s+)(while|until)\b|\bfor\s*\(\(\s*;`)
	// boundedKill is kill with options, then PIDs from variables that
	// captured $! or from a dev-cluster PID file: processes the example
	// started.
	boundedKill = regexp.MustCompile(`^kill(\s+-[A-Z0-9]+)?(\s+(\$[A-Za-z_][A-Za-z_0-9]*|\$\(cat [^)]*\.pid\)))+$`)
	// killCall is a kill command anywhere in a line.
	killCall = regexp.MustCompile(`(^|[;&|]\s*)kill\b[^;&|]*`)
	// pidCapture assigns the PID of the last background command.
	pidCapture = regexp.MustCompile(`^[A-Za-z_][A-Za-z_0-9]*=\$!(\s|$)`)
)

// shellLines returns the commands of the Markdown file's shell blocks,
// comments removed and continuation lines joined, each with its line
// number in the file.
func shellLines(doc string) (lines []string, at []int) {
	in := false
	var cur string
	start := 0
	for i, line := range strings.Split(doc, "\n") {
		if !in {
			in = shellFence.MatchString(line)
			continue
		}
		if strings.HasPrefix(line, "```") {
			in = false
			continue
		}
		// A comment starts at a # after a blank or at the line's start;
		// $#, URLs and fragments are not comments.
		if j := strings.Index(line, " #"); j >= 0 {
			line = line[:j]
		}
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			line = ""
		}
		line = strings.TrimSpace(line)
		if cur == "" {
			start = i + 1
		}
		if rest, ok := strings.CutSuffix(line, "\\"); ok {
			cur += rest + " "
			continue
		}
		cur += line
		if strings.TrimSpace(cur) != "" {
			lines, at = append(lines, strings.TrimSpace(cur)), append(at, start)
		}
		cur = ""
	}
	return lines, at
}

// readmeProblems returns what a README's shell blocks do that a reader
// should not copy: find processes by name, wait without bound, kill what
// they did not start, or start a background process without keeping its
// PID.
func readmeProblems(doc string) []string {
	var out []string
	lines, at := shellLines(doc)
	for i, l := range lines {
		where := func(format string) { out = append(out, "line "+itoa(at[i])+": "+format+": "+l) }
		if byName.MatchString(l) {
			where("finds processes by name (pgrep, pkill, killall); kill the PID the example started")
		}
		if openLoop.MatchString(l) {
			where("a loop without a bound; use for i in $(seq N); do ... && break; sleep ...; done")
		}
		for _, k := range killCall.FindAllString(l, -1) {
			k = strings.TrimSpace(strings.TrimLeft(k, ";&| "))
			if !boundedKill.MatchString(k) {
				where("kill of something other than a PID the example kept ($VAR=$! or a .pid file)")
			}
		}
		if strings.HasSuffix(l, "&") && !strings.HasSuffix(l, "&&") {
			if i+1 >= len(lines) || !pidCapture.MatchString(lines[i+1]) {
				where("a background command whose PID the next line does not keep (VAR=$!)")
			}
		}
	}
	return out
}

func itoa(n int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		if n /= 10; n == 0 {
			return string(b)
		}
	}
}

// Ensure that README's shell examples kill only processes they started,
// by the PID they kept, and bound every wait, so that a reader who copies
// them neither kills someone else's process nor waits forever.
func TestREADME_ShellExamples(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(moduleRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range readmeProblems(string(doc)) {
		t.Error(p)
	}
}

// Ensure that the checker finds each thing it looks for and passes the
// bounded forms README uses.
func TestREADME_ShellChecker(t *testing.T) {
	for _, tc := range []struct {
		block string
		bad   bool
	}{
		{"kill -9 $(pgrep -f 'kvfence-etcd --name m1 ')", true},
		{"pkill kvfence", true},
		{"killall kvfence-etcd", true},
		{"until kvfence status >/dev/null; do sleep 0.2; done", true},
		{"while true; do sleep 1; done", true},
		{"x=1; while :; do :; done", true},
		{"for ((;;)); do sleep 1; done", true},
		{"kill -TERM %1", true},
		{"kill 1234", true},
		{"kvfence serve &\nkvfence status", true},
		{"kvfence serve &", true},
		{"kvfence serve --listen 127.0.0.1:8443 \\\n  --admin-socket s &\nSERVE_PID=$!\nkill -TERM $SERVE_PID", false},
		{"for i in $(seq 50); do\n  kvfence status && break; sleep 0.2\ndone", false},
		{"kill -9 $(cat etcd-receiver/m1.pid)", false},
		{"kill -TERM $A $B", false},
		{"kvfence status   # until it serves", false},
		{"a && b", false},
		{"curl -s host/#frag", false},
	} {
		got := readmeProblems("```sh\n" + tc.block + "\n```\n")
		if (len(got) > 0) != tc.bad {
			t.Errorf("%q: problems %q, want bad=%v", tc.block, got, tc.bad)
		}
	}
	// Only shell blocks are read.
	if got := readmeProblems("pkill x\n```go\nfor {}\n```\n"); len(got) != 0 {
		t.Errorf("outside shell blocks: %q", got)
	}
}
