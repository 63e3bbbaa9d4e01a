// Package docscheck holds the checks that keep the documentation true to the repository: every
// relative link and #anchor in README.md, CHANGELOG.md and docs/ resolves; the README's Go
// example compiles; no text speaks of how the software was developed (commit hashes in prose, work
// periods, the people who built it, this project's tracker numbers, first person); the migration
// range the docs name matches migrations/; and every SEQBUS_* name the docs mention is one the
// code defines.
//
// The package has no code of its own beyond its tests, which read the repository's files and
// import nothing of seqbus except in the README example. It must never be imported.
package docscheck
