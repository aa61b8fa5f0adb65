// Package newcomer checks that what the documents tell a newcomer matches
// what is there: the Debian packages README's Quick start names are exactly
// packaging/prerequisites.txt, the file .ci/run installs from; the command
// summary in docs/api.md is sandbox-host's command tree (every command and
// flag); the endpoint tables of every document are the host's route table
// (every endpoint, its role, the mode values; docs/api.md lists them all);
// every relative link and #anchor between README.md and the manuals under
// docs/ resolves. It holds tests only.
package newcomer
