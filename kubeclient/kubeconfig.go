package kubeclient

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"sigs.k8s.io/yaml"
)

// kubeconfig is the part of a kubeconfig file (Kubernetes's
// clientcmd/api/v1 Config) that is read. Fields that would change the
// identity or the trust if ignored are decoded so that they can be
// refused; others (preferences, extensions, a context's namespace) are
// not read at all.
type kubeconfig struct {
	APIVersion     string `json:"apiVersion"`
	Kind           string `json:"kind"`
	CurrentContext string `json:"current-context"`
	Clusters       []struct {
		Name    string       `json:"name"`
		Cluster *fileCluster `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string    `json:"name"`
		User *fileUser `json:"user"`
	} `json:"users"`
	Contexts []struct {
		Name    string       `json:"name"`
		Context *fileContext `json:"context"`
	} `json:"contexts"`
}

type fileCluster struct {
	Server                   string `json:"server"`
	TLSServerName            string `json:"tls-server-name"`
	InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
	CertificateAuthority     string `json:"certificate-authority"`
	CertificateAuthorityData []byte `json:"certificate-authority-data"`
	ProxyURL                 string `json:"proxy-url"`
	DisableCompression       bool   `json:"disable-compression"`
	// Extensions are read only to refuse the exec plugin's, which
	// Kubernetes's clients pass to a plugin told the cluster.
	Extensions []struct {
		Name string `json:"name"`
	} `json:"extensions"`
}

// execClusterExtension names the cluster extension that Kubernetes's
// clients give an exec plugin as spec.cluster.config.
const execClusterExtension = "client.authentication.k8s.io/exec"

type fileUser struct {
	ClientCertificate     string              `json:"client-certificate"`
	ClientCertificateData []byte              `json:"client-certificate-data"`
	ClientKey             string              `json:"client-key"`
	ClientKeyData         []byte              `json:"client-key-data"`
	Token                 string              `json:"token"`
	TokenFile             string              `json:"tokenFile"`
	As                    string              `json:"as"`
	AsUID                 string              `json:"as-uid"`
	AsGroups              []string            `json:"as-groups"`
	AsUserExtra           map[string][]string `json:"as-user-extra"`
	Username              string              `json:"username"`
	Password              string              `json:"password"`
	AuthProvider          json.RawMessage     `json:"auth-provider"`
	Exec                  *fileExec           `json:"exec"`
}

type fileExec struct {
	APIVersion         string    `json:"apiVersion"`
	Command            string    `json:"command"`
	Args               []string  `json:"args"`
	Env                []ExecEnv `json:"env"`
	InstallHint        string    `json:"installHint"`
	ProvideClusterInfo bool      `json:"provideClusterInfo"`
	InteractiveMode    string    `json:"interactiveMode"`
}

type fileContext struct {
	Cluster string `json:"cluster"`
	User    string `json:"user"`
}

// LoadKubeconfig reads the kubeconfig file at path (YAML or JSON) and
// returns the Config of its context named context, or of its current
// context if context is empty. Relative paths in the file are relative to
// its directory. Only that file is read.
func LoadKubeconfig(path, context string) (*Config, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: the kubeconfig file's path is empty", ErrInvalidConfig)
	}
	b, err := readFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: kubeconfig: %v", ErrInvalidConfig, err)
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("%w: kubeconfig: %v", ErrInvalidConfig, err)
	}
	c, err := ParseKubeconfig(b, dir, context)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return c, nil
}

// ParseKubeconfig decodes a kubeconfig file's content, as LoadKubeconfig
// does, with dir the directory its relative paths are relative to, and
// reads the files it names.
func ParseKubeconfig(data []byte, dir, context string) (*Config, error) {
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalidConfig, MaxFileSize)
	}
	// Strict: a key twice in one mapping is an error, not the last one
	// winning.
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	// Go's JSON decoder matches keys to fields without regard to case, so
	// that "token" and "Token" in one mapping would both reach one field,
	// the last one winning: refuse such a file rather than pick.
	var generic any
	if err := json.Unmarshal(js, &generic); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if err := foldedTwice(generic); err != nil {
		return nil, err
	}
	// Kubernetes's clients match keys case-sensitively: for them "Token"
	// is no token, and a file that Go's decoder would read otherwise than
	// they do is refused.
	if err := spelledOtherwise(generic); err != nil {
		return nil, err
	}
	var kc kubeconfig
	dec := json.NewDecoder(bytes.NewReader(js))
	if err := dec.Decode(&kc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if kc.Kind != "" && kc.Kind != "Config" {
		return nil, fmt.Errorf("%w: kind %q, not Config", ErrInvalidConfig, kc.Kind)
	}
	if kc.APIVersion != "" && kc.APIVersion != "v1" {
		return nil, fmt.Errorf("%w: apiVersion %q, not v1", ErrInvalidConfig, kc.APIVersion)
	}
	name := context
	if name == "" {
		name = kc.CurrentContext
	}
	if name == "" {
		return nil, fmt.Errorf("%w: no context named, and no current-context", ErrInvalidConfig)
	}
	var ctx *fileContext
	found := 0
	for _, c := range kc.Contexts {
		if c.Name == name {
			found++
			ctx = c.Context
		}
	}
	if err := one("context", name, found); err != nil {
		return nil, err
	}
	if ctx == nil || ctx.Cluster == "" || ctx.User == "" {
		return nil, fmt.Errorf("%w: context %q names no cluster or no user", ErrInvalidConfig, name)
	}
	var cl *fileCluster
	found = 0
	for _, c := range kc.Clusters {
		if c.Name == ctx.Cluster {
			found++
			cl = c.Cluster
		}
	}
	if err := one("cluster", ctx.Cluster, found); err != nil {
		return nil, err
	}
	var u *fileUser
	found = 0
	for _, c := range kc.Users {
		if c.Name == ctx.User {
			found++
			u = c.User
		}
	}
	if err := one("user", ctx.User, found); err != nil {
		return nil, err
	}
	if cl == nil {
		return nil, fmt.Errorf("%w: cluster %q is empty", ErrInvalidConfig, ctx.Cluster)
	}
	if u == nil {
		u = &fileUser{}
	}
	return configOf(cl, u, dir)
}

// foldedTwice returns an error if a mapping anywhere in v holds two keys
// that differ only in case.
func foldedTwice(v any) error {
	switch v := v.(type) {
	case map[string]any:
		seen := make(map[string]string, len(v))
		for k, child := range v {
			// Upper then lower, so that ſ and K (the Kelvin sign) fold as the
			// decoder folds them.
			low := strings.ToLower(strings.ToUpper(k))
			if other, ok := seen[low]; ok {
				return fmt.Errorf("%w: keys %q and %q differ only in case", ErrInvalidConfig, other, k)
			}
			seen[low] = k
			if err := foldedTwice(child); err != nil {
				return err
			}
		}
	case []any:
		for _, child := range v {
			if err := foldedTwice(child); err != nil {
				return err
			}
		}
	}
	return nil
}

// knownKeys maps each key this package decodes, folded, to its spelling.
var knownKeys = func() map[string]string {
	known := map[string]string{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map:
			walk(t.Elem())
		case reflect.Struct:
			for i := 0; i < t.NumField(); i++ {
				f := t.Field(i)
				if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
					known[foldKey(name)] = name
				}
				walk(f.Type)
			}
		}
	}
	walk(reflect.TypeOf(kubeconfig{}))
	return known
}()

// foldKey folds k as Go's JSON decoder matches keys to fields.
func foldKey(k string) string { return strings.ToLower(strings.ToUpper(k)) }

// spelledOtherwise returns an error if a mapping anywhere in v holds a
// key that Go's decoder would match to a field this package reads but
// that is not spelled as that field's key is. An extension's content is
// the extension's own and is not looked into.
func spelledOtherwise(v any) error {
	switch v := v.(type) {
	case map[string]any:
		for k, child := range v {
			if want, ok := knownKeys[foldKey(k)]; ok && k != want {
				return fmt.Errorf("%w: key %q is spelled %q in a kubeconfig", ErrInvalidConfig, k, want)
			}
			if k == "extension" || k == "preferences" {
				continue
			}
			if err := spelledOtherwise(child); err != nil {
				return err
			}
		}
	case []any:
		for _, child := range v {
			if err := spelledOtherwise(child); err != nil {
				return err
			}
		}
	}
	return nil
}

// one reports an error unless exactly one entry of kind has the name.
func one(kind, name string, found int) error {
	switch found {
	case 0:
		return fmt.Errorf("%w: no %s named %q", ErrInvalidConfig, kind, name)
	case 1:
		return nil
	}
	return fmt.Errorf("%w: %d entries are the %s named %q", ErrInvalidConfig, found, kind, name)
}

// configOf returns the Config of a context's cluster and user.
func configOf(cl *fileCluster, u *fileUser, dir string) (*Config, error) {
	refuse := func(field string) error {
		return fmt.Errorf("%w: %s", ErrUnsupported, field)
	}
	switch {
	case cl.InsecureSkipTLSVerify:
		return nil, refuse("insecure-skip-tls-verify (the server must be authenticated)")
	case u.Username != "" || u.Password != "":
		return nil, refuse("username and password")
	case len(u.AuthProvider) > 0 && string(u.AuthProvider) != "null":
		return nil, refuse("auth-provider (use an exec plugin)")
	case u.As != "" || u.AsUID != "" || len(u.AsGroups) > 0 || len(u.AsUserExtra) > 0:
		return nil, refuse("impersonation (as, as-uid, as-groups, as-user-extra)")
	}
	c := &Config{
		Host:               cl.Server,
		TLSServerName:      cl.TLSServerName,
		ProxyURL:           cl.ProxyURL,
		DisableCompression: cl.DisableCompression,
		BearerToken:        u.Token,
	}
	var err error
	if c.CAData, err = dataOrFile("certificate-authority", cl.CertificateAuthorityData, cl.CertificateAuthority, dir); err != nil {
		return nil, err
	}
	// Files are kept as files, read again as they rotate; data is data.
	switch {
	case len(u.ClientCertificateData) > 0 && u.ClientCertificate != "":
		return nil, fmt.Errorf("%w: both client-certificate and client-certificate-data", ErrInvalidConfig)
	case len(u.ClientKeyData) > 0 && u.ClientKey != "":
		return nil, fmt.Errorf("%w: both client-key and client-key-data", ErrInvalidConfig)
	case (u.ClientCertificate != "") != (u.ClientKey != ""):
		return nil, fmt.Errorf("%w: client-certificate and client-key are files both or neither", ErrInvalidConfig)
	}
	c.CertData, c.KeyData = u.ClientCertificateData, u.ClientKeyData
	if u.ClientCertificate != "" {
		c.CertFile, c.KeyFile = resolve(u.ClientCertificate, dir), resolve(u.ClientKey, dir)
	}
	if u.TokenFile != "" {
		c.BearerTokenFile = resolve(u.TokenFile, dir)
	}
	if e := u.Exec; e != nil {
		switch e.InteractiveMode {
		case "", "Never", "IfAvailable":
		case "Always":
			return nil, refuse("an exec plugin whose interactiveMode is Always (the receiver has no terminal)")
		default:
			return nil, fmt.Errorf("%w: exec interactiveMode %q", ErrInvalidConfig, e.InteractiveMode)
		}
		if e.ProvideClusterInfo {
			for _, x := range cl.Extensions {
				if x.Name == execClusterExtension {
					// Dropping it would tell the plugin less than it was
					// configured with: it may then choose another identity.
					return nil, refuse("the cluster extension " + execClusterExtension + " (a plugin's spec.cluster.config)")
				}
			}
		}
		cmd := e.Command
		// As Kubernetes's own clients read it: a command with a separator is a path, relative
		// to the file; a bare name is looked for on PATH.
		if strings.ContainsRune(cmd, '/') || strings.ContainsRune(cmd, filepath.Separator) {
			cmd = resolve(cmd, dir)
		}
		c.Exec = &ExecConfig{
			APIVersion:         e.APIVersion,
			Command:            cmd,
			Args:               e.Args,
			Env:                e.Env,
			ProvideClusterInfo: e.ProvideClusterInfo,
			InstallHint:        e.InstallHint,
		}
	}
	if _, err := c.BaseURL(); err != nil {
		return nil, err
	}
	// Checked now, so that a file that names its credentials twice is
	// refused when it is loaded, not at the first request.
	if _, err := c.credentials(); err != nil {
		return nil, err
	}
	return c, nil
}

// dataOrFile returns data, or the content of the file at path (relative
// to dir); both given is an error.
func dataOrFile(field string, data []byte, path, dir string) ([]byte, error) {
	if len(data) > 0 && path != "" {
		return nil, fmt.Errorf("%w: both %s and %s-data", ErrInvalidConfig, field, field)
	}
	if path == "" {
		return data, nil
	}
	b, err := readFile(resolve(path, dir))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidConfig, field, err)
	}
	if len(b) == 0 {
		// Empty data means none: for a certificate authority, the
		// system's roots in place of the one the file names.
		return nil, fmt.Errorf("%w: %s: %s is empty", ErrInvalidConfig, field, resolve(path, dir))
	}
	return b, nil
}

// resolve returns path, relative to dir if it is not absolute.
func resolve(path, dir string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(dir, path)
}

// Where Kubernetes mounts a pod's service-account credentials.
const (
	inClusterTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	inClusterCAFile    = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
)

// InCluster returns the Config of the pod's service account: the API
// server the environment names (KUBERNETES_SERVICE_HOST and
// KUBERNETES_SERVICE_PORT), the token Kubernetes mounts in the pod (read
// again as it rotates) and the cluster's certificate authority.
func InCluster() (*Config, error) {
	return inCluster(os.Getenv, inClusterTokenFile, inClusterCAFile)
}

func inCluster(getenv func(string) string, tokenFile, caFile string) (*Config, error) {
	host, port := getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, ErrNotInCluster
	}
	ca, err := readFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("%w: in-cluster certificate authority: %v", ErrInvalidConfig, err)
	}
	if len(ca) == 0 {
		// Not the system's roots in place of the cluster's authority.
		return nil, fmt.Errorf("%w: in-cluster certificate authority %s is empty", ErrInvalidConfig, caFile)
	}
	c := &Config{Host: "https://" + net.JoinHostPort(host, port), CAData: ca, BearerTokenFile: tokenFile}
	if _, err := c.BaseURL(); err != nil {
		return nil, err
	}
	// Read now, so that a pod without a token fails at start.
	cr, err := c.credentials()
	if err != nil {
		return nil, err
	}
	if _, err := cr.readTokenFile(); err != nil {
		return nil, err
	}
	return c, nil
}
