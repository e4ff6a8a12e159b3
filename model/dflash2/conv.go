package dflash2

// GroupedConv is the grouped dynamic depthwise convolution of one side of a DFlash2 sublayer
// wrapper, over rows rows of hidden channels laid out as consecutive blocks of blockLen rows:
//
//	out[i,c] = sum_{t<taps} (base[t,c] + delta[i*deltaStride + t*groups + c/group]) * x[i-t, c]
//
// where the x[i-t] term is dropped when row i-t lies in an earlier block (i%blockLen < t): the
// convolution is causal inside a block and never crosses a block boundary. base is one side of
// base_kernel ([taps][hidden]); delta points at the row's coefficients of that side (the caller
// offsets it by side*taps*groups within the kernel_projection output, deltaStride = 2*taps*groups).
// out must not alias x. The trainer uses the same function on many blocks at once.
func GroupedConv(out, x, delta, base []float32, rows, blockLen, hidden, taps, group, deltaStride int) {
	groups := hidden / group
	for i := 0; i < rows; i++ {
		o := out[i*hidden : (i+1)*hidden]
		d := delta[i*deltaStride : i*deltaStride+taps*groups]
		inBlock := i % blockLen
		for t := 0; t < taps; t++ {
			bt := base[t*hidden : (t+1)*hidden]
			dt := d[t*groups : (t+1)*groups]
			if t > inBlock {
				break // tap 0 always applies, so o is initialised
			}
			xs := x[(i-t)*hidden : (i-t+1)*hidden]
			for g := 0; g < groups; g++ {
				dg := dt[g]
				lo, hi := g*group, (g+1)*group
				if t == 0 {
					for c := lo; c < hi; c++ {
						o[c] = (bt[c] + dg) * xs[c]
					}
				} else {
					for c := lo; c < hi; c++ {
						o[c] += (bt[c] + dg) * xs[c]
					}
				}
			}
		}
	}
}
