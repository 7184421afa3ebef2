package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/kvfence"
)

// TargetCreateCommand creates a target in an existing scope at revision 1.
// It is privileged.
type TargetCreateCommand struct{ m *Main }

// targetCreateJSON is the --json shape of target create.
type targetCreateJSON struct {
	Target      string `json:"target"`
	Scope       string `json:"scope"`
	Revision    uint64 `json:"revision"`
	ValueSHA256 string `json:"value_sha256"`
	// Kind and Key are given for a target of kind etcd, whose revision is
	// the key's mod revision.
	Kind string `json:"kind,omitempty"`
	Key  string `json:"key,omitempty"`
	// Object and UID are given for a target of kind kubernetes: the
	// object (RESOURCE/NAMESPACE/NAME) and the incarnation it stands for.
	Object string `json:"object,omitempty"`
	UID    string `json:"uid,omitempty"`
}

// targetKindSpec checks --kind, --target-key (--key is the receiver's
// private key) and --object: an etcd target names its key and is created
// on an etcd store (--etcd, or a served receiver on one); a kubernetes
// target names its object, which the receiver reads through its own
// identity (--kubeconfig, or the served receiver's); an internal one names
// neither.
func targetKindSpec(cf *commonFlags, rf *remoteFlags, kind kvfence.TargetKind, key string, keySet bool, object string, objectSet bool) (kvfence.TargetSpec, error) {
	usage := func(msg string) error {
		return &usageError{msg: "kvfence target create: " + msg, hint: "kvfence target create -h"}
	}
	if objectSet && kind != kvfence.TargetKubernetes {
		return kvfence.TargetSpec{}, usage("--object is for --kind kubernetes only")
	}
	switch kind {
	case kvfence.TargetKubernetes:
		switch {
		case keySet:
			return kvfence.TargetSpec{}, usage("--target-key is for --kind etcd only")
		case object == "":
			return kvfence.TargetSpec{}, usage("--kind kubernetes needs --object configmaps/NAMESPACE/NAME")
		case !rf.on() && !cf.kube.on():
			return kvfence.TargetSpec{}, usage("--kind kubernetes needs --kubeconfig (or $KVFENCE_KUBECONFIG, or --kube-in-cluster): the receiver reads the object through its own identity")
		}
		obj, err := parseObject(object)
		if err != nil {
			return kvfence.TargetSpec{}, usage(err.Error())
		}
		return kvfence.TargetSpec{Kind: kvfence.TargetKubernetes, Object: &obj}, nil
	case kvfence.TargetInternal:
		if keySet {
			return kvfence.TargetSpec{}, usage("--target-key is for --kind etcd only")
		}
		return kvfence.TargetSpec{}, nil
	case kvfence.TargetEtcd:
		switch {
		case key == "":
			return kvfence.TargetSpec{}, usage("--kind etcd needs --target-key, the application's etcd key")
		case !rf.on() && !cf.etcd.on():
			return kvfence.TargetSpec{}, usage("--kind etcd needs the etcd engine (--etcd): a receiver in a database file cannot write an etcd key in its transaction")
		}
		return kvfence.TargetSpec{Kind: kvfence.TargetEtcd, Key: key}, nil
	}
	return kvfence.TargetSpec{}, usage(fmt.Sprintf("--kind %q: one of internal, etcd or kubernetes", kind))
}

// parseObject reads --object: RESOURCE/NAMESPACE/NAME of the core API
// group's v1, the only objects kubetarget writes (ConfigMaps), as
// kvfence.ParseObject reads it.
func parseObject(s string) (kvfence.RemoteObject, error) {
	if len(s) > 512 || !printable([]byte(s)) {
		return kvfence.RemoteObject{}, fmt.Errorf("--object: %d bytes, not RESOURCE/NAMESPACE/NAME of printable text", len(s))
	}
	obj, err := kvfence.ParseObject(s)
	if err != nil {
		return kvfence.RemoteObject{}, fmt.Errorf("--object: %w", err)
	}
	return obj, nil
}

