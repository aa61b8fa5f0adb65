// Package newcomer checks that what README tells a newcomer matches what
// is there: the Debian packages README's Quick start names are exactly
// packaging/prerequisites.txt, the file .ci/run installs from; the command
// summary under Running turns is sandbox-host's command tree (every command
// and flag); the endpoint tables are the host's route table (every endpoint,
// its role, the mode values). It holds tests only.
package newcomer
