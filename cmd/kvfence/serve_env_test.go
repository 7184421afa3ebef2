package main

import (
	"flag"
	"strings"
	"testing"
)

// TestEnvName pins the derivation of a flag's variable, and that it agrees
// with the variables the common flags already read.
func TestEnvName(t *testing.T) {
	for _, tc := range []struct{ flag, want string }{
		{"listen", "KVFENCE_LISTEN"},
		{"admin-socket", "KVFENCE_ADMIN_SOCKET"},
		{"metrics-per-scope", "KVFENCE_METRICS_PER_SCOPE"},
		{"db", envDB},
		{"anchor", envAnchor},
		{"key", envKey},
		{"etcd", envEtcd},
		{"etcd-prefix", envEtcdPrefix},
	} {
		if got := envName(tc.flag); got != tc.want {
			t.Errorf("envName(%q) = %q, want %q", tc.flag, got, tc.want)
		}
	}
}

// serveEnvCases gives, for every flag of serve, a value from its variable
// and one from the command line, with what each reads back as.
var serveEnvCases = map[string]struct{ env, envWant, flag, flagWant string }{
	"listen":                    {"127.0.0.1:7000", "127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7001"},
	"tls-cert":                  {"/etc/kvfence/env.crt", "/etc/kvfence/env.crt", "flag.crt", "flag.crt"},
	"tls-key":                   {"/etc/kvfence/env.key", "/etc/kvfence/env.key", "flag.key", "flag.key"},
	"client-ca":                 {"/etc/kvfence/ca.pem", "/etc/kvfence/ca.pem", "flag-ca.pem", "flag-ca.pem"},
	"admin":                     {"spiffe://ex.org/ops/a,spiffe://ex.org/ops/b", "spiffe://ex.org/ops/a,spiffe://ex.org/ops/b", "spiffe://ex.org/ops/c", "spiffe://ex.org/ops/c"},
	"admin-socket":              {"/run/kvfence/admin.sock", "/run/kvfence/admin.sock", "/tmp/a.sock", "/tmp/a.sock"},
	"admin-uid":                 {"1000,1001", "1000,1001", "7", "7"},
	"admin-socket-group":        {"kvfence-admin", "kvfence-admin", "wheel", "wheel"},
	"max-connections":           {"512", "512", "64", "64"},
	"max-records":               {"1000", "1000", "2000", "2000"},
	"metrics-listen":            {"127.0.0.1:9100", "127.0.0.1:9100", "127.0.0.1:9101", "127.0.0.1:9101"},
	"metrics-per-scope":         {"true", "true", "false", "false"},
	"spiffe-socket":             {"unix:///run/spire/agent.sock", "unix:///run/spire/agent.sock", "unix:///tmp/a.sock", "unix:///tmp/a.sock"},
	"spiffe-timeout":            {"5s", "5s", "1m", "1m0s"},
	"log-format":                {"json", "json", "text", "text"},
	"log-level":                 {"warn", "warn", "debug", "debug"},
	"log-decisions":             {"true", "true", "false", "false"},
	"db":                        {"/var/lib/kvfence/env.db", "/var/lib/kvfence/env.db", "flag.db", "flag.db"},
	"anchor":                    {"/var/lib/kvfence-anchor/env.anchor", "/var/lib/kvfence-anchor/env.anchor", "flag.anchor", "flag.anchor"},
	"anchor-etcd-cert":          {"env-a.crt", "env-a.crt", "flag-a.crt", "flag-a.crt"},
	"anchor-etcd-key":           {"env-a.key", "env-a.key", "flag-a.key", "flag-a.key"},
	"anchor-etcd-ca":            {"env-a-ca.pem", "env-a-ca.pem", "flag-a-ca.pem", "flag-a-ca.pem"},
	"anchor-etcd-cluster-id":    {"a1b2", "a1b2", "c3d4", "c3d4"},
	"etcd":                      {"https://e1:2379", "https://e1:2379", "https://e2:2379", "https://e2:2379"},
	"etcd-cert":                 {"env-e.crt", "env-e.crt", "flag-e.crt", "flag-e.crt"},
	"etcd-key":                  {"env-e.key", "env-e.key", "flag-e.key", "flag-e.key"},
	"etcd-ca":                   {"env-e-ca.pem", "env-e-ca.pem", "flag-e-ca.pem", "flag-e-ca.pem"},
	"etcd-max-txn-ops":          {"64", "64", "32", "32"},
	"etcd-prefix":               {"/env/", "/env/", "/flag/", "/flag/"},
	"etcd-user":                 {"env-user", "env-user", "flag-user", "flag-user"},
	"etcd-password-file":        {"env.password", "env.password", "flag.password", "flag.password"},
	"anchor-etcd-user":          {"env-a-user", "env-a-user", "flag-a-user", "flag-a-user"},
	"anchor-etcd-password-file": {"env-a.password", "env-a.password", "flag-a.password", "flag-a.password"},
	"pub":                       {"env.pub", "env.pub", "flag.pub", "flag.pub"},
	"lock-timeout":              {"2s", "2s", "0", "0s"},
	"key":                       {"/etc/kvfence/env.key", "/etc/kvfence/env.key", "flag-r.key", "flag-r.key"},
	"witness":                   {"w1.test=https://w1,w2.test=https://w2", "w1.test=https://w1,w2.test=https://w2", "w3.test=https://w3", "w3.test=https://w3"},
	"witness-pub":               {"w1.test=/etc/w1.pub,w2.test=/etc/w2.pub", "w1.test=/etc/w1.pub,w2.test=/etc/w2.pub", "w3.test=w3.pub", "w3.test=w3.pub"},
	"witness-quorum":            {"2", "2", "1", "1"},
	"witness-faults":            {"1", "1", "0", "0"},
	"witness-ca":                {"/etc/kvfence/witness-ca.pem", "/etc/kvfence/witness-ca.pem", "flag-w-ca.pem", "flag-w-ca.pem"},
	"json":                      {"true", "true", "false", "false"},
	"kubeconfig":                {"/etc/kvfence/env.kubeconfig", "/etc/kvfence/env.kubeconfig", "flag.kubeconfig", "flag.kubeconfig"},
	"kube-context":              {"env-ctx", "env-ctx", "flag-ctx", "flag-ctx"},
	"kube-in-cluster":           {"true", "true", "false", "false"},
}

