package kvfence

// The hand-written codecs of the stored records (see fastcbor.go).

func appendControl(b []byte, c *controlRecord) []byte {
	n := count(3, len(c.Denials) > 0, c.ActivatedAt != 0, c.ActiveGrant != "", c.MaxGrantTTL != 0,
		c.StaleRejections != 0, c.HoldCommittedAt != 0, c.HoldRequestedAt != 0, c.LastStaleRejectionAt != 0)
	b = appendHead(b, majorMap, uint64(n))
	b = appendText(append(b, kMode...), string(c.Mode))
	b = appendUint(append(b, kEpoch...), c.Epoch)
	if len(c.Denials) > 0 {
		b = appendDenials(append(b, kDenials...), c.Denials)
	}
	b = appendInt(append(b, kCreatedAt...), c.CreatedAt)
	if c.ActivatedAt != 0 {
		b = appendInt(append(b, kActivatedAt...), c.ActivatedAt)
	}
	if c.ActiveGrant != "" {
		b = appendText(append(b, kActiveGrant...), c.ActiveGrant)
	}
	if c.MaxGrantTTL != 0 {
		b = appendInt(append(b, kMaxGrantTTL...), c.MaxGrantTTL)
	}
	if c.StaleRejections != 0 {
		b = appendUint(append(b, kStaleRejections...), c.StaleRejections)
	}
	if c.HoldCommittedAt != 0 {
		b = appendInt(append(b, kHoldCommittedAt...), c.HoldCommittedAt)
	}
	if c.HoldRequestedAt != 0 {
		b = appendInt(append(b, kHoldRequestedAt...), c.HoldRequestedAt)
	}
	if c.LastStaleRejectionAt != 0 {
		b = appendInt(append(b, kLastStaleRejectionAt...), c.LastStaleRejectionAt)
	}
	return b
}

// textKeyLess orders text keys as their encodings sort: a shorter string
// has a smaller head, and equal heads leave the bytes to decide.
func textKeyLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

func appendDenials(b []byte, m map[Reason]uint64) []byte {
	var buf [24]Reason
	keys := buf[:0]
	for k := range m {
		keys = append(keys, k)
	}
	// Insertion sort: the map holds at most one entry per reason code.
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && textKeyLess(string(keys[j]), string(keys[j-1])); j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	b = appendHead(b, majorMap, uint64(len(keys)))
	for _, k := range keys {
		b = appendUint(appendText(b, string(k)), m[k])
	}
	return b
}

func appendGrant(b []byte, g *grantRecord) []byte {
	n := count(10, g.Decision != "", g.AuditSeq != 0, g.RevokedSeq != 0)
	b = appendHead(b, majorMap, uint64(n))
	b = appendText(append(b, kID...), g.ID)
	b = appendText(append(b, kClaim...), g.Claim)
	b = appendUint(append(b, kEpoch...), g.Epoch)
	b = appendText(append(b, kScope...), g.Scope)
	b = appendText(append(b, kAction...), g.Action)
	if g.Decision != "" {
		b = appendText(append(b, kDecision...), g.Decision)
	}
	b = appendText(append(b, kExecutor...), g.Executor)
	if g.AuditSeq != 0 {
		b = appendUint(append(b, kAuditSeq...), g.AuditSeq)
	}
	b = appendInt(append(b, kNotAfter...), g.NotAfter)
	b = appendInt(append(b, kCreatedAt...), g.CreatedAt)
	b = appendInt(append(b, kNotBefore...), g.NotBefore)
	if g.RevokedSeq != 0 {
		b = appendUint(append(b, kRevokedSeq...), g.RevokedSeq)
	}
	return appendBytes(append(b, kRequestSHA256...), g.RequestSHA256)
}

func appendTarget(b []byte, t *targetRecord) []byte {
	b = appendHead(b, majorMap, 3)
	b = appendText(append(b, kScope...), t.Scope)
	b = appendBytes(append(b, kValue...), t.Value)
	return appendUint(append(b, kRevision...), t.Revision)
}

func appendReceipt(b []byte, rc *receiptRecord) []byte {
	b = appendHead(b, majorMap, 7)
	b = appendInt(append(b, kAt...), rc.At)
	b = appendText(append(b, kGrant...), rc.Grant)
	b = appendText(append(b, kTarget...), rc.Target)
	b = appendUint(append(b, kAuditSeq...), rc.AuditSeq)
	b = appendUint(append(b, kRevAfter...), rc.RevAfter)
	b = appendUint(append(b, kRevBefore...), rc.RevBefore)
	return appendBytes(append(b, kRequestSHA256...), rc.RequestSHA256)
}

