// Package doccheck holds the tests that keep the module's documentation
// whole: every reference to a section of docs/design.md names a section
// that exists, and every exported name of an importable package, and every
// exported field of its exported structs, has a doc comment. It has no code
// of its own; its tests read the module's sources.
package doccheck
