package kvfence

// The hand-written codecs of envelopes and requests (see fastcbor.go).

func appendEnvelope(b []byte, e *Envelope) []byte {
	b = appendHead(b, majorMap, 7)
	b = appendUint(append(b, kV...), e.V)
	b = appendText(append(b, kClaim...), e.Claim)
	b = appendUint(append(b, kEpoch...), e.Epoch)
	b = appendText(append(b, kGrant...), e.Grant)
	b = appendText(append(b, kScope...), e.Scope)
	b = appendBytes(append(b, kRequest...), e.Request)
	return appendText(append(b, kExecutor...), e.Executor)
}

func appendRequest(b []byte, r *Request) []byte {
	n := count(3, r.Set != nil, len(r.Patch) > 0, r.ExpectValue != nil, r.ExpectRevision != nil)
	b = appendHead(b, majorMap, uint64(n))
	b = appendUint(append(b, kV...), r.V)
	if r.Set != nil {
		b = appendBytes(append(b, kSet...), *r.Set)
	}
	if len(r.Patch) > 0 {
		b = appendBytes(append(b, kPatch...), r.Patch)
	}
	b = appendText(append(b, kAction...), r.Action)
	b = appendText(append(b, kTarget...), r.Target)
	if r.ExpectValue != nil {
		b = appendBytes(append(b, kExpectValue...), *r.ExpectValue)
	}
	if r.ExpectRevision != nil {
		b = appendUint(append(b, kExpectRevision...), *r.ExpectRevision)
	}
	return b
}

func scanEnvelope(in []byte) (Envelope, bool) {
	var e Envelope
	r := cborReader{b: in}
	if r.head(majorMap) != 7 || !r.key(kV) {
		return e, false
	}
	e.V = r.uint()
	var ts texts
	if !r.key(kClaim) {
		return e, false
	}
	claim := ts.add(r.text())
	if !r.key(kEpoch) {
		return e, false
	}
	e.Epoch = r.uint()
	if !r.key(kGrant) {
		return e, false
	}
	grant := ts.add(r.text())
	if !r.key(kScope) {
		return e, false
	}
	scope := ts.add(r.text())
	if !r.key(kRequest) {
		return e, false
	}
	req := r.blob()
	if !r.key(kExecutor) {
		return e, false
	}
	executor := ts.add(r.text())
	if !r.done() {
		return e, false
	}
	s := ts.build(in)
	e.Claim, e.Grant, e.Scope, e.Executor = s[claim], s[grant], s[scope], s[executor]
	e.Request = copySpan(in, req)
	return e, true
}

// requestBox holds a request's optional fields, so that decoding one
// allocates them together.
type requestBox struct {
	rev        uint64
	set, value []byte
}

func scanRequest(in []byte) (Request, bool) {
	var q Request
	r := cborReader{b: in}
	left := r.head(majorMap)
	if r.bad || left < 3 {
		return q, false
	}
	field := func(k string, optional bool) bool {
		if left > 0 && r.key(k) {
			left--
			return true
		}
		if !optional {
			r.bad = true
		}
		return false
	}
	var bs blobs
	set, patch, value := -1, -1, -1
	if field(kV, false) {
		q.V = r.uint()
	}
	// A null optional decodes as absent and then fails the re-encoding;
	// declining it here is the same outcome, reached sooner.
	if field(kSet, true) {
		if set = bs.add(r.blob()); bs.spans[set].null {
			return q, false
		}
	}
	if field(kPatch, true) {
		if patch = bs.add(r.blob()); bs.spans[patch].null {
			return q, false
		}
	}
	var ts texts
	action, target := -1, -1
	if field(kAction, false) {
		action = ts.add(r.text())
	}
	if field(kTarget, false) {
		target = ts.add(r.text())
	}
	if field(kExpectValue, true) {
		if value = bs.add(r.blob()); bs.spans[value].null {
			return q, false
		}
	}
	hasRev := field(kExpectRevision, true)
	var rev uint64
	if hasRev {
		rev = r.uint()
	}
	if left != 0 || !r.done() {
		return q, false
	}
	s := ts.build(in)
	q.Action, q.Target = s[action], s[target]
	b := bs.build(in)
	if patch >= 0 {
		q.Patch = b[patch]
	}
	if set >= 0 || value >= 0 || hasRev {
		box := new(requestBox)
		if set >= 0 {
			box.set = b[set]
			q.Set = &box.set
		}
		if value >= 0 {
			box.value = b[value]
			q.ExpectValue = &box.value
		}
		if hasRev {
			box.rev = rev
			q.ExpectRevision = &box.rev
		}
	}
	return q, true
}

// decodeWireFast is decodeRecordFast for envelopes and requests.
func decodeWireFast(b []byte, v any) bool {
	switch x := v.(type) {
	case *Envelope:
		if x == nil || !(x.V == 0 && x.Scope == "" && x.Epoch == 0 && x.Grant == "" && x.Executor == "" &&
			x.Claim == "" && x.Request == nil) {
			return false
		}
		e, ok := scanEnvelope(b)
		if !ok {
			return false
		}
		if p := getScratch(); !reencodes(p, appendEnvelope((*p)[:0], &e), b) {
			return false
		}
		*x = e
		return true
	case *Request:
		if x == nil || !(x.V == 0 && x.Action == "" && x.Target == "" && x.ExpectRevision == nil &&
			x.ExpectValue == nil && x.Set == nil && x.Patch == nil && x.patch == nil) {
			return false
		}
		q, ok := scanRequest(b)
		if !ok {
			return false
		}
		if p := getScratch(); !reencodes(p, appendRequest((*p)[:0], &q), b) {
			return false
		}
		*x = q
		return true
	}
	return false
}
