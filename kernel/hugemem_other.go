//go:build !linux

package kernel

// mapHuge reports that weight mappings are not implemented here: weights stay on the Go heap.
func mapHuge(size int) (buf, region []byte, ok bool) { return nil, nil, false }

// unmapHuge is never called without mappings.
func unmapHuge(region []byte) {}
