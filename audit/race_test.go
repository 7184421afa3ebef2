//go:build race

package audit

// raceEnabled makes the byte-mangling tests try every bit flip of every
// byte instead of every value: the race detector slows the thousands of
// signature checks sixfold and finds nothing in them that a plain run
// would not.
const raceEnabled = true