// Run runs the command.
func (c *TargetCreateCommand) Run(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("target create")
	cf := commonFlags{name: "target create"}
	cf.register(fs, withDB|withKey)
	var rf remoteFlags
	rf.register(fs)
	scope := fs.String("scope", "", "")
	target := fs.String("target", "", "")
	value := fs.String("value", "", "")
	valueFile := fs.String("value-file", "", "")
	kind := fs.String("kind", string(kvfence.TargetInternal), "")
	key := fs.String("target-key", "", "")
	object := fs.String("object", "", "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	cf.resolve(fs, c.m.Getenv)
	if err := rf.check(fs, "target create"); err != nil {
		return err
	}
	spec, err := targetKindSpec(&cf, &rf, kvfence.TargetKind(*kind), *key, isSet(fs, "target-key"), *object, isSet(fs, "object"))
	if err != nil {
		return err
	}
	if !rf.on() {
		if err := cf.requireWriter(); err != nil {
			return err
		}
	}
	if err := require("target create", [2]string{"scope", *scope}, [2]string{"target", *target}); err != nil {
		return err
	}
	var v []byte
	switch hasValue, hasFile := isSet(fs, "value"), isSet(fs, "value-file"); {
	case spec.Kind == kvfence.TargetKubernetes && (hasValue || hasFile):
		return &usageError{msg: "kvfence target create: a target of kind kubernetes takes no --value: the object holds it", hint: "kvfence target create -h"}
	case spec.Kind == kvfence.TargetKubernetes:
	case hasValue && hasFile:
		return &usageError{msg: "kvfence target create: --value and --value-file are mutually exclusive", hint: "kvfence target create -h"}
	case hasValue:
		v = []byte(*value)
	case hasFile:
		if v, err = c.m.readInput(*valueFile); err != nil {
			return fmt.Errorf("read --value-file: %w", err)
		}
	default:
		return &usageError{msg: "kvfence target create: one of --value or --value-file is required", hint: "kvfence target create -h"}
	}
	spec.Scope, spec.Name, spec.Value = *scope, *target, v
	t, err := either(&cf, &rf, true, c.m.warn,
		func(r *kvfence.Receiver) (kvfence.Target, error) {
			return localAdmin(r).CreateTargetSpec(ctx, spec)
		},
		func(cl *client.Client) (kvfence.Target, error) { return cl.CreateTargetSpec(ctx, spec) })
	if err != nil {
		return err
	}
	sum := sha256.Sum256(t.Value)
	res := targetCreateJSON{Target: t.Name, Scope: t.Scope, Revision: t.Revision, ValueSHA256: hex.EncodeToString(sum[:]), Key: t.Key, UID: t.UID}
	if t.Key != "" || t.Object != nil {
		res.Kind = string(t.Kind)
	}
	if t.Object != nil {
		res.Object = t.Object.String()
	}
	if cf.json {
		return writeJSON(c.m.Stdout, res)
	}
	tw := newTable(c.m.Stdout)
	fmt.Fprintf(tw, "target\t%s\n", res.Target)
	fmt.Fprintf(tw, "scope\t%s\n", res.Scope)
	fmt.Fprintf(tw, "revision\t%d\n", res.Revision)
	if res.Key != "" {
		fmt.Fprintf(tw, "kind\t%s\n", res.Kind)
		fmt.Fprintf(tw, "key\t%s\n", res.Key)
	}
	if res.Object != "" {
		fmt.Fprintf(tw, "kind\t%s\n", res.Kind)
		fmt.Fprintf(tw, "object\t%s\n", res.Object)
		fmt.Fprintf(tw, "uid\t%s\n", res.UID)
	}
	fmt.Fprintf(tw, "value sha256\t%s\n", res.ValueSHA256)
	return tw.Flush()
}

// Usage prints the command's help.
func (c *TargetCreateCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence target create --scope S --target K (--value V | --value-file F)
                             [--kind etcd --target-key KEY]
                             [--kind kubernetes --object configmaps/NS/NAME
                              --kubeconfig F] [common arguments]

Creates target K in scope S at revision 1 with the given value. Target
names are unique across the receiver, not per scope: K must not name a
target of any scope (the refusal says which scope holds it).
Privileged: requires the receiver's private key.

With --kind etcd (receivers on --etcd, or a served receiver on etcd;
kind_unsupported otherwise), the target is the
application's etcd key KEY, outside the receiver's prefix: every applied
write puts the raw value in KEY in the receiver's own transaction, and
a request's expect_revision is KEY's mod revision. KEY must be absent
(it is written with the value) or hold exactly the value (it is
adopted), and be no other target's key.

With --kind kubernetes, the target is the ConfigMap NAME in namespace NS,
which must exist and carry the label kvfence.dev/scope (deploy/kubernetes
keeps every other identity from writing it); its value is the object's
data as canonical JSON, read through --kubeconfig, so no --value is
given. Every applied write is one update of the object with the
resourceVersion the decision read as its precondition; a hold is
acknowledged only once every write decided before it has settled.
With --server, the served receiver reads the object through its own
identity (its kvfence serve --kubeconfig; no_dispatcher when it has
none), so --kubeconfig, --kube-context and --kube-in-cluster are refused.

Arguments:

	--scope S
	    The scope the target belongs to; it must exist.
	--target K
	    The target's name, unique across the receiver.
	--value V
	    The initial value, as given.
	--value-file F
	    Read the initial value from F, byte for byte ("-" for stdin).
	--kind internal|etcd|kubernetes
	    The target's kind (default internal, a value in the receiver's
	    store).
	--object RESOURCE/NAMESPACE/NAME
	    The object of a target of kind kubernetes: configmaps/NS/NAME.
	--target-key KEY
	    The etcd key of a target of kind etcd: printable ASCII without
	    blanks, at most 512 bytes.
`+usageKey+usageDB+usageServer+usageJSON)
}

// TargetListCommand lists targets with their scope, revision and value
// digest. It opens the database read-only.
type TargetListCommand struct{ m *Main }

// targetListJSON is the --json shape of target list: {"targets":[...]} by
// name. Values are not included (observe target shows one); value_size
// and value_sha256 describe them.
type targetListJSON struct {
	// Targets are the targets, ordered by name.
	Targets []targetListEntryJSON `json:"targets"`
}

// targetListEntryJSON is one target of target list.
type targetListEntryJSON struct {
	// Target is the target's name, unique across the receiver.
	Target string `json:"target"`
	// Scope is the scope the target belongs to.
	Scope string `json:"scope"`
	// Revision is the target's current revision.
	Revision uint64 `json:"revision"`
	// ValueSize is the value's length in bytes.
	ValueSize int `json:"value_size"`
	// ValueSHA256 is the value's SHA-256 in lowercase hex.
	ValueSHA256 string `json:"value_sha256"`
	// Kind is given for a target of another kind than internal, so that
	// an internal target's entry is as it was; Key is then an etcd
	// target's key, Object a kubernetes target's object.
	Kind   string `json:"kind,omitempty"`
	Key    string `json:"key,omitempty"`
	Object string `json:"object,omitempty"`
}

// Run runs the command.
func (c *TargetListCommand) Run(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("target list")
	cf := commonFlags{name: "target list"}
	cf.register(fs, withDB)
	var rf remoteFlags
	rf.register(fs)
	scope := fs.String("scope", "", "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	cf.resolve(fs, c.m.Getenv)
	if err := rf.check(fs, "target list"); err != nil {
		return err
	}
	if isSet(fs, "scope") && *scope == "" {
		return &usageError{msg: "kvfence target list: --scope is empty", hint: "kvfence target list -h"}
	}
	targets, err := either(&cf, &rf, false, c.m.warn,
		func(r *kvfence.Receiver) ([]kvfence.Target, error) { return r.Targets(*scope) },
		func(cl *client.Client) ([]kvfence.Target, error) { return cl.Targets(ctx, *scope) })
	if err != nil {
		return err
	}
	out := targetListJSON{Targets: []targetListEntryJSON{}}
	for _, t := range targets {
		sum := sha256.Sum256(t.Value)
		e := targetListEntryJSON{Target: t.Name, Scope: t.Scope, Revision: t.Revision,
			ValueSize: len(t.Value), ValueSHA256: hex.EncodeToString(sum[:]), Key: t.Key}
		if t.Kind != "" && t.Kind != kvfence.TargetInternal {
			e.Kind = string(t.Kind)
		}
		if t.Object != nil {
			e.Object = t.Object.String()
		}
		out.Targets = append(out.Targets, e)
	}
	if cf.json {
		return writeJSON(c.m.Stdout, out)
	}
	tw := newTable(c.m.Stdout)
	fmt.Fprintln(tw, "TARGET\tSCOPE\tREVISION\tSIZE\tVALUE SHA256")
	for _, t := range out.Targets {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", t.Target, t.Scope, t.Revision, t.ValueSize, t.ValueSHA256)
	}
	return tw.Flush()
}

// Usage prints the command's help.
func (c *TargetListCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence target list [--scope S] [common arguments]

Lists the targets by name, of every scope or of scope S: scope, revision,
value size and the value's SHA-256 ("kvfence observe target K" shows a
value); with --json, a target of kind etcd or kubernetes also gives its
kind and its key or object. Target names are unique across the receiver. Opens the database
read-only.

Arguments:

	--scope S
	    List only this scope's targets; an unknown scope is refused.
`+usageDBRead+usageServer+usageJSON)
}
