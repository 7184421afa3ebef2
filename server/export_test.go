package server

import "time"

// SetStreamBounds sets the stall bound and the slowest average rate of a
// streamed answer for a test, and returns a function that restores them.
func SetStreamBounds(stall time.Duration, minRate int64) (restore func()) {
	s, r := streamStall, streamMinRate
	streamStall, streamMinRate = stall, minRate
	return func() { streamStall, streamMinRate = s, r }
}
