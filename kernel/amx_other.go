//go:build amd64 && !purego && !linux

package kernel

import "errors"

// requestAMX: only Linux's permission request is implemented; other systems run without the
// amx path.
func requestAMX() error { return errors.New("AMX tile data is requested only on Linux") }
