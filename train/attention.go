package train

import (
	"math"

	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model/nn"
)

// Attention of the block rows of one example, per kv head: the query rows of every block (all
// heads of the kv head's group, nq = R*group rows) meet the context keys in ONE kernel product,
// since every block reads a prefix of the same context rows [0, anchor). Scores past a block's
// anchor are computed and dropped (their probability is stored as an exact zero, which also
// zeroes their gradient). The block's own B keys are few and handled in plain loops.
//
// Probabilities are kept per layer for the backward pass:
//   pc[kh][r*group+g][nc]: context part (zero from the anchor on),
//   pb[(r*heads+h)*B + t]: block part.

// attnScratch is per-worker scratch of the attention products.
type attnScratch struct {
	qs, do, ob, dqc  []float32 // [nq][hd] gathered queries, d outputs, outputs, d queries
	kc, kcT, vc, vcT []float32 // one kv head's context keys/values, and transposes
	dPc              []float32 // [nq][nc]
	dkcT, dvcT       []float32 // [hd][nc]
	sb, dsb          []float32 // [B] block scores / their gradients
}

// gatherHead copies kv head kh of rows [n][kw] into dst [n][hd] and its transpose into dstT
// [hd][n] (either may be nil).
func gatherHead(dst, dstT, src []float32, n, kw, kh, hd int) {
	for j := 0; j < n; j++ {
		row := src[j*kw+kh*hd : j*kw+(kh+1)*hd]
		if dst != nil {
			copy(dst[j*hd:(j+1)*hd], row)
		}
		if dstT != nil {
			for e, v := range row {
				dstT[e*n+j] = v
			}
		}
	}
}

func (w *work) attnForward(s *layerState, c DraftConfig, anchors []int, nc int) {
	B, hd, heads, kvh := c.BlockSize, c.HeadDim, c.Heads, c.KVHeads
	group := heads / kvh
	qw, kw := heads*hd, kvh*hd
	R := len(anchors) * B
	nq := R * group
	scale := float32(1 / math.Sqrt(float64(hd)))
	a := &w.attn
	s.pc = resize(s.pc, kvh*nq*max(nc, 1))
	s.pb = resize(s.pb, R*heads*B)
	a.qs, a.ob = resize(a.qs, nq*hd), resize(a.ob, nq*hd)
	a.kc, a.vcT = resize(a.kc, nc*hd), resize(a.vcT, nc*hd)
	a.sb = resize(a.sb, B)
	for kh := 0; kh < kvh; kh++ {
		for r := 0; r < R; r++ {
			copy(a.qs[r*group*hd:(r+1)*group*hd], s.qr[r*qw+kh*group*hd:r*qw+(kh+1)*group*hd])
		}
		pc := s.pc[kh*nq*nc : (kh+1)*nq*nc]
		if nc > 0 {
			gatherHead(a.kc, nil, s.kcr, nc, kw, kh, hd)
			gatherHead(nil, a.vcT, s.vc, nc, kw, kh, hd)
			matmul(kernel.NewF32(a.kc, nc, hd), pc, a.qs, nq)
		}
		for r := 0; r < R; r++ {
			i := r / B
			an := anchors[i]
			for g := 0; g < group; g++ {
				row := r*group + g
				h := kh*group + g
				q := a.qs[row*hd : (row+1)*hd]
				ps := pc[row*nc : (row+1)*nc]
				mx := float32(math.Inf(-1))
				for j := 0; j < an; j++ {
					ps[j] *= scale
					mx = max(mx, ps[j])
				}
				for t := 0; t < B; t++ {
					kb := s.kbr[(i*B+t)*kw+kh*hd : (i*B+t)*kw+(kh+1)*hd]
					var d float32
					for e, v := range q {
						d += v * kb[e]
					}
					a.sb[t] = d * scale
					mx = max(mx, a.sb[t])
				}
				var sum float32
				for j := 0; j < an; j++ {
					ps[j] = nn.Exp32(ps[j] - mx)
					sum += ps[j]
				}
				for t := 0; t < B; t++ {
					a.sb[t] = nn.Exp32(a.sb[t] - mx)
					sum += a.sb[t]
				}
				inv := 1 / sum
				for j := 0; j < an; j++ {
					ps[j] *= inv
				}
				clear(ps[an:])
				pb := s.pb[(r*heads+h)*B : (r*heads+h+1)*B]
				for t := 0; t < B; t++ {
					pb[t] = a.sb[t] * inv
				}
			}
		}
		if nc > 0 {
			matmul(kernel.NewF32(a.vcT, hd, nc), a.ob, pc, nq)
		} else {
			clear(a.ob)
		}
		for r := 0; r < R; r++ {
			i := r / B
			for g := 0; g < group; g++ {
				h := kh*group + g
				out := s.att[r*qw+h*hd : r*qw+(h+1)*hd]
				copy(out, a.ob[(r*group+g)*hd:(r*group+g+1)*hd])
				pb := s.pb[(r*heads+h)*B : (r*heads+h+1)*B]
				for t, p := range pb {
					vb := s.vb[(i*B+t)*kw+kh*hd : (i*B+t)*kw+(kh+1)*hd]
					for e := range out {
						out[e] += p * vb[e]
					}
				}
			}
		}
	}
}

