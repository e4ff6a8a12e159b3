package main

import (
	"fmt"
	"os"
	"testing"
)

// TestMain points DFLASH_CACHE at a folder of the test run's own, so that no test reads or
// writes the user's cache (the default model, the depth controller's files).
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dflash-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("DFLASH_CACHE", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
