package kvfence

// SetRequest returns a request (version WireVersion) for action that sets
// target to value. It copies value, so that the caller's slice may change
// afterwards. Preconditions are added with WithExpectRevision and
// WithExpectValue; EncodeRequest checks the whole.
func SetRequest(action, target string, value []byte) *Request {
	v := append([]byte{}, value...)
	return &Request{V: WireVersion, Action: action, Target: target, Set: &v}
}

// PatchRequest returns a request (version WireVersion) for action that
// applies the RFC 6902 JSON Patch patch to target's value. It copies patch.
func PatchRequest(action, target string, patch []byte) *Request {
	return &Request{V: WireVersion, Action: action, Target: target, Patch: append([]byte{}, patch...)}
}

// WithExpectRevision makes the request apply only while the target is at
// revision rev, and returns r.
func (r *Request) WithExpectRevision(rev uint64) *Request {
	r.ExpectRevision = &rev
	return r
}

// WithExpectValue makes the request apply only while the target's value is
// value (compared byte for byte), and returns r. It copies value.
func (r *Request) WithExpectValue(value []byte) *Request {
	v := append([]byte{}, value...)
	r.ExpectValue = &v
	return r
}
