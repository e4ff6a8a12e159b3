package dflash

import "github.com/dflash/dflash/kernel"

// MatMul is m.MatMul over any number of rows, in batches of chunkRows (kernel.MatMul is
// specified for 1..32 rows). A row's result does not depend on its batch, so chunking changes no
// bit.
func MatMul(m *kernel.Matrix, y, x []float32, rows int) {
	for s := 0; s < rows; s += chunkRows {
		r := min(chunkRows, rows-s)
		m.MatMul(y[s*m.N:(s+r)*m.N], x[s*m.K:(s+r)*m.K], r)
	}
}
