// Package defect opens receivers that are wrong on purpose. The tests and
// the lab use it to show that their assertions go red when a decisive check
// is removed. It is internal so that no program outside this module can
// reach it: the public API has no way to weaken a receiver. Within the
// module, only a binary built with the kvfencelab tag (the lab build)
// installs Open and OpenLedger; in every other build they are nil, and the
// receiver and the ledger refuse a defective variant even when asked
// directly, except in their own package tests.
package defect

// Variant names the checks a defective receiver skips.
type Variant struct {
	// SkipAuthority skips Submit's checks 2-4 (mode, epoch, active grant),
	// the control that rejects a superseded worker.
	SkipAuthority bool
	// SkipAnchor opens without comparing the database with its anchor, the
	// control that detects a restored copy of the database.
	SkipAnchor bool
	// CheckOutsideTransaction runs Submit's checks 2-4 in a read
	// transaction of their own before the write transaction that decides
	// the rest. Alone it changes no decision (the write transaction checks
	// again); with SkipAuthority it is CheckThenAct.
	CheckOutsideTransaction bool
}

// CheckThenAct is the receiver that checks the fence in one transaction and
// applies in a later one without checking again: a hold that commits in
// between does not stop the superseded grant.
var CheckThenAct = Variant{SkipAuthority: true, CheckOutsideTransaction: true}

// Open opens the receiver database at path with the given *kvfence.Options
// (nil for defaults) as the given variant and returns a *kvfence.Receiver.
// The kvfence package installs it when it is initialised in the lab build;
// otherwise it is nil.
var Open func(path string, opts any, v Variant) (any, error)

// OpenLedger opens the ledger file at path with the given *ledger.Options
// as the given variant (only SkipAnchor applies) and returns a
// *ledger.Ledger. The ledger package installs it when it is initialised in
// the lab build; otherwise it is nil.
var OpenLedger func(path string, opts any, v Variant) (any, error)
