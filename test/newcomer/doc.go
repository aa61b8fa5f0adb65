// Package newcomer checks that the newcomer path stays one list: the Debian
// packages README's Quick start names are exactly packaging/prerequisites.txt,
// the file .ci/run installs from. It holds tests only.
package newcomer