// internMode returns the constant for a known mode, so that decoding a
// control record does not allocate for it.
func internMode(b []byte) (Mode, bool) {
	switch string(b) {
	case string(ModeHeld):
		return ModeHeld, true
	case string(ModeOpen):
		return ModeOpen, true
	}
	return "", false
}

// knownReasons maps each denial code to its constant, for the keys of a
// control record's Denials.
var knownReasons = func() map[string]Reason {
	m := make(map[string]Reason)
	for _, r := range []Reason{
		ReasonMalformedEnvelope, ReasonMalformedRequest, ReasonUnknownScope, ReasonReceiverHeld,
		ReasonStaleEpoch, ReasonInactiveGrant, ReasonUnknownGrant, ReasonExecutorMismatch,
		ReasonClaimMismatch, ReasonRequestMismatch, ReasonGrantNotYetValid, ReasonGrantExpired,
		ReasonActionReuseConflict, ReasonUnknownTarget, ReasonPreconditionFailed,
	} {
		m[string(r)] = r
	}
	return m
}()

func scanControl(in []byte) (controlRecord, bool) {
	var c controlRecord
	r := cborReader{b: in}
	left := r.head(majorMap)
	if r.bad || left < 3 {
		return c, false
	}
	var grant span
	hasGrant := false
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
	var mode span
	if field(kMode, false) {
		mode = r.text()
	}
	if field(kEpoch, false) {
		c.Epoch = r.uint()
	}
	if field(kDenials, true) {
		n := r.head(majorMap)
		if r.bad || n > recordMaxMapPairs {
			return c, false
		}
		c.Denials = make(map[Reason]uint64, n)
		for range n {
			s := r.text()
			v := r.uint()
			if r.bad {
				return c, false
			}
			k, ok := knownReasons[string(in[s.lo:s.hi])]
			if !ok {
				k = Reason(in[s.lo:s.hi])
			}
			if _, dup := c.Denials[k]; dup {
				return c, false
			}
			c.Denials[k] = v
		}
	}
	if field(kCreatedAt, false) {
		c.CreatedAt = r.int()
	}
	if field(kActivatedAt, true) {
		c.ActivatedAt = r.int()
	}
	if field(kActiveGrant, true) {
		grant, hasGrant = r.text(), true
	}
	if field(kMaxGrantTTL, true) {
		c.MaxGrantTTL = r.int()
	}
	if field(kStaleRejections, true) {
		c.StaleRejections = r.uint()
	}
	if field(kHoldCommittedAt, true) {
		c.HoldCommittedAt = r.int()
	}
	if field(kHoldRequestedAt, true) {
		c.HoldRequestedAt = r.int()
	}
	if field(kLastStaleRejectionAt, true) {
		c.LastStaleRejectionAt = r.int()
	}
	if left != 0 || !r.done() {
		return c, false
	}
	m, ok := internMode(in[mode.lo:mode.hi])
	if !ok {
		m = Mode(in[mode.lo:mode.hi])
	}
	c.Mode = m
	if hasGrant {
		c.ActiveGrant = string(in[grant.lo:grant.hi])
	}
	return c, true
}

