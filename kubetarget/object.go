package kubetarget

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/kvfence/kvfence/kvfence"
)

// ErrUnsupportedResource means a RemoteObject names something other than a
// ConfigMap (core group, version v1, resource configmaps, namespaced), the
// only resource whose value this package defines.
var ErrUnsupportedResource = errors.New("kubetarget: only core v1 configmaps are supported")

// ErrInvalidObjectName means a RemoteObject's namespace or name is not one
// the API server could hold, so that no request is made for it.
var ErrInvalidObjectName = errors.New("kubetarget: invalid object name")

// ErrMalformedObject means the API server answered with something that is
// not a ConfigMap this package can read.
var ErrMalformedObject = errors.New("kubetarget: malformed object from the API server")

// objectPath checks obj and returns its REST path.
func objectPath(obj kvfence.RemoteObject) (string, error) {
	if obj.Group != "" || obj.Version != "v1" || obj.Resource != "configmaps" {
		return "", fmt.Errorf("%w: got group %q version %q resource %q", ErrUnsupportedResource, obj.Group, obj.Version, obj.Resource)
	}
	// A namespace is a DNS label and a ConfigMap's name a DNS subdomain;
	// checking them here also keeps a hostile name from reaching another
	// path ("../", "?", "%").
	if !isDNSLabel(obj.Namespace) {
		return "", fmt.Errorf("%w: namespace %q is not a DNS label", ErrInvalidObjectName, obj.Namespace)
	}
	if !isDNSSubdomain(obj.Name) {
		return "", fmt.Errorf("%w: name %q is not a DNS subdomain", ErrInvalidObjectName, obj.Name)
	}
	return "/api/v1/namespaces/" + obj.Namespace + "/configmaps/" + obj.Name, nil
}

// isDNSLabel reports whether s is an RFC 1123 label: 1-63 lower-case
// letters, digits and '-', starting and ending with a letter or digit.
func isDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// isDNSSubdomain reports whether s is an RFC 1123 subdomain: at most 253
// bytes of labels joined by '.'.
func isDNSSubdomain(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for _, label := range bytes.Split([]byte(s), []byte(".")) {
		if !isDNSLabel(string(label)) {
			return false
		}
	}
	return true
}

// object is a ConfigMap as the API server sent it: raw keeps every field,
// so that an update sends back what it does not change; the rest is what
// this package reads.
type object struct {
	raw             map[string]json.RawMessage
	metadata        map[string]json.RawMessage
	resourceVersion string
	uid             string
	labels          map[string]string
	annotations     map[string]string
	data            map[string]string
}

// decodeObject parses an API server's ConfigMap.
func decodeObject(body []byte) (*object, error) {
	o := &object{}
	if err := json.Unmarshal(body, &o.raw); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformedObject, err)
	}
	var kind string
	if err := unmarshalField(o.raw, "kind", &kind); err != nil || kind != "ConfigMap" {
		return nil, fmt.Errorf("%w: kind %q, not ConfigMap (%v)", ErrMalformedObject, kind, err)
	}
	if err := unmarshalField(o.raw, "metadata", &o.metadata); err != nil {
		return nil, fmt.Errorf("%w: metadata: %v", ErrMalformedObject, err)
	}
	for _, f := range []struct {
		name string
		into any
	}{
		{"resourceVersion", &o.resourceVersion},
		{"uid", &o.uid},
		{"labels", &o.labels},
		{"annotations", &o.annotations},
	} {
		if err := unmarshalField(o.metadata, f.name, f.into); err != nil {
			return nil, fmt.Errorf("%w: metadata.%s: %v", ErrMalformedObject, f.name, err)
		}
	}
	if o.resourceVersion == "" || o.uid == "" {
		return nil, fmt.Errorf("%w: no resourceVersion or uid", ErrMalformedObject)
	}
	o.data = map[string]string{}
	if d, ok := o.raw["data"]; ok && string(d) != "null" {
		data, err := DecodeData(d)
		if err != nil {
			return nil, fmt.Errorf("%w: data: %v", ErrMalformedObject, err)
		}
		o.data = data
	}
	return o, nil
}

// unmarshalField decodes m[name] into v if present; absent or null leaves v.
func unmarshalField(m map[string]json.RawMessage, name string, v any) error {
	b, ok := m[name]
	if !ok || string(b) == "null" {
		return nil
	}
	return json.Unmarshal(b, v)
}

// state returns what o holds as a RemoteState; malformed stamp
// annotations are read as no stamp (package doc).
func (o *object) state() kvfence.RemoteState {
	stamp, _ := ParseStamp(o.annotations)
	return kvfence.RemoteState{Version: o.resourceVersion, UID: o.uid, Value: EncodeData(o.data), Stamp: stamp}
}

// updateBody returns o as an update that changes only what is given: the
// preconditions, the stamp annotations, and data when it is not nil.
func (o *object) updateBody(resourceVersion, uid string, stamp map[string]string, data map[string]string) ([]byte, error) {
	ann := map[string]string{}
	for k, v := range o.annotations {
		ann[k] = v
	}
	for k, v := range stamp {
		ann[k] = v
	}
	md := map[string]json.RawMessage{}
	for k, v := range o.metadata {
		md[k] = v
	}
	var err error
	set := func(m map[string]json.RawMessage, k string, v any) {
		if err != nil {
			return
		}
		m[k], err = json.Marshal(v)
	}
	set(md, "resourceVersion", resourceVersion)
	set(md, "uid", uid)
	set(md, "annotations", ann)
	raw := map[string]json.RawMessage{}
	for k, v := range o.raw {
		raw[k] = v
	}
	set(raw, "metadata", md)
	if data != nil {
		raw["data"] = EncodeData(data)
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(raw)
}
