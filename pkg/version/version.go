// Package version carries the build's version string, set by the linker.
package version

// Version is overridden at build time with -ldflags -X.
var Version = "0.1.0-dev"
