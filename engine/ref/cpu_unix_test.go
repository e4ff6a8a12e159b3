//go:build unix

package ref

import (
	"syscall"
	"time"
)

// processCPU is the user and system CPU time the process has used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1 << 62
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