// TestServeEnvSetsEachFlag sets every flag of serve from its variable, and
// checks that the same flag on the command line wins over the variable. A
// flag added to serve without a case here fails the test.
func TestServeEnvSetsEachFlag(t *testing.T) {
	all, _, _ := newServeFlags()
	all.VisitAll(func(f *flag.Flag) {
		tc, ok := serveEnvCases[f.Name]
		if !ok {
			t.Errorf("serve flag --%s has no case in serveEnvCases", f.Name)
			return
		}
		name := envName(f.Name)
		getenv := func(k string) string {
			if k == name {
				return tc.env
			}
			return ""
		}
		for _, step := range []struct {
			what string
			args []string
			want string
		}{
			{"from " + name, nil, tc.envWant},
			{"--" + f.Name + " over " + name, []string{"--" + f.Name + "=" + tc.flag}, tc.flagWant},
		} {
			fs, _, _ := newServeFlags()
			if err := fs.Parse(step.args); err != nil {
				t.Fatalf("%s: parse: %v", step.what, err)
			}
			if err := setFromEnv(fs, getenv); err != nil {
				t.Errorf("%s: %v", step.what, err)
				continue
			}
			if got := fs.Lookup(f.Name).Value.String(); got != step.want {
				t.Errorf("%s: --%s = %q, want %q", step.what, f.Name, got, step.want)
			}
		}
	})
	// An empty variable is no value: the default stays.
	fs, _, sf := newServeFlags()
	if err := setFromEnv(fs, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	if sf.maxRecords == 0 || sf.listen != "" || len(sf.admins) != 0 {
		t.Errorf("an empty environment changed serve's flags: %+v", sf)
	}
}

// TestServeEnvBadValue runs serve with a variable its flag refuses: a usage
// error naming the variable, the flag and what it wants, and nothing
// served.
func TestServeEnvBadValue(t *testing.T) {
	for _, tc := range []struct {
		env, val string
		want     []string
	}{
		{"KVFENCE_MAX_CONNECTIONS", "many", []string{`KVFENCE_MAX_CONNECTIONS="many"`, "--max-connections", "want a whole number"}},
		{"KVFENCE_MAX_RECORDS", "1e6", []string{`KVFENCE_MAX_RECORDS="1e6"`, "--max-records", "want a whole number"}},
		{"KVFENCE_METRICS_PER_SCOPE", "maybe", []string{`KVFENCE_METRICS_PER_SCOPE="maybe"`, "--metrics-per-scope", "want true or false"}},
		{"KVFENCE_JSON", "yes please", []string{`KVFENCE_JSON="yes please"`, "--json", "want true or false"}},
		{"KVFENCE_ADMIN_UID", "1000,root", []string{`KVFENCE_ADMIN_UID="1000,root"`, "--admin-uid", `uid "root": not a number`}},
		{"KVFENCE_LOCK_TIMEOUT", "soon", []string{`KVFENCE_LOCK_TIMEOUT="soon"`, "--lock-timeout", "want a duration"}},
		{"KVFENCE_SPIFFE_TIMEOUT", "soon", []string{`KVFENCE_SPIFFE_TIMEOUT="soon"`, "--spiffe-timeout", "want a duration"}},
		{"KVFENCE_ADMIN", "spiffe://ex.org/ops/a,", []string{`KVFENCE_ADMIN="spiffe://ex.org/ops/a,"`, "--admin", "an empty item in the list"}},
		{"KVFENCE_WITNESS", "w1.test", []string{`KVFENCE_WITNESS="w1.test"`, "--witness", "want NAME=URL"}},
		{"KVFENCE_WITNESS_PUB", "w1.test=a,w1.test=b", []string{`KVFENCE_WITNESS_PUB="w1.test=a,w1.test=b"`, "--witness-pub", "witness w1.test given twice"}},
		{"KVFENCE_ETCD_MAX_TXN_OPS", "-", []string{`KVFENCE_ETCD_MAX_TXN_OPS="-"`, "--etcd-max-txn-ops", "want a whole number"}},
		{"KVFENCE_LOG_FORMAT", "xml", []string{`KVFENCE_LOG_FORMAT="xml"`, "--log-format", "want text or json"}},
		{"KVFENCE_LOG_LEVEL", "info+2", []string{`KVFENCE_LOG_LEVEL="info+2"`, "--log-level", "want debug, info, warn or error"}},
		{"KVFENCE_LOG_DECISIONS", "on", []string{`KVFENCE_LOG_DECISIONS="on"`, "--log-decisions", "want true or false"}},
	} {
		t.Run(tc.env, func(t *testing.T) {
			c := newCLI(t)
			c.env[tc.env] = tc.val
			r := c.run("serve")
			if r.code != 2 {
				t.Fatalf("got %s, want exit 2", r)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
		})
	}
}

// TestServeEnvReachesServe checks that serve acts on a value from the
// environment, not only that the flag holds it: a --max-records of 0 from
// KVFENCE_MAX_RECORDS is refused like the flag.
func TestServeEnvReachesServe(t *testing.T) {
	c := newCLI(t)
	c.env["KVFENCE_LISTEN"] = "127.0.0.1:0"
	c.env["KVFENCE_TLS_CERT"] = c.path("s.crt")
	c.env["KVFENCE_TLS_KEY"] = c.path("s.key")
	c.env["KVFENCE_CLIENT_CA"] = c.path("ca.pem")
	c.env["KVFENCE_ADMIN"] = "spiffe://ex.org/ops/a"
	c.env["KVFENCE_MAX_CONNECTIONS"] = "16"
	c.env[envDB] = c.path("r.db")
	c.env[envAnchor] = c.path("r.anchor")
	c.env[envKey] = c.path("r.key")
	c.env["KVFENCE_MAX_RECORDS"] = "0"
	r := c.run("serve")
	if r.code != 2 || !strings.Contains(r.stderr, "--max-records 0: must be at least 1") {
		t.Fatalf("got %s, want the --max-records usage error", r)
	}
	// The same from the flag, over a valid variable.
	c.env["KVFENCE_MAX_RECORDS"] = "5"
	r = c.run("serve", "--max-records", "0")
	if r.code != 2 || !strings.Contains(r.stderr, "--max-records 0: must be at least 1") {
		t.Fatalf("got %s, want the --max-records usage error", r)
	}
}
