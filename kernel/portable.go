package kernel

// The portable path: plain Go, every row computed by the same loop whatever the batch width.

func matmulGo(m *Matrix, y, x []float32, rows int) {
	n, k := m.N, m.K
	if m.DType == F32 {
		for r := 0; r < rows; r++ {
			xr := x[r*k : (r+1)*k]
			yr := y[r*n : (r+1)*n]
			for j := 0; j < n; j++ {
				yr[j] = dotGo(m.f32[j*k:(j+1)*k], xr)
			}
		}
		return
	}
	var acc [Panel]float32
	for pj := 0; pj*Panel < n; pj++ {
		panel := m.bf16[pj*k*Panel : (pj+1)*k*Panel]
		lanes := min(Panel, n-pj*Panel)
		for r := 0; r < rows; r++ {
			xr := x[r*k : (r+1)*k]
			acc = [Panel]float32{}
			for i, xv := range xr {
				w := panel[i*Panel : i*Panel+Panel]
				for l := range acc {
					acc[l] += BF16ToF32(w[l]) * xv
				}
			}
			copy(y[r*n+pj*Panel:r*n+pj*Panel+lanes], acc[:lanes])
		}
	}
}

func dotGo(a, b []float32) float32 {
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func axpyGo(y []float32, a float32, x []float32) {
	for i := range y {
		y[i] += a * x[i]
	}
}
