//go:build !unix

package server

func descriptorLimit() (uint64, error) { return 0, errNoRlimit }