func scanGrant(in []byte) (grantRecord, bool) {
	var g grantRecord
	r := cborReader{b: in}
	left := r.head(majorMap)
	if r.bad || left < 10 {
		return g, false
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
	var ts texts
	id, claim, scope, action, decision, executor := -1, -1, -1, -1, -1, -1
	if field(kID, false) {
		id = ts.add(r.text())
	}
	if field(kClaim, false) {
		claim = ts.add(r.text())
	}
	if field(kEpoch, false) {
		g.Epoch = r.uint()
	}
	if field(kScope, false) {
		scope = ts.add(r.text())
	}
	if field(kAction, false) {
		action = ts.add(r.text())
	}
	if field(kDecision, true) {
		decision = ts.add(r.text())
	}
	if field(kExecutor, false) {
		executor = ts.add(r.text())
	}
	if field(kAuditSeq, true) {
		g.AuditSeq = r.uint()
	}
	if field(kNotAfter, false) {
		g.NotAfter = r.int()
	}
	if field(kCreatedAt, false) {
		g.CreatedAt = r.int()
	}
	if field(kNotBefore, false) {
		g.NotBefore = r.int()
	}
	if field(kRevokedSeq, true) {
		g.RevokedSeq = r.uint()
	}
	var sum span
	if field(kRequestSHA256, false) {
		sum = r.blob()
	}
	if left != 0 || !r.done() {
		return g, false
	}
	s := ts.build(in)
	g.ID, g.Claim, g.Scope, g.Action, g.Executor = s[id], s[claim], s[scope], s[action], s[executor]
	if decision >= 0 {
		g.Decision = s[decision]
	}
	g.RequestSHA256 = copySpan(in, sum)
	return g, true
}

// copySpan returns a copy of one byte-string span, nil for null.
func copySpan(in []byte, s span) []byte {
	if s.null {
		return nil
	}
	return append(make([]byte, 0, s.hi-s.lo), in[s.lo:s.hi]...)
}

func scanTarget(in []byte) (targetRecord, bool) {
	var t targetRecord
	r := cborReader{b: in}
	if r.head(majorMap) != 3 || !r.key(kScope) {
		return t, false
	}
	scope := r.text()
	if !r.key(kValue) {
		return t, false
	}
	value := r.blob()
	if !r.key(kRevision) {
		return t, false
	}
	t.Revision = r.uint()
	if !r.done() {
		return t, false
	}
	t.Scope = string(in[scope.lo:scope.hi])
	t.Value = copySpan(in, value)
	return t, true
}

func scanReceipt(in []byte) (receiptRecord, bool) {
	var rc receiptRecord
	r := cborReader{b: in}
	if r.head(majorMap) != 7 || !r.key(kAt) {
		return rc, false
	}
	rc.At = r.int()
	var ts texts
	if !r.key(kGrant) {
		return rc, false
	}
	grant := ts.add(r.text())
	if !r.key(kTarget) {
		return rc, false
	}
	target := ts.add(r.text())
	if !r.key(kAuditSeq) {
		return rc, false
	}
	rc.AuditSeq = r.uint()
	if !r.key(kRevAfter) {
		return rc, false
	}
	rc.RevAfter = r.uint()
	if !r.key(kRevBefore) {
		return rc, false
	}
	rc.RevBefore = r.uint()
	if !r.key(kRequestSHA256) {
		return rc, false
	}
	sum := r.blob()
	if !r.done() {
		return rc, false
	}
	s := ts.build(in)
	rc.Grant, rc.Target = s[grant], s[target]
	rc.RequestSHA256 = copySpan(in, sum)
	return rc, true
}

// decodeRecordFast decodes a canonical control, grant, target or receipt
// record into v, which must point to a zero record. It reports false, with
// v unchanged, for anything else; the caller then decodes reflectively. A
// non-zero v is left to the reflection decoder too, which merges into it.
func decodeRecordFast(raw []byte, v any) bool {
	switch x := v.(type) {
	case *controlRecord:
		if x == nil || !x.isZero() {
			return false
		}
		c, ok := scanControl(raw)
		if !ok {
			return false
		}
		if p := getScratch(); !reencodes(p, appendControl((*p)[:0], &c), raw) {
			return false
		}
		*x = c
		return true
	case *grantRecord:
		if x == nil || !x.isZero() {
			return false
		}
		g, ok := scanGrant(raw)
		if !ok {
			return false
		}
		if p := getScratch(); !reencodes(p, appendGrant((*p)[:0], &g), raw) {
			return false
		}
		*x = g
		return true
	case *targetRecord:
		if x == nil || !(x.Scope == "" && x.Revision == 0 && x.Value == nil && x.Kind == "" && x.Effect == "" && x.Object == nil && x.UID == "" && x.Key == "" && x.ValueSHA256 == nil) {
			return false
		}
		t, ok := scanTarget(raw)
		if !ok {
			return false
		}
		if p := getScratch(); !reencodes(p, appendTarget((*p)[:0], &t), raw) {
			return false
		}
		*x = t
		return true
	case *receiptRecord:
		if x == nil || !(x.Grant == "" && x.RequestSHA256 == nil && x.Target == "" && x.RevBefore == 0 &&
			x.RevAfter == 0 && x.AuditSeq == 0 && x.At == 0 && !x.isRemote()) {
			return false
		}
		rc, ok := scanReceipt(raw)
		if !ok {
			return false
		}
		if p := getScratch(); !reencodes(p, appendReceipt((*p)[:0], &rc), raw) {
			return false
		}
		*x = rc
		return true
	}
	return false
}

func (c *controlRecord) isZero() bool {
	return c.Epoch == 0 && c.Mode == "" && c.ActiveGrant == "" && c.CreatedAt == 0 && c.HoldRequestedAt == 0 &&
		c.HoldCommittedAt == 0 && c.ActivatedAt == 0 && c.LastStaleRejectionAt == 0 && c.StaleRejections == 0 &&
		c.Denials == nil && c.MaxGrantTTL == 0
}

func (g *grantRecord) isZero() bool {
	return g.ID == "" && g.Scope == "" && g.Epoch == 0 && g.Executor == "" && g.Claim == "" && g.Action == "" &&
		g.RequestSHA256 == nil && g.NotBefore == 0 && g.NotAfter == 0 && g.Decision == "" && g.CreatedAt == 0 &&
		g.RevokedSeq == 0 && g.AuditSeq == 0
}