// attnBackward turns d(att) (datt, [R][qw]) into d(q), d(block k, v) and d(context k, v) (the
// roped, normed tensors), which it overwrites.
func (w *work) attnBackward(s *layerState, c DraftConfig, anchors []int, nc int, datt []float32) {
	B, hd, heads, kvh := c.BlockSize, c.HeadDim, c.Heads, c.KVHeads
	group := heads / kvh
	qw, kw := heads*hd, kvh*hd
	R := len(anchors) * B
	nq := R * group
	scale := float32(1 / math.Sqrt(float64(hd)))
	a := &w.attn
	clear(w.dq)
	clear(w.dkb)
	clear(w.dvb)
	clear(w.dkc)
	clear(w.dvc)
	a.qs, a.do, a.dqc = resize(a.qs, nq*hd), resize(a.do, nq*hd), resize(a.dqc, nq*hd)
	a.vc, a.kcT = resize(a.vc, nc*hd), resize(a.kcT, nc*hd)
	a.dPc = resize(a.dPc, nq*nc)
	a.dkcT, a.dvcT = resize(a.dkcT, hd*nc), resize(a.dvcT, hd*nc)
	a.dsb = resize(a.dsb, B)
	for kh := 0; kh < kvh; kh++ {
		for r := 0; r < R; r++ {
			copy(a.qs[r*group*hd:(r+1)*group*hd], s.qr[r*qw+kh*group*hd:r*qw+(kh+1)*group*hd])
			copy(a.do[r*group*hd:(r+1)*group*hd], datt[r*qw+kh*group*hd:r*qw+(kh+1)*group*hd])
		}
		pc := s.pc[kh*nq*nc : (kh+1)*nq*nc]
		if nc > 0 {
			gatherHead(a.vc, nil, s.vc, nc, kw, kh, hd)
			gatherHead(nil, a.kcT, s.kcr, nc, kw, kh, hd)
			matmul(kernel.NewF32(a.vc, nc, hd), a.dPc, a.do, nq) // dP[row][j] = do[row] . v_j
		}
		for r := 0; r < R; r++ {
			i := r / B
			an := anchors[i]
			for g := 0; g < group; g++ {
				row := r*group + g
				h := kh*group + g
				do := a.do[row*hd : (row+1)*hd]
				q := a.qs[row*hd : (row+1)*hd]
				ps := pc[row*nc : (row+1)*nc]
				dps := a.dPc[row*nc : (row+1)*nc]
				pb := s.pb[(r*heads+h)*B : (r*heads+h+1)*B]
				var dot float32
				for j := 0; j < an; j++ {
					dot += ps[j] * dps[j]
				}
				for t := 0; t < B; t++ {
					vb := s.vb[(i*B+t)*kw+kh*hd : (i*B+t)*kw+(kh+1)*hd]
					dvb := w.dvb[(i*B+t)*kw+kh*hd : (i*B+t)*kw+(kh+1)*hd]
					var dp float32
					for e, o := range do {
						dp += o * vb[e]
						dvb[e] += pb[t] * o
					}
					a.dsb[t] = dp
					dot += pb[t] * dp
				}
				for j := 0; j < an; j++ {
					dps[j] = ps[j] * (dps[j] - dot) * scale
				}
				clear(dps[an:])
				dq := w.dq[r*qw+h*hd : r*qw+(h+1)*hd]
				for t := 0; t < B; t++ {
					ds := pb[t] * (a.dsb[t] - dot) * scale
					kb := s.kbr[(i*B+t)*kw+kh*hd : (i*B+t)*kw+(kh+1)*hd]
					dkb := w.dkb[(i*B+t)*kw+kh*hd : (i*B+t)*kw+(kh+1)*hd]
					for e := range dq {
						dq[e] += ds * kb[e]
						dkb[e] += ds * q[e]
					}
				}
			}
		}
		if nc == 0 {
			continue
		}
		// d(q) += dS K; d(K)^T += q^T dS; d(V)^T += do^T P (transposed so the axpys run along
		// the context, the long side).
		matmul(kernel.NewF32(a.kcT, hd, nc), a.dqc, a.dPc, nq)
		for r := 0; r < R; r++ {
			for g := 0; g < group; g++ {
				h := kh*group + g
				dq := w.dq[r*qw+h*hd : r*qw+(h+1)*hd]
				for e, v := range a.dqc[(r*group+g)*hd : (r*group+g+1)*hd] {
					dq[e] += v
				}
			}
		}
		clear(a.dkcT)
		clear(a.dvcT)
		outerAdd(a.dkcT, a.qs, a.dPc, nq, hd, nc)
		outerAdd(a.dvcT, a.do, pc, nq, hd, nc)
		for j := 0; j < nc; j++ {
			dk := w.dkc[j*kw+kh*hd : j*kw+(kh+1)*hd]
			dv := w.dvc[j*kw+kh*hd : j*kw+(kh+1)*hd]
			for e := range dk {
				dk[e] += a.dkcT[e*nc+j]
				dv[e] += a.dvcT[e*nc+j]
			}
		}
	}
}
