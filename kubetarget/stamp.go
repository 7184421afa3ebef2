package kubetarget

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/kvfence/kvfence/internal/ident"
	"github.com/kvfence/kvfence/kvfence"
)

// The annotations that hold the receiver's stamp, and the label that puts
// an object under deploy/kubernetes's admission policy.
const (
	// AnnotationScope holds Stamp.Scope.
	AnnotationScope = "kvfence.dev/scope"
	// AnnotationEpoch holds Stamp.Epoch in decimal.
	AnnotationEpoch = "kvfence.dev/epoch"
	// AnnotationGrant holds Stamp.Grant; empty for a fencing write.
	AnnotationGrant = "kvfence.dev/grant"
	// AnnotationReceipt holds Stamp.Receipt.
	AnnotationReceipt = "kvfence.dev/receipt"
	// LabelScope is the label that the admission policy guards: Apply
	// writes only objects that carry it.
	LabelScope = "kvfence.dev/scope"
)

// stampAnnotations are the four annotations, in the order errors name them.
var stampAnnotations = []string{AnnotationScope, AnnotationEpoch, AnnotationGrant, AnnotationReceipt}

// ErrMalformedStamp means an object's stamp annotations are partly present
// or do not parse; Read reads such an object as unstamped.
var ErrMalformedStamp = errors.New("kubetarget: malformed kvfence.dev stamp annotations")

// ErrInvalidStamp means a stamp given to Apply or Fence could not be read
// back: an empty or unprintable scope or receipt, or an unprintable grant.
var ErrInvalidStamp = errors.New("kubetarget: invalid stamp")

// ParseStamp reads the stamp from an object's annotations. None of the
// four annotations is the zero stamp and no error. Otherwise all four must
// be present: the scope and receipt valid identifiers (internal/ident),
// the grant empty or a valid identifier, and the epoch a decimal integer
// without sign or leading zero that fits 64 bits; else the zero stamp and
// an error wrapping ErrMalformedStamp.
func ParseStamp(annotations map[string]string) (kvfence.Stamp, error) {
	present := 0
	for _, k := range stampAnnotations {
		if _, ok := annotations[k]; ok {
			present++
		}
	}
	if present == 0 {
		return kvfence.Stamp{}, nil
	}
	for _, k := range stampAnnotations {
		if _, ok := annotations[k]; !ok {
			return kvfence.Stamp{}, fmt.Errorf("%w: %s is missing", ErrMalformedStamp, k)
		}
	}
	s := kvfence.Stamp{
		Scope:   annotations[AnnotationScope],
		Grant:   annotations[AnnotationGrant],
		Receipt: annotations[AnnotationReceipt],
	}
	epoch, err := parseEpoch(annotations[AnnotationEpoch])
	if err != nil {
		return kvfence.Stamp{}, fmt.Errorf("%w: %s: %v", ErrMalformedStamp, AnnotationEpoch, err)
	}
	s.Epoch = epoch
	if err := checkStamp(s); err != nil {
		return kvfence.Stamp{}, fmt.Errorf("%w: %v", ErrMalformedStamp, err)
	}
	return s, nil
}

// parseEpoch accepts only the form formatEpoch writes, so that one epoch
// has one annotation value.
func parseEpoch(v string) (uint64, error) {
	if v == "" || len(v) > 20 || v[0] == '0' && len(v) > 1 {
		return 0, fmt.Errorf("%q is not a decimal epoch", v)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, fmt.Errorf("%q is not a decimal epoch", v)
		}
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q does not fit 64 bits", v)
	}
	return n, nil
}

// checkStamp refuses a stamp that ParseStamp would not read back.
func checkStamp(s kvfence.Stamp) error {
	if err := ident.Check(AnnotationScope, s.Scope); err != nil {
		return err
	}
	if s.Grant != "" {
		if err := ident.Check(AnnotationGrant, s.Grant); err != nil {
			return err
		}
	}
	return ident.Check(AnnotationReceipt, s.Receipt)
}

// StampAnnotations returns the four annotations that hold s, or an error
// wrapping ErrInvalidStamp if ParseStamp could not read them back.
func StampAnnotations(s kvfence.Stamp) (map[string]string, error) {
	if err := checkStamp(s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidStamp, err)
	}
	return map[string]string{
		AnnotationScope:   s.Scope,
		AnnotationEpoch:   strconv.FormatUint(s.Epoch, 10),
		AnnotationGrant:   s.Grant,
		AnnotationReceipt: s.Receipt,
	}, nil
}
