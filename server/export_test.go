package server

import "time"

// SetStreamBounds sets the stall bound and the slowest average rate of a
// streamed answer for a test, and returns a function that restores them.
func SetStreamBounds(stall time.Duration, minRate int64) (restore func()) {
	s, r := streamStall, streamMinRate
	streamStall, streamMinRate = stall, minRate
	return func() { streamStall, streamMinRate = s, r }
}

// TakeBatchTurn takes one of h's batch turns for a test, as a batch being
// decided holds it, and returns the function that gives it back.
func (h *Handler) TakeBatchTurn() (release func()) {
	h.batchTurns <- struct{}{}
	return func() { <-h.batchTurns }
}
