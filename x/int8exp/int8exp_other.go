//go:build !amd64 || purego

package int8exp

// HasVNNI is false off amd64 (or with -tags purego): products run the Go reference.
var HasVNNI = false

func (m *Matrix) panelsR1(s *Scratch, y []float32, p0, p1 int)  { m.panelsRefR1(s, y, p0, p1) }
func (m *Matrix) panelsR16(s *Scratch, y []float32, p0, p1 int) { m.panelsRefR16(s, y, p0, p1) }
