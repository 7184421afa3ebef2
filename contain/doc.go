// Package contain holds an approved action at every receiving boundary it
// can reach once its claim has been superseded, and keeps the evidence.
//
// A Coordinator works over the execution ledger (package ledger), which
// knows the action's boundaries, the receivers' pinned keys and the
// containment record, and over the receivers themselves, reached through
// the Boundary interface: a served receiver (Served, over package client)
// or a receiver on this host (Local, Embedded). The ledger imports no
// receiver; this package is the one place that joins the two.
//
// Contain asks every boundary not yet contained for an idempotent hold
// whose id the ledger derived from the containment, so that a rerun after
// a lost answer repeats the first hold instead of issuing a new
// generation. A boundary counts as acknowledged only when the receiver's
// signed hold acknowledgment verifies under the key the ledger pinned for
// it; anything else (a failure, a timeout, an unknown outcome, a signature
// that does not verify) keeps the containment partial, and the record says
// which. Activate opens a successor only after the containment is full (or
// full with an alternate) and the superseded claim is reconciled, and at
// each boundary only at the epoch the containment installed there, so
// that a hold made since makes that activation fail.
package contain
