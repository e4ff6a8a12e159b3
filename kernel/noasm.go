//go:build !amd64 || purego

package kernel

// hasAsm tells tests that this build has only the portable path.
const hasAsm = false
