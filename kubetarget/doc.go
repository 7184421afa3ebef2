// Package kubetarget is the Dispatcher of remote targets of kind
// kubernetes (docs/design.md §4.2): it reads a ConfigMap, writes a decided
// value and the receiver's stamp on it with the object's resourceVersion
// and UID as preconditions, and fences it by a write that changes only the
// stamp. Its requests (a read and an update of one ConfigMap, as JSON)
// are its own, carried by package kubeclient's HTTPS client; it links no
// Kubernetes module.
//
// # Value
//
// A target's value is the ConfigMap's data as canonical JSON: a JSON
// object of strings in the form of RFC 8785 (JSON Canonicalization
// Scheme), that is, members sorted by key, no whitespace, and strings
// escaped only where JSON requires it. A request's JSON Patch applies to
// that object (a path /retention_days names the data key retention_days)
// and its Set replaces it. Apply accepts any JSON object of strings, with
// keys valid as ConfigMap keys and no key twice; Read and Apply return the
// canonical form, which CanonicalValue also gives. The object's binaryData,
// labels and other metadata are not part of the value and are left as they
// were. Other resources are refused with ErrUnsupportedResource.
//
// # Stamp
//
// Every write sets the annotations kvfence.dev/scope, kvfence.dev/epoch
// (a decimal integer), kvfence.dev/grant (empty for a fencing write) and
// kvfence.dev/receipt. Read parses them with ParseStamp; annotations that
// are partly present or malformed are read as no stamp at all, because a
// stamp is only evidence for the receiver, which decides: an object whose
// stamp it cannot read is one it must fence rather than trust.
//
// # Writes
//
// Apply reads the object and sends one update (PUT) of it with
// metadata.resourceVersion and metadata.uid set to the decision's, so that
// the API server, not this package, judges the precondition: a 409 is
// ErrRemoteConflict, a 404 ErrRemoteNotFound, anything else (a refusal by
// RBAC or an admission policy, a deadline, a broken connection) an error
// that is neither, whose outcome the receiver records as unknown. No write
// is retried. Apply refuses an object without the label kvfence.dev/scope,
// which is what puts it under the admission policy of deploy/kubernetes
// that leaves only the receiver's identity writing it.
package kubetarget
