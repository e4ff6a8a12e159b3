package kernel

// The portable path: plain Go, every output element accumulated in input order by the same loop
// whatever the batch width or panel range.

func panelsGo(m *Matrix, y, x []float32, rows, p0, p1 int) {
	n, k, pl := m.N, m.K, m.panelLen()
	var acc [Panel]float32
	for pj := p0; pj < p1; pj++ {
		lanes := min(Panel, n-pj*Panel)
		for r := 0; r < rows; r++ {
			xr := x[r*k : (r+1)*k]
			acc = [Panel]float32{}
			if m.DType == F32 {
				panel := m.f32[pj*pl : (pj+1)*pl]
				for i, xv := range xr {
					w := panel[i*Panel : i*Panel+Panel]
					for l := range acc {
						acc[l] += w[l] * xv
					}
				}
			} else {
				panel := m.bf16[pj*pl : (pj+1)*pl]
				for i, xv := range xr {
					w := panel[i/2*2*Panel+i%2:]
					for l := range acc {
						acc[l] += BF16ToF32(w[2*l]) * xv
					}
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

// sumGo is the portable read loop of the bandwidth probe.
func sumGo(a []float32) float32 {
	var s [8]float32
	for i := 0; i+8 <= len(a); i += 8 {
		for l := range s {
			s[l] += a[i+l]
		}
	}
	return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))
}
