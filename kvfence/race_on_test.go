//go:build race

package kvfence

// raceEnabled makes the slowest sweeps try fewer cases under the race
// detector, which slows every fenced write several times and finds nothing
// in a sweep's single goroutine that a plain run would not.
const raceEnabled = true
