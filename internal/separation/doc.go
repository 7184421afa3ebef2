// Package separation reports what the file system says about how far a
// receiver's anchor file is kept from its database: whether both are on
// one file system (device) and whether one uid owns both. It reports
// facts, never a verdict: a snapshot or backup of one file system
// restores both files together, and whoever owns both can put an old
// anchor back beside an old database, but only the operator knows how the
// volumes and accounts are administered.
package separation
