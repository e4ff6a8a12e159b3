//go:build amd64 && !purego

package kernel

import (
	"fmt"
	"syscall"
)

// requestAMX asks Linux for permission to use tile data (arch_prctl ARCH_REQ_XCOMP_PERM with
// XFEATURE_XTILEDATA), process-wide; kernels before 5.16 do not know the request.
func requestAMX() error {
	const (
		archReqXcompPerm  = 0x1023
		xfeatureXtiledata = 18
	)
	if _, _, e := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureXtiledata, 0); e != 0 {
		return fmt.Errorf("arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA): %v", e)
	}
	return nil
}
