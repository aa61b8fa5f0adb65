// Package arch holds no code: its test checks the import graph of pkg/
// against the layer list written in arch_test.go (docs/ARCHITECTURE.md).
package arch
