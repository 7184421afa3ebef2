//go:build !race

package kvfence

const raceEnabled = false
